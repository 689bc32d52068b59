//! Chapter 3 walkthrough: what `drop` and `empty_cache` do to allocated, reserved and the driver's
//! view. Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu) and works unsolved.
//!
//! `cargo run -p ch03-drop-and-empty-cache --example walkthrough`

use anyhow::Context;
use ch03_drop_and_empty_cache::{MIB, Scenario, TinyLinear, measure};
use gpumem::Device;

/// Exact sizes: whole MiB as MiB, anything else in bytes.
fn exact(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} B")
    }
}

/// Prints one line: allocated, reserved, and what the driver counts as used on the whole device.
fn show(dev: &Device, step: &str) -> anyhow::Result<()> {
    let (free, total) = dev.mem_get_info().context("reading the driver's view")?;
    println!(
        "{step:<44} allocated {:>9}  reserved {:>7}  driver used {:>7}",
        exact(dev.memory_allocated()),
        exact(dev.memory_reserved()),
        exact(total - free),
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})\n");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);

    dev.record_annotation("1. The 0.0004 MiB model");
    println!("== The 0.0004 MiB model ==");
    show(&dev, "start")?;
    let model = TinyLinear::new(&dev, 10, 10)?;
    let bytes = model.parameter_bytes();
    println!(
        "TinyLinear(10, 10): {} parameters, {} B = {} MiB of data",
        model.numel(),
        bytes,
        bytes as f64 / MIB as f64
    );
    let stats = dev.memory_stats();
    println!(
        "requested_bytes {} B, allocated_bytes {} B, reserved_bytes {} B",
        stats.get("requested_bytes.all.current").unwrap_or(0),
        stats.get("allocated_bytes.all.current").unwrap_or(0),
        stats.get("reserved_bytes.all.current").unwrap_or(0),
    );
    show(&dev, "model loaded")?;
    let (free, total) = dev.mem_get_info()?;
    println!(
        "driver used - reserved = {} (cpu: always 0; cuda: the CUDA context and other processes)",
        exact((total - free).saturating_sub(dev.memory_reserved()))
    );
    dev.empty_cache();
    show(&dev, "empty_cache() while the model lives")?;
    drop(model);
    show(&dev, "drop(model)")?;
    dev.empty_cache();
    show(&dev, "empty_cache()")?;

    dev.record_annotation("2. The wrong order");
    println!("\n== The wrong order: empty_cache, then drop ==");
    let buf = dev.alloc::<f32>((4 * MIB / 4) as usize)?;
    show(&dev, "4 MiB buffer")?;
    dev.empty_cache();
    show(&dev, "empty_cache() while it lives")?;
    drop(buf);
    show(&dev, "drop(buf)")?;
    dev.empty_cache();
    show(&dev, "empty_cache() again")?;

    dev.record_annotation("3. A tiny live buffer pins its segment");
    println!("\n== A tiny live buffer pins its whole segment ==");
    let loss = dev.alloc::<f32>(1)?;
    let batch = dev.alloc::<f32>((MIB / 4) as usize)?;
    show(&dev, "4 B loss + 1 MiB batch (one 2 MiB segment)")?;
    drop(batch);
    dev.empty_cache();
    show(&dev, "drop(batch); empty_cache()")?;
    // The chapter's pictures end here: the 4 B loss holds its whole 2 MiB segment.
    snapshot.write(&dev)?;
    drop(loss);
    dev.empty_cache();
    show(&dev, "drop(loss); empty_cache()")?;

    dev.record_annotation("4. Every scenario");
    println!("\n== Every scenario of the prediction exercise ==");
    println!(
        "{:<28} {:>12} {:>12} {:>28}",
        "scenario", "allocated", "reserved", "reserved after empty_cache"
    );
    for scenario in Scenario::ALL {
        dev.empty_cache();
        let o = measure(scenario, &dev)?;
        println!(
            "{:<28} {:>12} {:>12} {:>28}",
            scenario.name(),
            exact(o.allocated),
            exact(o.reserved),
            exact(o.reserved_after_empty_cache),
        );
    }
    dev.empty_cache();
    Ok(())
}
