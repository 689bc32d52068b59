//! Chapter 7 walkthrough: pageable and pinned copies, counted and timed from the host's side; the
//! caching host allocator; one staging buffer reused for many batches.
//!
//! Run: `cargo run -p ch07-pinned-memory --example walkthrough`
//! On a GPU: `GPUMEM_DEVICE=cuda cargo run -p ch07-pinned-memory --example walkthrough`

use anyhow::Context;
use gpumem::{CopyCount, Device, HostMemoryStats, format_bytes};
use std::time::Instant;

/// `n copies, bytes` for one counter.
fn count(c: CopyCount) -> String {
    let noun = if c.copies == 1 { "copy" } else { "copies" };
    format!("{} {noun}, {}", c.copies, format_bytes(c.bytes))
}

/// The host-to-device counter and, among those copies, the pinned ones.
fn uploads(dev: &Device) -> String {
    let t = dev.transfer_stats();
    format!(
        "host->device {} (of which pinned: {})",
        count(t.host_to_device),
        count(t.pinned)
    )
}

/// The pinned host allocator's headline numbers, under torch 2.15's keys (`allocated_bytes` is
/// the pool: blocks handed out or cached).
fn host(h: HostMemoryStats) -> String {
    format!(
        "active_requests {}, active_bytes {}, allocated_bytes {}, num_host_alloc {}, \
         num_host_free {}",
        h.active_requests.current,
        format_bytes(h.active_bytes.current),
        format_bytes(h.allocated_bytes.current),
        h.num_host_alloc,
        h.num_host_free
    )
}

/// Milliseconds since `t`.
fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("GPUMEM_DEVICE names a device that cannot be opened")?;
    println!("Device: {dev}");
    let stream = dev.stream()?;

    dev.record_annotation("1. Pageable and pinned");
    // ANCHOR: pageable_vs_pinned
    println!("\nStep 1. 4 MiB to the device, from a Vec (pageable) and from pinned memory");
    let n = 1 << 20;
    let pageable: Vec<f32> = vec![0.5; n];
    let mut pinned = dev.alloc_pinned::<f32>(n)?;
    pinned.as_mut_slice().fill(0.5);
    println!("  pinned buffer page-locked: {}", pinned.is_page_locked());
    let mut on_device = dev.alloc::<f32>(n)?;
    // One untimed copy by each path first, so that neither timing pays for first-touch page faults.
    on_device.copy_from_slice(&pageable)?;
    pinned.copy_to_device_async(&mut on_device, &stream)?;
    stream.synchronize()?;
    dev.reset_transfer_stats();

    let t = Instant::now();
    on_device.copy_from_slice(&pageable)?;
    println!(
        "  pageable: the call returned after {:.3} ms, with the copy done",
        ms(t)
    );
    println!("    {}", uploads(&dev));

    let t = Instant::now();
    pinned.copy_to_device_async(&mut on_device, &stream)?;
    let returned = ms(t);
    stream.synchronize()?;
    println!(
        "  pinned:   the call returned after {returned:.3} ms; stream.synchronize() returned after {:.3} ms",
        ms(t)
    );
    println!("    {}", uploads(&dev));
    drop((pinned, on_device));
    // ANCHOR_END: pageable_vs_pinned

    // The chapter's pictures begin here, with step 1's device segment and pinned block given
    // back: the allocator's history and the pinned blocks' and streams' activity start at step 2.
    dev.empty_cache();
    dev.empty_host_cache();
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);
    dev.record_annotation("2. The caching host allocator");
    // ANCHOR: host_cache
    println!("\nStep 2. The caching host allocator: sizes round up to a power of two");
    for bytes in [1, 4096, 4097, 100_000] {
        let block = dev.alloc_pinned::<u8>(bytes)?.block_bytes();
        println!("  alloc_pinned::<u8>({bytes}) -> a block of {block} bytes");
    }
    dev.empty_host_cache();
    dev.reset_host_memory_stats();
    let a = dev.alloc_pinned::<u8>(100_000)?;
    println!("  a = 100,000 bytes:   {}", host(dev.host_memory_stats()));
    drop(a);
    println!("  drop(a):             {}", host(dev.host_memory_stats()));
    let b = dev.alloc_pinned::<u8>(70_000)?;
    println!("  b = 70,000 bytes:    {}", host(dev.host_memory_stats()));
    drop(b);
    dev.empty_host_cache();
    println!(
        "  drop(b), empty_host_cache(): {}",
        host(dev.host_memory_stats())
    );
    // ANCHOR_END: host_cache

    // ANCHOR: one_staging_buffer
    println!("\nStep 3. One pinned staging buffer for 8 batches of 64 Ki f32, one after another");
    dev.reset_transfer_stats();
    dev.reset_host_memory_stats();
    dev.reset_peak_memory_stats();
    dev.record_annotation("3. One pinned staging buffer");
    let batch_len = 64 * 1024;
    let mut staging = dev.alloc_pinned::<f32>(batch_len)?;
    let mut checksum = 0.0f64;
    for i in 0..8 {
        // Writing waits for the previous batch's copy out of this buffer: no overlap.
        staging.as_mut_slice().fill(i as f32);
        let mut batch = dev.alloc::<f32>(batch_len)?;
        staging.copy_to_device_async(&mut batch, &stream)?;
        stream.synchronize()?;
        checksum += f64::from(gpumem::ops::sum(&batch)?);
        if i == 7 {
            // The pictures end here, with the last batch on the device.
            snapshot.write(&dev)?;
        }
    }
    drop(staging);
    println!("  sum over all batches: {checksum}");
    println!("  {}", uploads(&dev));
    println!("  host: {}", host(dev.host_memory_stats()));
    println!(
        "  device: memory_allocated {}, max_memory_allocated {}",
        format_bytes(dev.memory_allocated()),
        format_bytes(dev.max_memory_allocated())
    );
    // ANCHOR_END: one_staging_buffer
    Ok(())
}
