//! Chapter 11: optimizer state, zero_grad and in-place operations.
//!
//! Reference solution.

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
    model: &Mlp,
    optimizer: &mut dyn Optimizer<f32>,
    batch: &Batch,
    set_to_none: bool,
) -> Result<f32> {
    let loss = batch.loss(model)?;
    loss.backward()?;
    let value = loss.item()?;
    // The loss's block goes before the step, so that the step's peak is its own.
    drop(loss);
    optimizer.step()?;
    optimizer.zero_grad(set_to_none)?;
    Ok(value)
}
// ANCHOR_END: train_step

// ANCHOR: relu_in_place
/// `model`'s forward pass with the activation applied in place (`nn.ReLU(inplace=True)`): the
/// same output and gradients as `model.forward(x)`, without a second block per hidden layer.
pub fn forward_relu_in_place(model: &Mlp, x: &Tensor) -> Result<Tensor> {
    let last = model.layers.len() - 1;
    let mut h = x.clone();
    for (i, layer) in model.layers.iter().enumerate() {
        let z = layer.forward(&h)?;
        // linear saved its input and its weight, not z: z may be overwritten.
        h = if i < last { z.relu_()? } else { z };
    }
    Ok(h)
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
pub fn relu_memory(dev: &Device, n: usize, variant: Variant) -> Result<ReluMemory> {
    let mut rng = XorShift::new(5);
    let x = Tensor::<f32>::uniform(dev, &[n, n], -1.0, 1.0, &mut rng)?;
    let start = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let y = match variant {
        Variant::OutOfPlace => x.relu()?,
        // relu's result is a temporary the copy replaces: two blocks for a moment.
        Variant::Clone => x.relu()?.copy()?,
        // The same block, written over.
        Variant::InPlace => x.relu_()?,
    };
    let kept = dev.memory_allocated() - start;
    let peak = dev.max_memory_allocated() - start;
    drop(y);
    Ok(ReluMemory { kept, peak })
}
// ANCHOR_END: source_example
