//! Chapter 11: optimizer state, zero_grad and in-place operations.
//!
//! Reference solution.

use gpumem::autograd::{Mlp, Tensor, mse_loss};
use gpumem::ops::XorShift;
use gpumem::optim::{Adam, AdamOptions, Implementation, Optimizer, Sgd, SgdOptions};
use gpumem::{Device, Result};

// ANCHOR: given
/// The chapter's model: 128 inputs, two hidden layers of 256, 10 outputs (ReLU between them).
pub const SIZES: [usize; 4] = [128, 256, 256, 10];
/// Examples in a batch.
pub const ROWS: usize = 64;

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

/// The three optimizers the chapter compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `torch.optim.SGD(params, lr=0.01)`.
    Sgd,
    /// `torch.optim.SGD(params, lr=0.01, momentum=0.9)`.
    SgdMomentum,
    /// `torch.optim.Adam(params, lr=1e-3)`.
    Adam,
}

impl Kind {
    /// All three, in the chapter's order.
    pub const ALL: [Kind; 3] = [Kind::Sgd, Kind::SgdMomentum, Kind::Adam];

    /// The optimizer over `params`, with the for-each step that torch uses by default when the
    /// parameters are on a GPU (set explicitly, so that `cpu` measures the same thing).
    pub fn optimizer(self, params: Vec<Tensor>) -> Result<Box<dyn Optimizer<f32>>> {
        let implementation = Implementation::ForEach;
        Ok(match self {
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
}
// ANCHOR_END: given

// ANCHOR: predict_state
/// Your prediction of the optimizer's state on the device after its first step, in bytes of
/// blocks, for an [`Mlp`] with layer widths `sizes` (every parameter has a gradient).
pub fn predict_state_bytes(kind: Kind, sizes: &[usize]) -> u64 {
    // One f32 tensor the size of each parameter per state entry, each its own block: at most
    // 1 MiB here, so rounded up to 512 B.
    let block = |elements: usize| (elements * 4).max(1).div_ceil(512) as u64 * 512;
    let parameters: u64 = sizes
        .windows(2)
        .map(|w| block(w[0] * w[1]) + block(w[1]))
        .sum();
    let tensors_per_parameter = match kind {
        Kind::Sgd => 0,         // no state
        Kind::SgdMomentum => 1, // momentum_buffer
        Kind::Adam => 2,        // exp_avg and exp_avg_sq (step is on the host)
    };
    tensors_per_parameter * parameters
}
// ANCHOR_END: predict_state

// ANCHOR: step_memory
/// The part of a training step where memory peaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `model(x)` and the loss.
    Forward,
    /// `loss.backward()`.
    Backward,
    /// `optimizer.step()`.
    Step,
}

/// The first training step of a [`SIZES`] model on a batch of [`ROWS`], in bytes above the
/// model and the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepMemory {
    /// The optimizer's state after the step.
    pub state: u64,
    /// The peak during `optimizer.step()` alone (the loss dropped, the gradients alive).
    pub step_peak: u64,
    /// Where the whole step peaks.
    pub peak_phase: Phase,
}
// ANCHOR_END: step_memory

// ANCHOR: predict_step
/// Your prediction of [`StepMemory`] for `kind`.
pub fn predict_step_memory(kind: Kind) -> StepMemory {
    let gradients = predict_state_bytes(Kind::SgdMomentum, &SIZES); // one block per parameter
    let state = predict_state_bytes(kind, &SIZES);
    let (step_peak, peak_phase) = match kind {
        // Updates in place: nothing new; backward held the gradients and activations.
        Kind::Sgd => (gradients, Phase::Backward),
        // The momentum buffers are copies of the gradients, made during the first step.
        Kind::SgdMomentum => (gradients + state, Phase::Step),
        // Two moments, then one square root per parameter, all alive at once (for-each).
        Kind::Adam => (gradients + state + gradients, Phase::Step),
    };
    StepMemory {
        state,
        step_peak,
        peak_phase,
    }
}
// ANCHOR_END: predict_step

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
