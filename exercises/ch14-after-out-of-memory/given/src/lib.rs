//! Chapter 14's given code: the training step that runs out of memory and the measurement of
//! what `empty_cache()` costs. A crate of its own, outside your `src/`, so that `check` and
//! `grade` run and measure with this official copy; your crate re-exports it.

pub use ch14_predict::{Cost, Steps};
use gpumem::{Buffer, Device, Error, Result};

// ANCHOR: step
/// What a finished training step holds.
pub struct Step {
    /// `batch × sample_bytes` bytes.
    pub activations: Buffer<u8>,
    /// `2 × batch × sample_bytes` bytes.
    pub workspace: Buffer<u8>,
}

/// A step that ran out of memory, and what it keeps alive: like a Python exception, whose
/// traceback holds the frames of the failed step and so their tensors.
pub struct StepFailure {
    /// The error.
    pub error: Error,
    /// The buffers the step had allocated when it failed.
    pub frames: Vec<Buffer<u8>>,
}

/// One training step of `batch` samples: the activations, then a workspace twice their size.
pub fn train_step(
    dev: &Device,
    batch: usize,
    sample_bytes: usize,
) -> std::result::Result<Step, StepFailure> {
    let activations = dev
        .alloc::<u8>(batch * sample_bytes)
        .map_err(|error| StepFailure {
            error,
            frames: Vec::new(),
        })?;
    match dev.alloc::<u8>(2 * batch * sample_bytes) {
        Ok(workspace) => Ok(Step {
            activations,
            workspace,
        }),
        Err(error) => Err(StepFailure {
            error,
            frames: vec![activations],
        }),
    }
}
// ANCHOR_END: step

// ANCHOR: measure
/// Runs `steps` on `dev` from an emptied cache and returns what the statistics counted (the peak
/// above what was reserved before, by buffers held elsewhere); the cache is emptied afterwards.
pub fn measure_refill(dev: &Device, steps: Steps) -> Result<Cost> {
    dev.empty_cache();
    dev.reset_peak_memory_stats();
    dev.reset_accumulated_memory_stats();
    let held_before = dev.memory_reserved();
    for _ in 0..steps.steps {
        let buffers = (0..steps.buffers)
            .map(|_| dev.alloc::<u8>(steps.size as usize))
            .collect::<Result<Vec<_>>>()?;
        drop(buffers);
        if steps.empty_cache {
            dev.empty_cache();
        }
    }
    let stats = dev.memory_stats();
    let cost = Cost {
        device_allocs: stats.get("num_device_alloc").unwrap_or(0),
        device_frees: stats.get("num_device_free").unwrap_or(0),
        peak_reserved: dev.max_memory_reserved() - held_before,
    };
    dev.empty_cache();
    Ok(cost)
}
// ANCHOR_END: measure
