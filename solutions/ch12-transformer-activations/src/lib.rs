//! Chapter 12: what a transformer layer keeps.
//!
//! Korthikanti et al. count one GPT layer's saved activations as `s·b·h·(34 + 5·a·s/h)` bytes.
//! Write the layer's forward pass with gpumem's ops, predict what it keeps term by term, measure
//! it with `memory_allocated`, remove the `5·a·s²·b` term two ways, and set torch 2.15's own bytes
//! beside the paper's.
//!
//! Replace each `todo!()` (look for `// TODO`), then run
//! `cargo test -p ch12-transformer-activations`. `gpumem::autograd` has the ops (`linear`,
//! `Tensor::layer_norm`, `Tensor::heads`, `sdpa`, `Tensor::dropout`, `Tensor::gelu`, ...),
//! `checkpoint`, and `GptLayer` with its parameters; `dev.memory_allocated()` counts the blocks
//! alive.
//!
//! Parameters start with `_` only so that the unsolved crate builds without warnings: remove the
//! `_` when you use one.

pub use ch12_predict::{Backend, Plan, Shape, Term, paper_terms, predict_saved};
use gpumem::autograd::{
    Attention, AttentionBackend, GptLayer, LAYER_NORM_EPS, LayerNormStats, LayerPlan, Tensor,
    checkpoint, linear, sdpa,
};
use gpumem::ops::XorShift;
use gpumem::{Device, Result, bf16};

// ANCHOR: given
/// A layer of hidden size `h` and `a` heads in bf16, cast from f32 master weights (chapter 6).
pub fn bf16_layer(dev: &Device, h: usize, a: usize, rng: &mut XorShift) -> Result<GptLayer<bf16>> {
    GptLayer::<f32>::new(dev, h, a, rng)?.cast()
}

/// A random `[b, s, h]` bf16 input that requires grad, as the previous layer's output would.
pub fn layer_input(dev: &Device, shape: Shape, rng: &mut XorShift) -> Result<Tensor<bf16>> {
    let dims = [shape.b, shape.s, shape.h].map(|d| d as usize);
    Tensor::uniform(dev, &dims, -1.0, 1.0, rng)?.requires_grad_(true)
}

/// What [`predict_saved`] needs to know of `plan`: the prediction cannot see gpumem's types.
pub fn plan_of(plan: &LayerPlan) -> Plan {
    Plan {
        stats_kept: plan.stats == LayerNormStats::Keep,
        backend: match plan.backend {
            AttentionBackend::Math => Backend::Math,
            AttentionBackend::Flash => Backend::Flash,
            AttentionBackend::MemoryEfficient => Backend::MemoryEfficient,
        },
        checkpoint_core: plan.checkpoint_core,
    }
}
// ANCHOR_END: given

// ANCHOR: forward
/// The layer's output `[b, s, h]` for `x` `[b, s, h]`, built from gpumem's ops as the plan says:
/// `x + drop(proj(attn(ln1(x))))`, then `x + drop(fc2(gelu(fc1(ln2(x)))))`, with the attention
/// causal, its core (`sdpa`) checkpointed when `plan.checkpoint_core`, and the three dropouts
/// seeded by `plan.seeds()` in order.
pub fn layer_forward(layer: &GptLayer<bf16>, x: &Tensor<bf16>, plan: &LayerPlan) -> Result<Tensor<bf16>> {
    let (b, s, h) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let [seed_attn, seed_proj, seed_mlp] = plan.seeds();
    // A linear layer on [b, s, in]: a view as [b·s, in] rows, and back.
    let lin = |t: &Tensor<bf16>, l: &gpumem::autograd::Linear<bf16>, out: usize| {
        let rows = t.reshape(&[b * s, t.shape()[2]])?;
        linear(&rows, &l.weight, Some(&l.bias))?.reshape(&[b, s, out])
    };
    let ln1 = x.layer_norm(&layer.ln1.0, &layer.ln1.1, LAYER_NORM_EPS, plan.stats)?;
    let qkv = lin(&ln1, &layer.qkv, 3 * h)?;
    let (q, k, v) = (
        qkv.heads(layer.heads, 0, 3)?,
        qkv.heads(layer.heads, 1, 3)?,
        qkv.heads(layer.heads, 2, 3)?,
    );
    let options = Attention {
        causal: true,
        p: plan.p,
        seed: seed_attn,
        backend: plan.backend,
    };
    let core = move |t: &[Tensor<bf16>]| sdpa(&t[0], &t[1], &t[2], b, options);
    let context = if plan.checkpoint_core {
        checkpoint(core, &[q, k, v])?
    } else {
        core(&[q, k, v])?
    };
    let x = x.add(&lin(&context, &layer.proj, h)?.dropout(plan.p, seed_proj)?)?;
    let ln2 = x.layer_norm(&layer.ln2.0, &layer.ln2.1, LAYER_NORM_EPS, plan.stats)?;
    let hidden = lin(&ln2, &layer.fc1, 4 * h)?.gelu()?;
    x.add(&lin(&hidden, &layer.fc2, h)?.dropout(plan.p, seed_mlp)?)
}
// ANCHOR_END: forward

// ANCHOR: measure
/// What [`layer_forward`] leaves allocated above what was allocated before it, with its output
/// held: the bytes the layer saves (its output stands in for its input, which it saves and which
/// the caller holds anyway).
pub fn measure_saved(layer: &GptLayer<bf16>, x: &Tensor<bf16>, plan: &LayerPlan) -> Result<u64> {
    let dev = x.device();
    let before = dev.memory_allocated();
    let out = layer_forward(layer, x, plan)?;
    let after = dev.memory_allocated();
    drop(out);
    Ok(after - before)
}
// ANCHOR_END: measure

// ANCHOR: longest
/// The longest sequence `s` for which `layers` layers of `shape` (its `s` ignored) keep at most
/// `budget` bytes under `plan`, by [`predict_saved`]; 0 if not even `s = 1` fits.
pub fn longest_sequence(budget: u64, layers: u64, shape: Shape, plan: &LayerPlan) -> u64 {
    let plan = plan_of(plan);
    let fits = |s: u64| layers * predict_saved(Shape { s, ..shape }, &plan) <= budget;
    // The bytes grow with s, so the answer is the last s that fits: double, then bisect.
    let mut high = 1;
    while fits(high) {
        high *= 2;
    }
    let mut low = high / 2;
    while high - low > 1 {
        let mid = (low + high) / 2;
        if fits(mid) {
            low = mid;
        } else {
            high = mid;
        }
    }
    low
}
// ANCHOR_END: longest

// ANCHOR: torch
/// torch 2.15's bytes for one layer, measured on the CPU and corrected for CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorchOnCuda {
    /// What torch saved on the CPU (bf16, the graph's distinct storages).
    pub cpu: u64,
    /// Bytes the CPU's bf16 dropout masks hold beyond CUDA's 1-byte ones.
    pub mask_correction: u64,
    /// Bytes CUDA's f32 LayerNorm statistics hold beyond the CPU's bf16 ones.
    pub stats_correction: u64,
    /// `cpu − mask_correction + stats_correction`: what torch keeps on CUDA.
    pub cuda: u64,
    /// `cuda` minus the paper's formula: the statistics the paper does not count.
    pub over_paper: u64,
}

/// torch's CUDA bytes from its CPU bytes for `shape` (the layer of `conformance/transformer_layer.py`:
/// three dropouts, two LayerNorms).
pub fn torch_on_cuda(shape: Shape, cpu: u64) -> TorchOnCuda {
    let Shape { s, b, h, a } = shape;
    let mask_correction = a * s * s * b + 2 * s * b * h;
    let stats_correction = 4 * s * b * (4 - 2);
    let cuda = cpu - mask_correction + stats_correction;
    let paper: u64 = paper_terms(shape).iter().map(|t| t.bytes).sum();
    TorchOnCuda {
        cpu,
        mask_correction,
        stats_correction,
        cuda,
        over_paper: cuda - paper,
    }
}
// ANCHOR_END: torch
