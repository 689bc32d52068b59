//! Chapter 1 walkthrough: ask the driver, open a device, and see what opening it and a first
//! allocation cost, step by step.
//!
//! Run: `cargo run -p ch01-availability --example walkthrough`
//! On a GPU: `GPUMEM_DEVICE=cuda cargo run -p ch01-availability --example walkthrough`

use anyhow::Context;
use gpumem::{Device, format_bytes};
use std::time::Instant;

/// Milliseconds since `start`.
fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// The allocator's side: bytes in live blocks, bytes reserved, segments.
fn allocator_line(dev: &Device) -> String {
    let segments = dev.memory_stats().get("segment.all.current").unwrap_or(0);
    format!(
        "memory_allocated {}, memory_reserved {}, segments {segments}",
        format_bytes(dev.memory_allocated()),
        format_bytes(dev.memory_reserved()),
    )
}

fn main() -> anyhow::Result<()> {
    // ANCHOR: probe
    println!("Step 1. Ask the driver (this opens no device and creates no context)");
    let start = Instant::now();
    let available = gpumem::cuda::is_available();
    let probe_ms = ms_since(start);
    println!("  cuda::is_available()       = {available}");
    println!(
        "  cuda::device_count()       = {}",
        gpumem::cuda::device_count()
    );
    println!(
        "  cuda::unavailable_reason() = {:?}",
        gpumem::cuda::unavailable_reason()
    );
    match gpumem::cuda::driver_version() {
        Some(v) => println!(
            "  driver CUDA version        = {}.{}",
            v / 1000,
            v % 1000 / 10
        ),
        None => println!("  driver CUDA version        = none (libcuda did not load)"),
    }
    println!("  probing took {probe_ms:.3} ms (done once per process, then remembered)");
    // ANCHOR_END: probe

    // ANCHOR: open
    let asked = std::env::var("GPUMEM_DEVICE").unwrap_or_else(|_| "unset, so auto".to_string());
    println!("\nStep 2. Open the device GPUMEM_DEVICE names ({asked})");
    let start = Instant::now();
    let dev = Device::from_env().context("GPUMEM_DEVICE names a device that cannot be opened")?;
    let first_open = ms_since(start);
    let start = Instant::now();
    let again = Device::from_env()?;
    let second_open = ms_since(start);
    println!(
        "  first open of {dev}: {first_open:.3} ms; second open: {second_open:.3} ms (same handle: {})",
        dev == again
    );
    let (free, total) = dev.mem_get_info()?;
    if dev.is_cuda() {
        // The first open of a GPU retained its primary context: that is the CUDA context.
        println!(
            "  the driver now reports: total {}, free {}, in use {}",
            format_bytes(total),
            format_bytes(free),
            format_bytes(total - free)
        );
        println!(
            "  (in use = this process's CUDA context + memory of every other process on the GPU;"
        );
        println!("   nvidia-smi lists the context under this process)");
    } else {
        println!(
            "  {dev} has no CUDA context: opening it cost no device memory (free {} of {})",
            format_bytes(free),
            format_bytes(total)
        );
    }
    println!("  allocator: {}", allocator_line(&dev));
    println!("  -> whatever opening cost, no allocator statistic counts it");
    // ANCHOR_END: open
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);

    dev.record_annotation("3. What the device has");
    // ANCHOR: properties
    println!("\nStep 3. What {dev} has (Device::properties)");
    let p = dev.properties()?;
    println!("  name                  = {}", p.name);
    println!(
        "  total_memory          = {} ({} bytes)",
        format_bytes(p.total_memory),
        p.total_memory
    );
    println!("  multi_processor_count = {}", p.multi_processor_count);
    println!("  compute_capability    = {:?}", p.compute_capability);
    // ANCHOR_END: properties

    dev.record_annotation("4. One allocation");
    // ANCHOR: first_allocation
    println!("\nStep 4. One allocation seen by the allocator and by the driver");
    let (free_before, _) = dev.mem_get_info()?;
    let buf = dev.alloc::<f32>(300_000)?;
    let (free_after, _) = dev.mem_get_info()?;
    println!(
        "  dev.alloc::<f32>(300_000): asked for {} bytes",
        buf.size_bytes()
    );
    println!("  block handed out: {} bytes", buf.block_bytes());
    println!("  allocator: {}", allocator_line(&dev));
    println!(
        "  driver: free fell by {} ({} bytes)",
        format_bytes(free_before.saturating_sub(free_after)),
        free_before.saturating_sub(free_after)
    );
    // The chapter's pictures show this moment: one live buffer in the segment it caused.
    snapshot.write(&dev)?;
    drop(buf);
    println!("  after drop(buf): {}", allocator_line(&dev));
    dev.empty_cache();
    println!("  after empty_cache(): {}", allocator_line(&dev));
    // ANCHOR_END: first_allocation
    Ok(())
}
