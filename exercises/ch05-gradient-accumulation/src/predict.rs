//! Chapter 5's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: step_memory
/// The model of the prediction exercise: 128 inputs, 256 hidden units (ReLU), 8 outputs.
pub const PREDICT_SIZES: [usize; 3] = [128, 256, 8];

/// What one training step of `Mlp::new(dev, &PREDICT_SIZES, ..)` costs, in bytes of allocator
/// blocks (what `memory_allocated()` counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepMemory {
    /// The weights and biases.
    pub parameters: u64,
    /// The gradient buffers from `model.zero_grads()`.
    pub gradients: u64,
    /// One (micro-)batch on the device: its inputs and its targets.
    pub batch_data: u64,
    /// What `model.forward` keeps for backward: the ReLU output and the model's output.
    pub saved_activations: u64,
    /// The most `forward_backward` holds at once on top of what was allocated before it.
    pub step_peak: u64,
}
// ANCHOR_END: step_memory

// ANCHOR: predict
/// Your prediction of `StepMemory` for a (micro-)batch of `rows` examples.
pub fn predict_step_memory(_rows: usize) -> StepMemory {
    // TODO: write the rules that give the five numbers for any number of rows (the tests try
    // 64, 16 and 1, and row counts drawn on every run).
    // Every block here is the request rounded up to a multiple of 512 B (at least 512 B).
    todo!("predict the memory of a step on {_rows} rows")
}
// ANCHOR_END: predict
