//! Chapter 8: what autograd keeps.
//!
//! A forward pass with grad keeps, for each op, what its backward formula needs. Measure it,
//! predict it, and write the loops that keep nothing they do not need.
//!
//! Replace each `todo!()` (look for `// TODO`), then run `cargo test -p ch08-autograd-memory`.
//! `dev.memory_allocated()` counts the blocks alive, `dev.max_memory_allocated()` the peak since
//! `dev.reset_peak_memory_stats()`.
//!
//! Parameters start with `_` only so that the unsolved crate builds without warnings: remove the
//! `_` when you use one.

pub use ch08_predict::{ForwardMemory, PREDICT_SIZES};
use gpumem::autograd::{Mlp, Tensor, mse_loss};
use gpumem::ops::XorShift;
use gpumem::{Device, Result};

// ANCHOR: batch
/// A batch on the device: inputs `[rows, in]` and targets `[rows, out]`, neither requiring grad.
pub struct Batch {
    /// The inputs.
    pub x: Tensor,
    /// The targets.
    pub t: Tensor,
}

impl Batch {
    /// `rows` random examples for a model of `in_features` inputs and `out_features` outputs.
    pub fn random(
        dev: &Device,
        rng: &mut XorShift,
        rows: usize,
        in_features: usize,
        out_features: usize,
    ) -> Result<Batch> {
        Ok(Batch {
            x: Tensor::uniform(dev, &[rows, in_features], -1.0, 1.0, rng)?,
            t: Tensor::uniform(dev, &[rows, out_features], -1.0, 1.0, rng)?,
        })
    }

    /// The batch's loss, with a graph when grad mode is on and the model requires grad.
    pub fn loss(&self, model: &Mlp) -> Result<Tensor> {
        mse_loss(&model.forward(&self.x)?, &self.t)
    }
}
// ANCHOR_END: batch

// ANCHOR: evaluate
/// The mean loss of `model` over `batches`, computed without a graph: nothing is saved, so the
/// peak is one batch's forward pass and no more.
pub fn evaluate(_model: &Mlp, _batches: &[Batch]) -> Result<f32> {
    // TODO: the mean of the batches' losses, with nothing saved for a backward that never comes.
    todo!("evaluate {} batches", _batches.len())
}
// ANCHOR_END: evaluate

// ANCHOR: loss_log
/// A running record of losses (what a training loop prints), which must not keep any graph.
#[derive(Debug, Default)]
pub struct LossLog {
    total: f32,
    count: usize,
}

impl LossLog {
    /// Records one step's loss.
    pub fn record(&mut self, _loss: &Tensor) -> Result<()> {
        // TODO: add the loss to the running total, without keeping its graph.
        todo!("record a loss")
    }

    /// The mean of the recorded losses (0 when there are none).
    pub fn mean(&self) -> f32 {
        if self.count == 0 {
            0.0
        } else {
            self.total / self.count as f32
        }
    }
}
// ANCHOR_END: loss_log

// ANCHOR: backward_twice
/// One forward pass of `x`, two losses on its output (against `t1` and against `t2`), and a
/// backward pass for each, so that the gradients are those of the sum. Returns the output, whose
/// graph must have freed what it saved.
pub fn backward_twice(_model: &Mlp, _x: &Tensor, _t1: &Tensor, _t2: &Tensor) -> Result<Tensor> {
    // TODO: one forward, two losses, two backward passes.
    todo!("backward through one forward pass twice")
}
// ANCHOR_END: backward_twice

// ANCHOR: source_example
/// The source's example on the device: an `[n, n]` tensor that requires grad, then `y = x * 2`
/// (under `no_grad()` when `use_no_grad`). Returns the bytes allocated by computing `y`, while
/// `y` is held.
pub fn kept_by_times_two(_dev: &Device, _n: usize, _use_no_grad: bool) -> Result<u64> {
    // TODO: make x on the device, then measure what computing y allocates.
    todo!("the source's no_grad example, measured on the device")
}

/// As [`kept_by_times_two`] with an op after it that saves its input: `y = gelu(x * 2)`.
pub fn kept_by_times_two_then_gelu(_dev: &Device, _n: usize, _use_no_grad: bool) -> Result<u64> {
    // TODO: as kept_by_times_two, with gelu after the multiplication.
    todo!("the source's example with an op that saves")
}
// ANCHOR_END: source_example
