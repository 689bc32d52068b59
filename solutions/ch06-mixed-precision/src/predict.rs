//! Chapter 6's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: mixed_memory
/// The activations' element type (gpumem's `ops::DType`, which a prediction cannot see).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// 32-bit floats.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
}

/// The model of the prediction exercise: 128 inputs, 256 hidden units (ReLU), 64 outputs.
pub const PREDICT_SIZES: [usize; 3] = [128, 256, 64];
/// Examples in the page's batch (the tests also draw other batch sizes).
pub const PREDICT_ROWS: usize = 64;

/// A mixed-precision setup's memory, in bytes of allocator blocks (what `memory_allocated()`
/// counts), for `Mlp::new(dev, &PREDICT_SIZES, ..)` and a batch of `rows` examples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixedMemory {
    /// The f32 master weights and biases.
    pub master_weights: u64,
    /// The f32 gradients from `model.zero_grads()`.
    pub gradients: u64,
    /// The optimizer's state: `Momentum`'s f32 velocities.
    pub optimizer_state: u64,
    /// The batch on the device in the activations' type: its inputs and its targets.
    pub batch_data: u64,
    /// The weights cast to the activations' type that forward keeps for backward.
    pub cast_weights: u64,
    /// The activations forward keeps for backward: the ReLU output and the model's output.
    pub activations: u64,
}
// ANCHOR_END: mixed_memory

// ANCHOR: predict
/// Bytes of the block the allocator hands out for `bytes` (all requests here are at most 1 MiB):
/// a multiple of 512, at least 512.
fn block(bytes: u64) -> u64 {
    bytes.div_ceil(512).max(1) * 512
}

/// Your prediction of `MixedMemory` when the activations are of type `dtype` and the batch has
/// `rows` examples (at most 1024). The tests try `PREDICT_ROWS` and row counts drawn on every run.
pub fn predict_memory(dtype: DType, rows: usize) -> MixedMemory {
    const F32: u64 = 4;
    let [inputs, hidden, outputs] = PREDICT_SIZES.map(|n| n as u64);
    let rows = rows as u64;
    // Bytes per element of the activations.
    let act = match dtype {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
    };
    // Weights and biases stay f32: the 64-float bias (256 B) takes a 512 B block.
    let f32_parameters = block(hidden * inputs * F32)
        + block(hidden * F32)
        + block(outputs * hidden * F32)
        + block(outputs * F32);
    // autocast keeps a copy of each weight (not the biases) in the activations' type.
    let cast_weights = if dtype == DType::F32 {
        0
    } else {
        block(hidden * inputs * act) + block(outputs * hidden * act)
    };
    MixedMemory {
        master_weights: f32_parameters,
        gradients: f32_parameters,
        optimizer_state: f32_parameters,
        batch_data: block(rows * inputs * act) + block(rows * outputs * act),
        cast_weights,
        activations: block(rows * hidden * act) + block(rows * outputs * act),
    }
}
// ANCHOR_END: predict
