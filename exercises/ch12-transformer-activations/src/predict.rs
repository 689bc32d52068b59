//! Chapter 12's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: given
/// One layer's sizes, in the paper's letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Sequence length s.
    pub s: u64,
    /// Micro-batch b.
    pub b: u64,
    /// Hidden size h.
    pub h: u64,
    /// Attention heads a.
    pub a: u64,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s={} b={} h={} a={}", self.s, self.b, self.h, self.a)
    }
}

/// One term of the paper's count: what is saved, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// What the tensor is ("softmax output", "GELU input", ...).
    pub name: &'static str,
    /// Its bytes.
    pub bytes: u64,
}
/// Which attention core a layer runs (gpumem's `autograd::AttentionBackend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `SDPBackend.MATH`: the composite that saves the `s × s` softmax and dropout outputs.
    Math,
    /// `SDPBackend.FLASH_ATTENTION`: saves a `[b·a, s]` f32 logsumexp instead.
    Flash,
    /// `SDPBackend.EFFICIENT_ATTENTION`: as flash, with the logsumexp padded to a multiple of 32.
    MemoryEfficient,
}

/// What a layer's plan (gpumem's `autograd::LayerPlan`, with its dropout `p > 0`) changes in what
/// it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The LayerNorms keep their f32 mean and rstd (torch's rule), or recompute them (the paper's).
    pub stats_kept: bool,
    /// The attention core.
    pub backend: Backend,
    /// The attention core runs under `checkpoint`, keeping only q, k and v.
    pub checkpoint_core: bool,
}
// ANCHOR_END: given

// ANCHOR: paper
/// The paper's terms for one layer, one per saved tensor, in the order the forward pass saves
/// them: 2-byte activations, 1-byte dropout masks. They add up to `s·b·h·(34 + 5·a·s/h)`.
///
/// Their names, in that order (the tests compare them): `LayerNorm 1 input`, `QKV input`, `Q`,
/// `K`, `softmax output`, `attention dropout mask`, `attention dropout output`, `V`,
/// `projection input`, `projection dropout mask`, `LayerNorm 2 input`, `fc1 input`,
/// `GELU input`, `fc2 input`, `MLP dropout mask`.
pub fn paper_terms(_shape: Shape) -> Vec<Term> {
    // TODO: one Term per tensor the paper counts, in the order of the doc comment above; the
    // bytes of the whole list are s·b·h·(34 + 5·a·s/h).
    todo!("the paper's terms for {_shape}")
}
// ANCHOR_END: paper

// ANCHOR: predict
/// The bytes `measure_saved` will measure for `shape` under `plan`: the paper's
/// terms, each in its own block rounded up to 512 bytes, the `s × s` terms gone when the core is
/// checkpointed or fused, a fused backend's f32 logsumexp, and the LayerNorms' f32 mean and rstd
/// when they are kept.
pub fn predict_saved(_shape: Shape, _plan: &Plan) -> u64 {
    // TODO: the paper's terms, each rounded up to a 512-byte block; then what the plan changes.
    todo!("predict what a layer of {_shape} keeps under {_plan:?}")
}
// ANCHOR_END: predict
