//! Chapter 8's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: forward_memory
/// The hidden layers' activation (gpumem's `autograd::Activation`, which a prediction cannot see).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// The Gaussian error linear unit.
    Gelu,
}

/// The model of the prediction: 128 inputs, two hidden layers of 256, 10 outputs.
pub const PREDICT_SIZES: [usize; 4] = [128, 256, 256, 10];

/// What one forward pass of a [`PREDICT_SIZES`] model leaves allocated, in bytes of blocks, on
/// top of the model and the batch, while the caller holds the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardMemory {
    /// With grad mode on: the output and everything the graph saved for backward.
    pub with_grad: u64,
    /// Under `no_grad()`: the output only.
    pub without_grad: u64,
}
// ANCHOR_END: forward_memory

// ANCHOR: predict
/// Your prediction of [`ForwardMemory`] for a batch of `rows` examples (at most 1024) and
/// `activation`. The tests try the page's batches and row counts drawn on every run.
pub fn predict_forward_memory(_rows: usize, _activation: Activation) -> ForwardMemory {
    // TODO: write your numbers before running the tests.
    todo!("predict the forward pass's memory for {_rows} rows and {_activation:?}")
}
// ANCHOR_END: predict
