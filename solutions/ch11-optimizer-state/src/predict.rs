//! Chapter 11's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: sizes
/// The chapter's model: 128 inputs, two hidden layers of 256, 10 outputs (ReLU between them).
pub const SIZES: [usize; 4] = [128, 256, 256, 10];
/// Examples in a batch.
pub const ROWS: usize = 64;

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
}
// ANCHOR_END: sizes

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

/// The first training step of an `Mlp` on a batch of `ROWS`, in bytes above the model and the
/// batch.
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

// ANCHOR: predict_state
/// Your prediction of the optimizer's state on the device after its first step, in bytes of
/// blocks, for an `Mlp` with layer widths `sizes` (every parameter has a gradient).
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

// ANCHOR: predict_step
/// Your prediction of `StepMemory` for `kind` on an `Mlp` with layer widths `sizes` (ReLU
/// between the layers) and a batch of `ROWS`. The tests try `SIZES` and models drawn on every
/// run: 2 or 3 layers, the inputs and every hidden width from 128 to 256, at most 16 outputs
/// (models whose parameters outweigh a batch's activations, as the page's does).
pub fn predict_step_memory(kind: Kind, sizes: &[usize]) -> StepMemory {
    let gradients = predict_state_bytes(Kind::SgdMomentum, sizes); // one block per parameter
    let state = predict_state_bytes(kind, sizes);
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
