//! Records the allocator's history while a few buffers come and go, and writes the snapshot as
//! PyTorch's `_dump_snapshot` does: a pickle for pytorch.org/memory_viz, `workbook viz` and
//! `workbook replay`.
//!
//! `cargo run -p gpumem --example dump_snapshot [-- [--pinned] FILE.pickle]` (default:
//! snapshot.pickle). `--pinned` also records the pinned host allocator (torch 2.15's
//! `record_pinned_host_memory=True`): a pinned staging buffer is used, and one is freed to the
//! cache, so the file's `host_segments` and `host_traces` hold them.
//! Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu).

use anyhow::Context;
use gpumem::{Device, HistoryOptions, f16};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: dump_snapshot [--pinned] [FILE.pickle]   (default: snapshot.pickle)");
        return Ok(());
    }
    if let Some(unknown) = args.iter().find(|a| a.starts_with('-') && *a != "--pinned") {
        anyhow::bail!(
            "dump_snapshot: unknown option {unknown} (usage: dump_snapshot [--pinned] [FILE.pickle])"
        );
    }
    let pinned = args.iter().any(|a| a == "--pinned");
    let path = args
        .iter()
        .find(|a| *a != "--pinned")
        .cloned()
        .unwrap_or_else(|| "snapshot.pickle".into());
    let dev = Device::from_env()?;
    // torch.cuda.memory._record_memory_history(): every entry kept; with --pinned,
    // record_pinned_host_memory=True as well.
    dev.record_memory_history_options(HistoryOptions {
        record_pinned_host_memory: pinned,
        ..HistoryOptions::default()
    })?;
    let mut staging = None;
    if pinned {
        drop(dev.alloc_pinned::<u8>(4096)?); // a 4 KiB block, freed to the cache
        let mut batch = dev.alloc_pinned::<f32>(25_000)?; // 100,000 B: a 128 KiB block
        batch.as_mut_slice().fill(1.0);
        let mut on_device = dev.alloc::<f32>(25_000)?;
        batch.copy_to_device_async(&mut on_device, &dev.stream()?)?;
        staging = Some((batch, on_device));
    }
    let weights = dev.alloc::<f32>(1 << 20)?; // 4 MiB: the large pool
    let side = dev.stream()?;
    {
        let activations = dev.alloc::<f32>(300 << 10)?; // 1.17 MiB
        activations.record_stream(&side); // its free waits for the side stream's work
    }
    let small = dev.alloc::<f16>(1000)?; // 2000 B: the small pool
    dev.dump_snapshot(&path)
        .with_context(|| format!("writing {path}"))?;
    let s = dev.snapshot();
    println!(
        "wrote {path}: {} segments, {} trace entries, {} pinned host blocks, {} host trace \
         entries, on {dev}",
        s.segments.len(),
        s.trace.len(),
        s.host_segments.len(),
        s.host_traces.len()
    );
    drop((weights, small, staging));
    Ok(())
}
