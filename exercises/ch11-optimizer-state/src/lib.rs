//! Chapter 11: optimizer state, zero_grad and in-place operations.
//!
//! A training step holds the weights, the gradients, the optimizer's state, the activations the
//! graph saved and the temporaries of each op. Predict each part, measure it, and write the step.
//!
//! Replace each `todo!()` (look for `// TODO`), then run `cargo test -p ch11-optimizer-state`.
//! `dev.memory_allocated()` counts the blocks alive, `dev.max_memory_allocated()` the peak since
//! `dev.reset_peak_memory_stats()`.
//!
//! Parameters start with `_` only so that the unsolved crate builds without warnings: remove the
//! `_` when you use one.

use gpumem::autograd::{Mlp, Tensor, mse_loss};
use gpumem::ops::XorShift;
use gpumem::optim::{Adam, AdamOptions, Implementation, Optimizer, Sgd, SgdOptions};
use gpumem::{Device, Result};

// ANCHOR: given
pub use ch11_predict::{Kind, Phase, ROWS, SIZES, StepMemory};

/// A batch on the device: inputs `[rows, in]` and targets `[rows, out]`.
pub struct Batch {
    /// The inputs.
    pub x: Tensor,
    /// The targets.
    pub t: Tensor,
}

impl Batch {
    /// `rows` random examples for a model with `sizes`.
    pub fn random(dev: &Device, rng: &mut XorShift, rows: usize, sizes: &[usize]) -> Result<Batch> {
        let (inputs, outputs) = (sizes[0], sizes[sizes.len() - 1]);
        Ok(Batch {
            x: Tensor::uniform(dev, &[rows, inputs], -1.0, 1.0, rng)?,
            t: Tensor::uniform(dev, &[rows, outputs], -1.0, 1.0, rng)?,
        })
    }

    /// The batch's mean squared error.
    pub fn loss(&self, model: &Mlp) -> Result<Tensor> {
        mse_loss(&model.forward(&self.x)?, &self.t)
    }
}

/// The optimizer of `kind` over `params`, with the for-each step that torch uses by default when
/// the parameters are on a GPU (set explicitly, so that `cpu` measures the same thing).
pub fn optimizer(kind: Kind, params: Vec<Tensor>) -> Result<Box<dyn Optimizer<f32>>> {
    let implementation = Implementation::ForEach;
    Ok(match kind {
        Kind::Sgd => Box::new(Sgd::new(
            params,
            SgdOptions {
                lr: 0.01,
                implementation,
                ..SgdOptions::default()
            },
        )?),
        Kind::SgdMomentum => Box::new(Sgd::new(
            params,
            SgdOptions {
                lr: 0.01,
                momentum: 0.9,
                implementation,
                ..SgdOptions::default()
            },
        )?),
        Kind::Adam => Box::new(Adam::new(
            params,
            AdamOptions {
                implementation,
                ..AdamOptions::default()
            },
        )?),
    })
}
// ANCHOR_END: given

// ANCHOR: train_step
/// One training step: forward, backward, `optimizer.step()`, `optimizer.zero_grad(set_to_none)`.
/// Returns the loss as a number; nothing of the step's graph may stay.
pub fn train_step(
    _model: &Mlp,
    _optimizer: &mut dyn Optimizer<f32>,
    _batch: &Batch,
    _set_to_none: bool,
) -> Result<f32> {
    // TODO: forward, backward, step, zero_grad; return the loss as a number.
    todo!("one training step")
}
// ANCHOR_END: train_step

// ANCHOR: relu_in_place
/// `model`'s forward pass with the activation applied in place (`nn.ReLU(inplace=True)`): the
/// same output and gradients as `model.forward(x)`, without a second block per hidden layer.
pub fn forward_relu_in_place(_model: &Mlp, _x: &Tensor) -> Result<Tensor> {
    // TODO: each layer, then relu_ on every output but the last.
    todo!("the forward pass with ReLU in place")
}
// ANCHOR_END: relu_in_place

// ANCHOR: source_example
/// The three ways of writing the source's `y = relu(x)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `y = torch.relu(x)`.
    OutOfPlace,
    /// `y = torch.relu(x).clone()`, what the source recommends (`copy()` here).
    Clone,
    /// `y = x.relu_()` (the source's "in-place operation").
    InPlace,
}

/// Bytes above the start while `y` is held, and the peak above the start while computing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReluMemory {
    /// Allocated while `y` is held.
    pub kept: u64,
    /// The peak while `y` was computed.
    pub peak: u64,
}

/// The source's example on the device: `x`, an `[n, n]` f32 tensor that does not require grad,
/// then `y` by `variant`. Measured from just after `x` exists.
pub fn relu_memory(_dev: &Device, _n: usize, _variant: Variant) -> Result<ReluMemory> {
    // TODO: make x on the device, then measure what computing y keeps and its peak.
    todo!("the source's relu example, {_variant:?}")
}
// ANCHOR_END: source_example
