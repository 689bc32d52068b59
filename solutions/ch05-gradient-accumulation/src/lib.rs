//! Chapter 5: gradient accumulation.
//!
//! Split a batch into micro-batches, let every micro-batch's backward pass add into the same
//! gradient buffers with its loss weighted by its share of the batch, and step the optimizer once
//! per batch. The gradient is the full batch's; the activations are one micro-batch's.
//! Edit the items marked `TODO`.

pub use ch05_predict::{PREDICT_SIZES, StepMemory};
use gpumem::ops::{self, Mlp, MlpGrads, XorShift};
use gpumem::{Buffer, Device, Result};
use std::ops::Range;

// ANCHOR: batch
/// Training examples on the host: inputs `[rows × in_features]` and targets
/// `[rows × out_features]`, row-major, one example per row.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBatch {
    /// The inputs, `rows × in_features` values.
    pub x: Vec<f32>,
    /// The targets, `rows × out_features` values.
    pub t: Vec<f32>,
    /// Values per input row.
    pub in_features: usize,
    /// Values per target row.
    pub out_features: usize,
}

impl HostBatch {
    /// `rows` random examples: inputs and targets of magnitude in [0.1, 1), either sign.
    pub fn random(
        rng: &mut XorShift,
        rows: usize,
        in_features: usize,
        out_features: usize,
    ) -> HostBatch {
        HostBatch {
            x: rng.nonzero_vec(rows * in_features, 0.1, 1.0),
            t: rng.nonzero_vec(rows * out_features, 0.1, 1.0),
            in_features,
            out_features,
        }
    }

    /// Number of examples.
    pub fn rows(&self) -> usize {
        self.x.len().checked_div(self.in_features).unwrap_or(0)
    }
}

/// A batch (or micro-batch) on the device.
pub struct DeviceBatch {
    /// The inputs, `[rows × in_features]`.
    pub x: Buffer<f32>,
    /// The targets, `[rows × out_features]`.
    pub t: Buffer<f32>,
    /// Number of examples.
    pub rows: usize,
}
// ANCHOR_END: batch

// ANCHOR: forward_backward
/// One micro-batch's forward pass, loss and backward pass (torch: `loss = criterion(model(x), t)`,
/// `(loss * loss_weight).backward()`). Adds `loss_weight ×` the gradient of this micro-batch's
/// mean squared error into `grads` and returns the loss, unweighted.
pub fn forward_backward(
    model: &Mlp,
    grads: &mut MlpGrads,
    batch: &DeviceBatch,
    loss_weight: f32,
) -> Result<f32> {
    let (y, saved) = model.forward(&batch.x, batch.rows)?;
    let loss = ops::mse_loss(&y, &batch.t)?;
    let grad_y = ops::mse_loss_backward(&y, &batch.t, loss_weight)?;
    // Backward frees the saved activations as it goes; `y` and `grad_y` go at the end.
    model.backward(saved, &grad_y, grads)?;
    Ok(loss)
}
// ANCHOR_END: forward_backward

// ANCHOR: split
/// The rows of `k` micro-batches that cover `rows` examples in order, as evenly as possible: the
/// first `rows % k` micro-batches get one row more (as `torch.tensor_split` does).
/// Expects `1 <= k <= rows`.
pub fn micro_batch_rows(rows: usize, k: usize) -> Vec<Range<usize>> {
    let (base, extra) = (rows / k, rows % k);
    let mut start = 0;
    (0..k)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let range = start..start + len;
            start += len;
            range
        })
        .collect()
}

/// Copies the examples `rows` of `data` (their inputs and their targets) to the device, and
/// nothing else: one copy for the inputs, one for the targets.
pub fn upload_rows(dev: &Device, data: &HostBatch, rows: Range<usize>) -> Result<DeviceBatch> {
    let x = &data.x[rows.start * data.in_features..rows.end * data.in_features];
    let t = &data.t[rows.start * data.out_features..rows.end * data.out_features];
    Ok(DeviceBatch {
        x: dev.from_slice(x)?,
        t: dev.from_slice(t)?,
        rows: rows.len(),
    })
}
// ANCHOR_END: split

// ANCHOR: accumulate
/// Sets `grads` to the gradient of the mean squared error over all of `data`, computed in `k`
/// micro-batches, only one of which is on the device at a time. Returns the loss of all of `data`.
pub fn accumulate_gradients(
    dev: &Device,
    model: &Mlp,
    grads: &mut MlpGrads,
    data: &HostBatch,
    k: usize,
) -> Result<f32> {
    // Backward adds into `grads`: start from zero, or the last batch's gradient stays in.
    grads.zero()?;
    let rows = data.rows();
    let mut loss = 0.0;
    for range in micro_batch_rows(rows, k) {
        // A micro-batch's mean counts its own rows; its share of the batch's mean is rows_i / rows
        // (1/k when the micro-batches are equal).
        let weight = range.len() as f32 / rows as f32;
        let micro = upload_rows(dev, data, range)?;
        loss += weight * forward_backward(model, grads, &micro, weight)?;
        // `micro` is dropped here, before the next micro-batch is uploaded.
    }
    Ok(loss)
}
// ANCHOR_END: accumulate

// ANCHOR: train
/// The source's loop, done right: one forward and backward pass per micro-batch from `loader`,
/// the loss divided by `accumulation_steps`, and one SGD step followed by zeroing the gradients
/// every `accumulation_steps` micro-batches. Starts by zeroing `grads`. Expects equal-sized
/// micro-batches, as many as a multiple of `accumulation_steps`. Returns the number of steps.
pub fn train_accumulated(
    dev: &Device,
    model: &mut Mlp,
    grads: &mut MlpGrads,
    loader: &[HostBatch],
    accumulation_steps: usize,
    lr: f32,
) -> Result<usize> {
    grads.zero()?;
    let weight = 1.0 / accumulation_steps as f32;
    let mut steps = 0;
    for (i, data) in loader.iter().enumerate() {
        let micro = upload_rows(dev, data, 0..data.rows())?;
        forward_backward(model, grads, &micro, weight)?;
        drop(micro);
        if (i + 1) % accumulation_steps == 0 {
            model.sgd_step(grads, lr)?;
            grads.zero()?;
            steps += 1;
        }
    }
    Ok(steps)
}
// ANCHOR_END: train
