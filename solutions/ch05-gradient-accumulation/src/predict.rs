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
/// Bytes of the block the allocator hands out for `bytes` (all requests here are at most 1 MiB):
/// a multiple of 512, at least 512.
fn block(bytes: u64) -> u64 {
    bytes.div_ceil(512).max(1) * 512
}

/// Your prediction of `StepMemory` for a (micro-)batch of `rows` examples.
pub fn predict_step_memory(rows: usize) -> StepMemory {
    const F32: u64 = 4;
    let [inputs, hidden, outputs] = PREDICT_SIZES.map(|n| n as u64);
    let rows = rows as u64;
    // Two weights and two biases; the 8-float bias (32 B) takes a 512 B block.
    let parameters = block(hidden * inputs * F32)
        + block(hidden * F32)
        + block(outputs * hidden * F32)
        + block(outputs * F32);
    let hidden_act = block(rows * hidden * F32);
    let output_act = block(rows * outputs * F32);
    StepMemory {
        parameters,
        // One f32 gradient per parameter, whatever the batch.
        gradients: parameters,
        batch_data: block(rows * inputs * F32) + output_act,
        saved_activations: hidden_act + output_act,
        // In backward, just after ReLU's gradient is made: the ReLU output, the hidden gradient
        // before and after ReLU, the output and its gradient.
        step_peak: 3 * hidden_act + 2 * output_act,
    }
}
// ANCHOR_END: predict
