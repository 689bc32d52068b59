//! What a transformer layer needs from autograd, each op saving what torch 2.15 saves on CUDA
//! (its `derivatives.yaml`, shipped in the wheel as `torchgen/packaged/autograd/derivatives.yaml`,
//! with the shapes and dtypes of `torch/_meta_registrations.py` and `torch/_refs`):
//!
//! | op | torch's node | saved for backward |
//! |----|--------------|--------------------|
//! | [`Tensor::reshape`] | `ViewBackward0` | nothing: a view, the same block |
//! | [`Tensor::bmm`] | `BmmBackward0` | each operand, if the other requires grad (a transposed operand is torch's transposed view: the same block) |
//! | [`Tensor::softmax`] | `SoftmaxBackward0` | its result |
//! | [`Tensor::causal_mask`] | `MaskedFillBackward0` | torch: the boolean mask, a buffer made once and shared by every layer; here the mask is implicit: nothing |
//! | [`Tensor::dropout`] | `NativeDropoutBackward0` | the 1-byte keep mask (CUDA's `native_dropout`; the CPU's `F.dropout` saves a mask of the input's type) |
//! | [`Tensor::layer_norm`] | `NativeLayerNormBackward0` | the input, weight, bias, and `mean`, `rstd` in f32 (CUDA's `layer_norm` keeps them in the accumulate type; the CPU's in the input's) |
//! | [`Tensor::heads`], [`Tensor::merge_heads`] | torch: `SplitWithSizesBackward0`, `ViewBackward0`, `TransposeBackward0`, `UnsafeViewBackward0` | nothing: torch's views, then the copy `matmul`'s or the layer's `reshape` makes |
//! | [`sdpa`] with [`AttentionBackend::Math`] | the ops above | two `s × s` matrices and a 1-byte mask per head |
//! | [`sdpa`] with [`AttentionBackend::Flash`] | `ScaledDotProductFlashAttentionBackward0` | q, k, v, the output and a `[b, a, s]` f32 logsumexp |
//! | [`sdpa`] with [`AttentionBackend::MemoryEfficient`] | `ScaledDotProductEfficientAttentionBackward0` | q, k, v, the output and a `[b, a, ⌈s/32⌉·32]` f32 logsumexp |
//!
//! Neither fused backend saves a dropout mask: torch's keep a Philox seed and offset (a few bytes)
//! and draw the same numbers again in backward; here the mask is a hash of the seed and the
//! element's index ([`crate::ops::dropout_keeps`]), made again the same way. torch's CPU differs
//! from CUDA in two of these: `F.dropout` on the CPU is not `native_dropout` but a multiplication
//! by a mask of the input's dtype, and `native_layer_norm` on the CPU returns its statistics in the
//! input's dtype (`torch/_refs/__init__.py`, `native_layer_norm`).

use super::checkpoint::checkpoint;
use super::errors::{autograd_error, invalid};
use super::functional::linear;
use super::graph::{BackwardFn, Saved, next_value, share};
use super::mode::count_forward;
use super::nn::Linear;
use super::tensor::Tensor;
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::ops::{self, Float, HeadLayout, SdpaShape};

/// What [`Tensor::layer_norm`] keeps for backward besides its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerNormStats {
    /// torch's rule: the mean and rstd of every row, in f32 (8 bytes a row).
    Keep,
    /// Only the input, the statistics recomputed in backward: the layer as Korthikanti et al.
    /// count it (their formula has no term for them).
    Recompute,
}

/// Which scaled-dot-product attention [`sdpa`] runs, named after torch's backends
/// (`torch.nn.attention.SDPBackend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionBackend {
    /// `SDPBackend.MATH`: the composite of bmm, scale, mask, softmax, dropout and bmm; saves the
    /// softmax output and the dropout output (`s × s` each, per head) and the 1-byte mask, in the
    /// inputs' type (torch 2.15's MATH run on the CPU with bf16 inputs computes, and saves, in f32).
    Math,
    /// `SDPBackend.FLASH_ATTENTION`: saves q, k, v, the output and a `[b·a, s]` f32 logsumexp.
    Flash,
    /// `SDPBackend.EFFICIENT_ATTENTION`: as flash, with the logsumexp padded to a multiple of 32
    /// (`kAlignLSE` in torch's `_efficient_attention_forward`).
    MemoryEfficient,
}

/// Elements per head of the logsumexp a fused backend keeps for sequence length `s`.
pub fn lse_len(backend: AttentionBackend, s: usize) -> usize {
    match backend {
        AttentionBackend::MemoryEfficient => s.div_ceil(32) * 32,
        _ => s,
    }
}

/// Fails unless `p` is a probability dropout can use.
fn check_p(op: &'static str, t: &Tensor<impl Float>, p: f32) -> Result<()> {
    if (0.0..1.0).contains(&p) {
        Ok(())
    } else {
        Err(invalid(
            op,
            t.device(),
            format!("dropout probability has to be in [0, 1), got {p}"),
        ))
    }
}

impl<T: Float> Tensor<T> {
    /// The same block with another shape of as many elements (`tensor.view(shape)` /
    /// `reshape` of a contiguous tensor): a view, no new memory; its node saves nothing.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor<T>> {
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if shape.len() > 4 || n != Some(self.numel()) {
            return Err(invalid(
                "reshape",
                self.device(),
                format!(
                    "shape {shape:?} does not hold the {} elements of {:?} (at most 4 dimensions)",
                    self.numel(),
                    self.shape()
                ),
            ));
        }
        Tensor::record(
            "ViewBackward0",
            share(self.data()),
            shape.to_vec(),
            &[self],
            |_, _| Vec::new(),
            Box::new(|_, g| Ok(vec![Some(share(g))])),
        )
    }

    /// `[batch, m, n]` from `[batch, rows, cols]` tensors, with `[batch, …]` first.
    fn batched(&self, op: &'static str, what: &str) -> Result<(usize, usize, usize)> {
        match self.shape() {
            [z, r, c] => Ok((*z, *r, *c)),
            s => Err(invalid(
                op,
                self.device(),
                format!("{what} must be [batch, rows, cols], got shape {s:?}"),
            )),
        }
    }

    /// The batched product `self[z] · other[z]` of `[batch, m, k]` and `[batch, k, n]`
    /// (`torch.bmm`); with `transpose_other`, `other` is `[batch, n, k]` and used transposed, as
    /// `q @ k.transpose(-2, -1)` uses torch's view of k. Saves each operand if the other requires
    /// grad.
    pub fn bmm(&self, other: &Tensor<T>, transpose_other: bool) -> Result<Tensor<T>> {
        const OP: &str = "bmm";
        let (z, m, k) = self.batched(OP, "self")?;
        let (z2, r, c) = other.batched(OP, "other")?;
        let (k2, n) = if transpose_other { (c, r) } else { (r, c) };
        if z != z2 || k != k2 {
            return Err(invalid(
                OP,
                self.device(),
                format!(
                    "[{z}, {m}, {k}] · {}[{z2}, {r}, {c}]: batch or inner dimensions differ",
                    if transpose_other { "transposed " } else { "" }
                ),
            ));
        }
        count_forward(OP);
        let tb = transpose_other;
        let y = ops::bmm(self.data(), other.data(), z, m, k, n, false, tb)?;
        let (a, b) = (share(self.data()), share(other.data()));
        let needs = [self.requires_grad(), other.requires_grad()];
        Tensor::record(
            "BmmBackward0",
            y,
            vec![z, m, n],
            &[self, other],
            move |_, _| {
                let mut saved = Vec::new();
                if needs[0] {
                    saved.push(Saved::Value(b));
                }
                if needs[1] {
                    saved.push(Saved::Value(a));
                }
                saved
            },
            Box::new(move |saved, g| {
                let mut it = saved.iter();
                // C = A·op(B): dA = g·op(B)ᵀ; dB = Aᵀ·g, or its transpose gᵀ·A when B is used
                // transposed.
                let da = match needs[0] {
                    true => Some(ops::bmm(g, next_value(&mut it)?, z, m, n, k, false, !tb)?),
                    false => None,
                };
                let db = match (needs[1], tb) {
                    (false, _) => None,
                    (true, false) => {
                        Some(ops::bmm(next_value(&mut it)?, g, z, k, m, n, true, false)?)
                    }
                    (true, true) => {
                        Some(ops::bmm(g, next_value(&mut it)?, z, n, m, k, true, false)?)
                    }
                };
                Ok(vec![da, db])
            }),
        )
    }

    /// The last dimension's length and the number of rows before it.
    fn rows_cols(&self) -> (usize, usize) {
        let cols = self.shape().last().copied().unwrap_or(1);
        (self.numel().checked_div(cols).unwrap_or(0), cols)
    }

    /// Softmax over the last dimension (`F.softmax(x, dim=-1)`); saves its result.
    pub fn softmax(&self) -> Result<Tensor<T>> {
        count_forward("softmax");
        let (rows, cols) = self.rows_cols();
        let y = ops::softmax(self.data(), rows, cols)?;
        Tensor::record(
            "SoftmaxBackward0",
            y,
            self.shape().to_vec(),
            &[self],
            |_, result| vec![Saved::Value(share(result))],
            Box::new(move |saved, g| {
                Ok(vec![Some(ops::softmax_backward(
                    g,
                    saved[0].value()?,
                    rows,
                    cols,
                )?)])
            }),
        )
    }

    /// `-inf` above the diagonal of the last two (equal) dimensions: the causal mask of
    /// attention scores (`scores.masked_fill(causal, float("-inf"))`). Saves nothing (torch's node
    /// saves its boolean mask, one buffer shared by every layer).
    pub fn causal_mask(&self) -> Result<Tensor<T>> {
        const OP: &str = "causal_mask";
        let (rows, cols) = self.rows_cols();
        let square = self.shape().len() >= 2 && self.shape()[self.shape().len() - 2] == cols;
        if !square {
            return Err(invalid(
                OP,
                self.device(),
                format!(
                    "the last two dimensions must be equal, got {:?}",
                    self.shape()
                ),
            ));
        }
        count_forward(OP);
        let y = ops::causal_mask(self.data(), rows, cols, f32::NEG_INFINITY)?;
        Tensor::record(
            "MaskedFillBackward0",
            y,
            self.shape().to_vec(),
            &[self],
            |_, _| Vec::new(),
            Box::new(move |_, g| Ok(vec![Some(ops::causal_mask(g, rows, cols, 0.0)?)])),
        )
    }

    /// Dropout in training (`F.dropout(x, p)`, CUDA's `native_dropout`): zeroes each element with
    /// probability `p` and scales the rest by `1/(1−p)`; saves a 1-byte mask. The elements dropped
    /// depend only on `seed` (draw it from your generator: `rng.next_u64()`), so a checkpointed
    /// function that captures the seed drops the same ones when it runs again (torch restores the
    /// RNG state for the same reason). With `p = 0` it returns `self`, and records nothing, as
    /// torch does.
    pub fn dropout(&self, p: f32, seed: u64) -> Result<Tensor<T>> {
        const OP: &str = "dropout";
        check_p(OP, self, p)?;
        if p == 0.0 {
            return Ok(self.clone());
        }
        count_forward(OP);
        let mask = ops::dropout_mask(self.device(), self.numel(), p, seed)?;
        let scale = 1.0 / (1.0 - p);
        let y = ops::dropout_apply(self.data(), &mask, scale)?;
        Tensor::record(
            "NativeDropoutBackward0",
            y,
            self.shape().to_vec(),
            &[self],
            move |_, _| vec![Saved::Mask(mask)],
            Box::new(move |saved, g| match &saved[0] {
                Saved::Mask(m) => Ok(vec![Some(ops::dropout_apply(g, m, scale)?)]),
                _ => Err(autograd_error("internal: dropout saved no mask")),
            }),
        )
    }

    /// LayerNorm over the last dimension (`F.layer_norm(x, (h,), weight, bias, eps)`); saves the
    /// input, the weight and bias (existing blocks) and, with [`LayerNormStats::Keep`], each row's
    /// mean and rstd in f32 (torch on CUDA: two `[rows]` f32 tensors).
    pub fn layer_norm(
        &self,
        weight: &Tensor<T>,
        bias: &Tensor<T>,
        eps: f32,
        stats: LayerNormStats,
    ) -> Result<Tensor<T>> {
        const OP: &str = "layer_norm";
        let (rows, cols) = self.rows_cols();
        for (what, t) in [("weight", weight), ("bias", bias)] {
            if t.shape() != [cols] {
                return Err(invalid(
                    OP,
                    self.device(),
                    format!("the {what} must have shape [{cols}], got {:?}", t.shape()),
                ));
            }
        }
        count_forward(OP);
        let (mean, rstd) = ops::layer_norm_stats(self.data(), rows, cols, eps)?;
        let y = ops::layer_norm_apply(
            self.data(),
            &mean,
            &rstd,
            weight.data(),
            bias.data(),
            rows,
            cols,
        )?;
        let (x, w, b) = (share(self.data()), share(weight.data()), share(bias.data()));
        let keep = stats == LayerNormStats::Keep;
        let backward: BackwardFn<T> = Box::new(move |saved, g| {
            let (x, w) = (saved[0].value()?, saved[1].value()?);
            let recomputed;
            let (mean, rstd) = match (saved.get(3), saved.get(4)) {
                (Some(Saved::Stats(m)), Some(Saved::Stats(r))) => (m, r),
                _ => {
                    recomputed = ops::layer_norm_stats(x, rows, cols, eps)?;
                    (&recomputed.0, &recomputed.1)
                }
            };
            let (dx, dw, db) = ops::layer_norm_backward(g, x, mean, rstd, w, rows, cols)?;
            Ok(vec![Some(dx), Some(dw), Some(db)])
        });
        Tensor::record(
            "NativeLayerNormBackward0",
            y,
            self.shape().to_vec(),
            &[self, weight, bias],
            move |_, _| {
                let mut saved = vec![Saved::Value(x), Saved::Value(w), Saved::Value(b)];
                if keep {
                    saved.extend([Saved::Stats(mean), Saved::Stats(rstd)]);
                }
                saved
            },
            backward,
        )
    }

    /// Part `part` of `parts` equal column groups of `[b, s, parts·h]`, split into `heads` heads
    /// as a new `[b·heads, s, h/heads]` tensor: q, k or v of a fused QKV output (`parts = 3`), or
    /// the heads of a `[b, s, h]` tensor (`parts = 1`). torch's `split`, `view` and `transpose`
    /// are views; the copy here is the one its `matmul` makes when it reshapes them to
    /// `[b·a, s, d]` for `bmm` (at `b = 1` that reshape is a view, and torch saves the whole QKV
    /// block instead: the same bytes).
    /// Saves nothing.
    pub fn heads(&self, heads: usize, part: usize, parts: usize) -> Result<Tensor<T>> {
        const OP: &str = "heads";
        let (b, s, width) = self.batched(OP, "the input")?;
        let h = width.checked_div(parts).unwrap_or(0);
        if parts == 0
            || part >= parts
            || !width.is_multiple_of(parts)
            || heads == 0
            || !h.is_multiple_of(heads)
        {
            return Err(invalid(
                OP,
                self.device(),
                format!(
                    "part {part} of {parts} of width {width} in {heads} heads: the width must \
                     split into {parts} parts of whole heads"
                ),
            ));
        }
        count_forward(OP);
        let d = h / heads;
        let layout = HeadLayout {
            b,
            s,
            a: heads,
            d,
            stride: width,
            offset: part * h,
        };
        let y = ops::rows_to_heads(self.data(), layout)?;
        let dev = self.device().clone();
        Tensor::record(
            "SplitHeadsBackward",
            y,
            vec![b * heads, s, d],
            &[self],
            |_, _| Vec::new(),
            Box::new(move |_, g| {
                let mut dx = dev.alloc::<T>(b * s * width)?;
                ops::zero(&mut dx)?;
                ops::heads_to_rows(g, &mut dx, layout)?;
                Ok(vec![Some(dx)])
            }),
        )
    }

    /// `[b·a, s, d]` heads back to `[b, s, a·d]` rows in a new block (torch's
    /// `transpose(1, 2).reshape(b, s, h)`, which copies). Saves nothing.
    pub fn merge_heads(&self, batch: usize) -> Result<Tensor<T>> {
        const OP: &str = "merge_heads";
        let (za, s, d) = self.batched(OP, "the input")?;
        if batch == 0 || !za.is_multiple_of(batch) {
            return Err(invalid(
                OP,
                self.device(),
                format!("{za} heads do not split into a batch of {batch}"),
            ));
        }
        count_forward(OP);
        let a = za / batch;
        let layout = HeadLayout {
            b: batch,
            s,
            a,
            d,
            stride: a * d,
            offset: 0,
        };
        let mut y = self.device().alloc::<T>(self.numel())?;
        ops::heads_to_rows(self.data(), &mut y, layout)?;
        Tensor::record(
            "MergeHeadsBackward",
            y,
            vec![batch, s, a * d],
            &[self],
            |_, _| Vec::new(),
            Box::new(move |_, g| Ok(vec![Some(ops::rows_to_heads(g, layout)?)])),
        )
    }
}

/// Options of [`sdpa`] besides its inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    /// Keys after the query are masked (`is_causal=True`).
    pub causal: bool,
    /// Dropout probability on the attention weights (`dropout_p`).
    pub p: f32,
    /// Dropout's seed (see [`Tensor::dropout`]).
    pub seed: u64,
    /// Which implementation runs.
    pub backend: AttentionBackend,
}

/// Scaled-dot-product attention of `q`, `k`, `v` (`[batch·a, s, d]` each, from
/// [`Tensor::heads`]): `softmax(q·kᵀ/√d)·v`, returned as the layer's `[batch, s, a·d]` rows
/// (`F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)` under
/// `sdpa_kernel(backend)`, then `transpose(1, 2).reshape(b, s, h)`). What it keeps depends on the
/// backend ([`AttentionBackend`]); the values are the same up to rounding, dropout included. The
/// math backend's result is a copy, as torch's `reshape` of its non-contiguous output is; the
/// fused backends write the rows directly, and torch's `reshape` is then a view.
pub fn sdpa<T: Float>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    batch: usize,
    options: Attention,
) -> Result<Tensor<T>> {
    const OP: &str = "sdpa";
    let Attention {
        causal,
        p,
        seed,
        backend,
    } = options;
    let (z, s, d) = q.batched(OP, "q")?;
    if batch == 0 || !z.is_multiple_of(batch) {
        return Err(invalid(
            OP,
            q.device(),
            format!("{z} heads do not split into a batch of {batch}"),
        ));
    }
    for (what, t) in [("k", k), ("v", v)] {
        if t.shape() != q.shape() {
            return Err(invalid(
                OP,
                q.device(),
                format!("{what} has shape {:?}, q {:?}", t.shape(), q.shape()),
            ));
        }
    }
    check_p(OP, q, p)?;
    let scale = 1.0 / (d.max(1) as f32).sqrt();
    if backend == AttentionBackend::Math {
        let mut scores = q.bmm(k, true)?.mul_scalar(scale)?;
        if causal {
            scores = scores.causal_mask()?;
        }
        return scores
            .softmax()?
            .dropout(p, seed)?
            .bmm(v, false)?
            .merge_heads(batch);
    }
    count_forward(OP);
    let shape = SdpaShape {
        heads: z,
        s,
        d,
        lse_stride: lse_len(backend, s),
        scale,
        causal,
        p,
        seed,
        a: z / batch,
        rows: true,
    };
    let (out, lse) = ops::sdpa_forward(q.data(), k.data(), v.data(), shape)?;
    let saved_out = share(&out);
    let (qs, ks, vs) = (share(q.data()), share(k.data()), share(v.data()));
    let name = match backend {
        AttentionBackend::Flash => "ScaledDotProductFlashAttentionBackward0",
        _ => "ScaledDotProductEfficientAttentionBackward0",
    };
    Tensor::record(
        name,
        out,
        vec![batch, s, z / batch * d],
        &[q, k, v],
        move |_, _| {
            vec![
                Saved::Value(qs),
                Saved::Value(ks),
                Saved::Value(vs),
                Saved::Value(saved_out),
                Saved::Stats(lse),
            ]
        },
        Box::new(move |saved, g| {
            let lse: &Buffer<f32> = match &saved[4] {
                Saved::Stats(l) => l,
                _ => return Err(autograd_error("internal: attention saved no logsumexp")),
            };
            let values = [0, 1, 2, 3].map(|i| saved[i].value());
            let [q, k, v, out] = values;
            let (dq, dk, dv) = ops::sdpa_backward(g, [q?, k?, v?, out?], lse, shape)?;
            Ok(vec![Some(dq), Some(dk), Some(dv)])
        }),
    )
}

/// How [`GptLayer::forward`] runs: dropout, LayerNorm's statistics, and the attention core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerPlan {
    /// Dropout probability of the three dropouts (attention weights, after the projection, after
    /// the MLP).
    pub p: f32,
    /// The seed of the layer's dropouts (each of the three uses its own seed drawn from it).
    pub seed: u64,
    /// Whether the LayerNorms keep their statistics.
    pub stats: LayerNormStats,
    /// The attention core's implementation.
    pub backend: AttentionBackend,
    /// Whether the attention core (`sdpa`) runs under [`super::checkpoint`], keeping only q, k
    /// and v: Korthikanti et al.'s selective recomputation.
    pub checkpoint_core: bool,
}

impl LayerPlan {
    /// The layer as Korthikanti et al. count it: 1-byte dropout masks, LayerNorm statistics not
    /// kept, the math attention, nothing recomputed. Dropout 0.1, seed 0.
    pub fn paper() -> LayerPlan {
        LayerPlan {
            p: 0.1,
            seed: 0,
            stats: LayerNormStats::Recompute,
            backend: AttentionBackend::Math,
            checkpoint_core: false,
        }
    }

    /// As torch 2.15 runs the layer on CUDA with the math attention: LayerNorm statistics kept.
    pub fn torch() -> LayerPlan {
        LayerPlan {
            stats: LayerNormStats::Keep,
            ..LayerPlan::paper()
        }
    }

    /// The three dropouts' seeds: attention weights, projection, MLP.
    pub fn seeds(&self) -> [u64; 3] {
        [0u64, 1, 2].map(|i| crate::ops::XorShift::new(self.seed ^ (i << 56)).next_u64())
    }
}

/// One GPT layer's parameters (pre-LayerNorm: `x + drop(proj(attn(ln1(x))))`, then
/// `x + drop(fc2(gelu(fc1(ln2(x)))))`), every one a leaf that requires grad.
pub struct GptLayer<T: Float = f32> {
    /// Hidden size h.
    pub hidden: usize,
    /// Attention heads a (h must be a multiple).
    pub heads: usize,
    /// LayerNorm 1's weight and bias, `[h]`.
    pub ln1: (Tensor<T>, Tensor<T>),
    /// The fused QKV projection, `[3h, h]`.
    pub qkv: Linear<T>,
    /// The attention output projection, `[h, h]`.
    pub proj: Linear<T>,
    /// LayerNorm 2's weight and bias, `[h]`.
    pub ln2: (Tensor<T>, Tensor<T>),
    /// The MLP's first layer, `[4h, h]`.
    pub fc1: Linear<T>,
    /// The MLP's second layer, `[h, 4h]`.
    pub fc2: Linear<T>,
}

/// LayerNorm's `eps` (torch's default).
pub const LAYER_NORM_EPS: f32 = 1e-5;

impl<T: Float> GptLayer<T> {
    /// A layer of hidden size `hidden` and `heads` heads: linear weights as `nn.Linear` draws them
    /// (from `rng`, in f32, rounded to `T`), LayerNorm weights 1 and biases 0.
    pub fn new(
        dev: &crate::memory::device::Device,
        hidden: usize,
        heads: usize,
        rng: &mut crate::ops::XorShift,
    ) -> Result<GptLayer<T>> {
        if heads == 0 || !hidden.is_multiple_of(heads) {
            return Err(invalid(
                "GptLayer::new",
                dev,
                format!("hidden size {hidden} does not split into {heads} heads"),
            ));
        }
        let norm = || -> Result<(Tensor<T>, Tensor<T>)> {
            Ok((
                Tensor::from_f32(dev, &vec![1.0; hidden], &[hidden])?.requires_grad_(true)?,
                Tensor::zeros(dev, &[hidden])?.requires_grad_(true)?,
            ))
        };
        Ok(GptLayer {
            hidden,
            heads,
            ln1: norm()?,
            qkv: Linear::new(dev, hidden, 3 * hidden, rng)?,
            proj: Linear::new(dev, hidden, hidden, rng)?,
            ln2: norm()?,
            fc1: Linear::new(dev, hidden, 4 * hidden, rng)?,
            fc2: Linear::new(dev, 4 * hidden, hidden, rng)?,
        })
    }

    /// The same parameters cast to `U` (16-bit copies of f32 master weights, as chapter 6 makes
    /// them), new leaves that require grad.
    pub fn cast<U: Float>(&self) -> Result<GptLayer<U>> {
        let cast = |t: &Tensor<T>| -> Result<Tensor<U>> {
            Tensor::from_buffer(ops::cast::<T, U>(t.data())?, t.shape())?.requires_grad_(true)
        };
        let linear = |l: &Linear<T>| -> Result<Linear<U>> {
            Ok(Linear {
                weight: cast(&l.weight)?,
                bias: cast(&l.bias)?,
            })
        };
        Ok(GptLayer {
            hidden: self.hidden,
            heads: self.heads,
            ln1: (cast(&self.ln1.0)?, cast(&self.ln1.1)?),
            qkv: linear(&self.qkv)?,
            proj: linear(&self.proj)?,
            ln2: (cast(&self.ln2.0)?, cast(&self.ln2.1)?),
            fc1: linear(&self.fc1)?,
            fc2: linear(&self.fc2)?,
        })
    }

    /// Every parameter.
    pub fn parameters(&self) -> Vec<Tensor<T>> {
        let mut p = vec![self.ln1.0.clone(), self.ln1.1.clone()];
        for l in [&self.qkv, &self.proj] {
            p.extend([l.weight.clone(), l.bias.clone()]);
        }
        p.extend([self.ln2.0.clone(), self.ln2.1.clone()]);
        for l in [&self.fc1, &self.fc2] {
            p.extend([l.weight.clone(), l.bias.clone()]);
        }
        p
    }

    /// The layer's output `[b, s, h]` for `x` `[b, s, h]` (the reference the chapter's exercise
    /// is checked against).
    pub fn forward(&self, x: &Tensor<T>, plan: &LayerPlan) -> Result<Tensor<T>> {
        let (b, s, h) = x.batched("GptLayer::forward", "the input")?;
        if h != self.hidden {
            return Err(invalid(
                "GptLayer::forward",
                x.device(),
                format!(
                    "the input's hidden size is {h}, the layer's {}",
                    self.hidden
                ),
            ));
        }
        let [seed_attn, seed_proj, seed_mlp] = plan.seeds();
        let lin = |t: &Tensor<T>, l: &Linear<T>, out: usize| -> Result<Tensor<T>> {
            let rows = t.reshape(&[b * s, t.shape()[2]])?;
            linear(&rows, &l.weight, Some(&l.bias))?.reshape(&[b, s, out])
        };
        // Attention block.
        let y = x.layer_norm(&self.ln1.0, &self.ln1.1, LAYER_NORM_EPS, plan.stats)?;
        let qkv = lin(&y, &self.qkv, 3 * h)?;
        drop(y);
        let heads = self.heads;
        let qkv_heads = [0, 1, 2].map(|i| qkv.heads(heads, i, 3));
        drop(qkv);
        let [q, k, v] = qkv_heads;
        let options = Attention {
            causal: true,
            p: plan.p,
            seed: seed_attn,
            backend: plan.backend,
        };
        let core = move |t: &[Tensor<T>]| sdpa(&t[0], &t[1], &t[2], b, options);
        let context = if plan.checkpoint_core {
            checkpoint(core, &[q?, k?, v?])?
        } else {
            core(&[q?, k?, v?])?
        };
        let attn = lin(&context, &self.proj, h)?.dropout(plan.p, seed_proj)?;
        drop(context);
        let x = x.add(&attn)?;
        drop(attn);
        // MLP block.
        let y = x.layer_norm(&self.ln2.0, &self.ln2.1, LAYER_NORM_EPS, plan.stats)?;
        let hidden = lin(&y, &self.fc1, 4 * h)?.gelu()?;
        drop(y);
        let mlp = lin(&hidden, &self.fc2, h)?.dropout(plan.p, seed_mlp)?;
        x.add(&mlp)
    }
}
