//! Records the allocator's history while a few buffers come and go, and writes the snapshot as
//! PyTorch's `_dump_snapshot` does: a pickle for pytorch.org/memory_viz, `workbook viz` and
//! `workbook replay`.
//!
//! `cargo run -p gpumem --example dump_snapshot [-- FILE.pickle]` (default: snapshot.pickle).
//! Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu).

use anyhow::Context;
use gpumem::{Device, f16};

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "snapshot.pickle".into());
    let dev = Device::from_env()?;
    // torch.cuda.memory._record_memory_history(): every entry kept.
    dev.record_memory_history(true);
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
        "wrote {path}: {} segments, {} trace entries, on {dev}",
        s.segments.len(),
        s.trace.len()
    );
    drop((weights, small));
    Ok(())
}
