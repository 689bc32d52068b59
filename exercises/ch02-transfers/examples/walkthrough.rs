//! Chapter 2 walkthrough: copies between host and device, counted, and what dropping the host
//! copy really frees.
//!
//! Run: `cargo run -p ch02-transfers --example walkthrough`
//! On a GPU: `GPUMEM_DEVICE=cuda cargo run -p ch02-transfers --example walkthrough`

use anyhow::Context;
use gpumem::{CopyCount, Device, format_bytes};

/// `n copies / bytes` for one direction.
fn count(c: CopyCount) -> String {
    let noun = if c.copies == 1 { "copy" } else { "copies" };
    format!("{} {noun}, {}", c.copies, format_bytes(c.bytes))
}

/// The three copy counters of a device.
fn copies(dev: &Device) -> String {
    let t = dev.transfer_stats();
    format!(
        "host->device {} | device->host {} | device->device {}",
        count(t.host_to_device),
        count(t.device_to_host),
        count(t.device_to_device)
    )
}

/// The allocator's two headline numbers.
fn memory(dev: &Device) -> String {
    format!(
        "memory_allocated {}, memory_reserved {}",
        format_bytes(dev.memory_allocated()),
        format_bytes(dev.memory_reserved())
    )
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("GPUMEM_DEVICE names a device that cannot be opened")?;
    println!("Device: {dev}");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);

    dev.record_annotation("1. Build on the host, copy to the device");
    // ANCHOR: host_to_device
    println!("\nStep 1. Build 1 Mi f32 (4 MiB) on the host, then copy them to the device");
    let host: Vec<f32> = vec![0.5; 1 << 20];
    let x_gpu = dev.from_slice(&host)?;
    println!("  copies: {}", copies(&dev));
    println!("  {}", memory(&dev));
    // ANCHOR_END: host_to_device

    dev.record_annotation("2. drop(host)");
    // ANCHOR: myth
    println!("\nStep 2. drop(host), torch's `del x`: the host copy goes, the device copy stays");
    drop(host);
    println!("  after drop(host): {}", memory(&dev));
    dev.empty_cache();
    println!("  after empty_cache(): {}", memory(&dev));
    println!("  (x_gpu is alive: its block is in use, so there is nothing to release)");
    drop(x_gpu);
    println!("  after drop(x_gpu): {}", memory(&dev));
    dev.empty_cache();
    println!("  after empty_cache(): {}", memory(&dev));
    // ANCHOR_END: myth

    dev.record_annotation("3. Create the data where it is used");
    // ANCHOR: create_on_device
    println!("\nStep 3. Create the data where it is used: dev.alloc::<f32>(1 << 20)");
    dev.reset_transfer_stats();
    let zeros = dev.alloc::<f32>(1 << 20)?;
    println!("  copies: {}", copies(&dev));
    println!("  {}", memory(&dev));
    drop(zeros);
    // ANCHOR_END: create_on_device

    dev.record_annotation("4. Row by row, then one batch");
    // ANCHOR: batching
    println!("\nStep 4. 64 rows of 4096 f32: row by row, then as one batch");
    let rows: Vec<Vec<f32>> = (0..64).map(|r| vec![r as f32; 4096]).collect();
    dev.reset_transfer_stats();
    let one_by_one = rows
        .iter()
        .map(|row| dev.from_slice(row))
        .collect::<gpumem::Result<Vec<_>>>()?;
    println!(
        "  row by row: {}",
        count(dev.transfer_stats().host_to_device)
    );
    drop(one_by_one);
    dev.reset_transfer_stats();
    let batch = dev.from_slice(&rows.concat())?;
    println!(
        "  one batch:  {}",
        count(dev.transfer_stats().host_to_device)
    );
    // ANCHOR_END: batching

    dev.record_annotation("5. to() on the same device, try_clone()");
    // ANCHOR: to_same_device
    println!("\nStep 5. to() on the same device, then try_clone()");
    dev.reset_transfer_stats();
    let before = dev.memory_allocated();
    let same = batch.to(&dev)?;
    println!(
        "  same = batch.to(&dev):     shares memory with batch: {}",
        same.shares_memory_with(&batch)
    );
    println!(
        "    device->device {}, memory_allocated +{}",
        count(dev.transfer_stats().device_to_device),
        format_bytes(dev.memory_allocated() - before)
    );
    let cloned = batch.try_clone()?;
    println!(
        "  cloned = batch.try_clone(): shares memory with batch: {}",
        cloned.shares_memory_with(&batch)
    );
    println!(
        "    device->device {}, memory_allocated +{}",
        count(dev.transfer_stats().device_to_device),
        format_bytes(dev.memory_allocated() - before)
    );
    // ANCHOR_END: to_same_device

    dev.record_annotation("6. to() onto another device");
    // ANCHOR: to_other_device
    println!("\nStep 6. to() onto another device");
    if dev.is_cuda() {
        let cpu = Device::cpu();
        dev.reset_transfer_stats();
        cpu.reset_transfer_stats();
        let on_cpu = batch.to(&cpu)?;
        println!(
            "  batch.to(&cpu): {} elements on {}",
            on_cpu.len(),
            on_cpu.device()
        );
        println!("  {dev} copies: {}", copies(&dev));
        println!("  cpu copies: {}", copies(&cpu));
    } else {
        println!("  skipped: {dev} is the only device here (run with GPUMEM_DEVICE=cuda on a GPU)");
    }
    // ANCHOR_END: to_other_device
    // The chapter's pictures end here, with `batch` and `cloned` alive.
    snapshot.write(&dev)?;
    Ok(())
}
