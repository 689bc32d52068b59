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

/// Predicts `StepCost::after_forward` and `StepCost::linear_forwards` for any `depth` and any
/// `segments` from 1 to `depth`: the tests try the page's cases and cases drawn on every run.
pub fn predict_cost(_depth: usize, _segments: usize) -> CostPrediction {
    // TODO: write the rules as arithmetic on depth and segments.
    todo!("predict a step of {_depth} layers in {_segments} segments")
}
// ANCHOR_END: predict
