//! Records the allocation traces of the training loops of chapters 5 (gradient accumulation) and 6
//! (mixed precision) with `record_memory_history`, and writes them as replayable traces
//! (`gpumem::trace`) for `workbook replay` and `bench/torch_replay.py`.
//!
//! `cargo run --release -p gpumem --example record_training_trace [-- OUT_DIR]`
//! (default OUT_DIR: `bench/traces`). Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one,
//! else cpu); the allocation sequence does not depend on the device, so the traces do not either.
//!
//! The loops are the chapters' recipes on a wider model than their walkthroughs use, so that the
//! large pool is exercised too: activations of 2 MiB in f32, 1 MiB in f16/bf16.

use anyhow::Context;
use gpumem::Device;
use gpumem::ops::{self, Float, Mlp, MlpGrads, XorShift};
use gpumem::trace::AllocTrace;
use std::path::PathBuf;

/// The model: 512 inputs, two hidden layers of 1024, 64 outputs.
const SIZES: [usize; 4] = [512, 1024, 1024, 64];
/// Examples per optimizer step.
const BATCH: usize = 512;
/// Optimizer steps per trace.
const STEPS: usize = 3;

/// Rounds host values to `T` and uploads them (a data loader that yields `T`).
fn upload<T: Float>(dev: &Device, values: &[f32]) -> gpumem::Result<gpumem::Buffer<T>> {
    let rounded: Vec<T> = values.iter().map(|&v| T::from_f32(v)).collect();
    dev.from_slice(&rounded)
}

/// Chapter 5's step: zero the gradients, then for each of `k` micro-batches upload it, forward,
/// loss, backward with the loss weighted 1/k, drop it; then one SGD step.
fn accumulation_step(
    dev: &Device,
    model: &mut Mlp,
    grads: &mut MlpGrads,
    x: &[f32],
    t: &[f32],
    k: usize,
) -> anyhow::Result<()> {
    grads.zero()?;
    let rows = BATCH / k;
    let (i, o) = (SIZES[0], SIZES[3]);
    for s in 0..k {
        let xb = upload::<f32>(dev, &x[s * rows * i..(s + 1) * rows * i])?;
        let tb = upload::<f32>(dev, &t[s * rows * o..(s + 1) * rows * o])?;
        let (y, saved) = model.forward(&xb, rows)?;
        let _loss = ops::mse_loss(&y, &tb)?;
        let grad_y = ops::mse_loss_backward(&y, &tb, 1.0 / k as f32)?;
        model.backward(saved, &grad_y, grads)?;
    }
    model.sgd_step(grads, 1e-3)?;
    Ok(())
}

/// Chapter 6's step in `T`: zero the gradients, forward and loss in `T`, backward of the scaled
/// loss, unscale and check for inf/NaN, then SGD with momentum (`velocity` is the optimizer state).
#[allow(clippy::too_many_arguments)] // the pieces of one training step, named as in chapter 6
fn mixed_precision_step<T: Float>(
    dev: &Device,
    model: &mut Mlp,
    grads: &mut MlpGrads,
    velocity: &mut MlpGrads,
    x: &[f32],
    t: &[f32],
    scale: f32,
) -> anyhow::Result<()> {
    let xb = upload::<T>(dev, x)?;
    let tb = upload::<T>(dev, t)?;
    grads.zero()?;
    let (y, saved) = model.forward(&xb, BATCH)?;
    let _loss = ops::mse_loss(&y, &tb)?;
    let grad_y = ops::mse_loss_backward(&y, &tb, scale)?;
    model.backward(saved, &grad_y, grads)?;
    drop((y, grad_y));
    let found_inf = grads.unscale_and_check(1.0 / scale)?;
    if !found_inf {
        velocity.scale(0.9)?;
        velocity.accumulate(grads, 1.0)?;
        model.sgd_step(velocity, 1e-3)?;
    }
    Ok(())
}

/// Which loop a trace records.
#[derive(Clone, Copy)]
enum Run {
    Accumulate(usize),
    F16,
    Bf16,
}

/// Runs `STEPS` steps of `run` from a fresh model with history on; returns the trace.
fn record(dev: &Device, run: Run, description: &str) -> anyhow::Result<AllocTrace> {
    let mut rng = XorShift::new(7);
    let x = rng.nonzero_vec(BATCH * SIZES[0], 0.1, 1.0);
    let t = rng.nonzero_vec(BATCH * SIZES[3], 0.1, 1.0);
    dev.empty_cache();
    dev.record_memory_history(true);
    {
        let mut model = Mlp::new(dev, &SIZES, &mut rng)?;
        let mut grads = model.zero_grads()?;
        let mut velocity = match run {
            Run::Accumulate(_) => None,
            Run::F16 | Run::Bf16 => Some(model.zero_grads()?),
        };
        for _ in 0..STEPS {
            match (run, velocity.as_mut()) {
                (Run::Accumulate(k), _) => {
                    accumulation_step(dev, &mut model, &mut grads, &x, &t, k)?
                }
                (Run::F16, Some(v)) => mixed_precision_step::<gpumem::f16>(
                    dev, &mut model, &mut grads, v, &x, &t, 1024.0,
                )?,
                (Run::Bf16, Some(v)) => mixed_precision_step::<gpumem::bf16>(
                    dev, &mut model, &mut grads, v, &x, &t, 1.0,
                )?,
                _ => unreachable!("mixed precision runs have a velocity"),
            }
        }
        dev.synchronize()?;
    }
    let snapshot = dev.snapshot();
    dev.record_memory_history(false);
    dev.empty_cache();
    let description = format!(
        "{description}. MLP {SIZES:?}, batch {BATCH}, {STEPS} optimizer steps, from model creation to \
         the model's drop. Recorded with record_memory_history on {dev} by \
         `cargo run --release -p gpumem --example record_training_trace`; sizes are block sizes."
    );
    let trace = AllocTrace::from_snapshot(&snapshot, description);
    trace.validate().context("the recorded trace")?;
    Ok(trace)
}

fn main() -> anyhow::Result<()> {
    let out = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/traces"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let runs = [
        (
            "ch05-full-batch-f32",
            Run::Accumulate(1),
            "Chapter 5, no accumulation: each step uploads the batch, runs forward, loss and backward in f32, then SGD",
        ),
        (
            "ch05-accumulate-4-f32",
            Run::Accumulate(4),
            "Chapter 5, gradient accumulation: each step runs the batch as 4 micro-batches of 128 rows (upload, forward, loss, backward with the loss weighted 1/4, drop), then SGD",
        ),
        (
            "ch06-f16-loss-scaling",
            Run::F16,
            "Chapter 6, mixed precision in f16: data rounded to f16 and uploaded, forward with cast weights, loss scaled by 1024, f32 gradients unscaled and checked for inf/NaN, SGD with momentum (f32 velocity)",
        ),
        (
            "ch06-bf16",
            Run::Bf16,
            "Chapter 6, mixed precision in bf16: as the f16 run with a loss scale of 1 (bf16 has f32's range)",
        ),
    ];
    for (name, run, description) in runs {
        let trace = record(&dev, run, description)?;
        let summary = trace.validate()?;
        let path = out.join(format!("{name}.json"));
        std::fs::write(&path, trace.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "{}: {} events ({} allocs, {} frees, {} live at the end)",
            path.display(),
            trace.events.len(),
            summary.allocs,
            summary.frees,
            summary.live_at_end
        );
    }
    Ok(())
}
