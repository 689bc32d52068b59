//! Chapter 9's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: sizes
/// Inputs of the chapter's models.
pub const IN_FEATURES: usize = 32;
/// Width of every hidden layer.
pub const WIDTH: usize = 64;
/// Outputs of the chapter's models.
pub const OUT_FEATURES: usize = 8;
/// Examples in a batch: enough that a hidden activation (256 × 64 f32, 64 KiB) outweighs a
/// layer's weight (64 × 64 f32, 16 KiB), as in training with long sequences.
pub const ROWS: usize = 256;
// ANCHOR_END: sizes

// ANCHOR: predict
/// Your prediction for a `deep_mlp` of `depth` layers run by `checkpointed_loss` in
/// `segments` segments on a `Batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostPrediction {
    /// `StepCost::after_forward`.
    pub after_forward: u64,
    /// `StepCost::linear_forwards`.
    pub linear_forwards: u64,
}

/// The block a buffer of `bytes` takes (every buffer here is at most 1 MiB).
fn block(bytes: usize) -> u64 {
    (bytes.max(1).div_ceil(512) * 512) as u64
}

/// Predicts `StepCost::after_forward` and `StepCost::linear_forwards` for any `depth` and any
/// `segments` from 1 to `depth`: the tests try the page's cases and cases drawn on every run.
pub fn predict_cost(depth: usize, segments: usize) -> CostPrediction {
    let activation = block(ROWS * WIDTH * 4);
    // mse_loss saves the output (and the target, which is there anyway); the loss is one f32.
    let output_and_loss = block(ROWS * OUT_FEATURES * 4) + block(4);
    let size = depth / segments;
    let checkpointed_layers = (segments - 1) * size;
    // Kept: the output of every checkpointed segment (the input the next one saves), and the
    // hidden activations of the last segment, which runs normally.
    let boundaries = segments - 1;
    let last_segment_hidden = depth - 1 - checkpointed_layers;
    CostPrediction {
        after_forward: (boundaries + last_segment_hidden) as u64 * activation + output_and_loss,
        // Every layer once, and the checkpointed ones once more in backward.
        linear_forwards: (depth + checkpointed_layers) as u64,
    }
}
// ANCHOR_END: predict
