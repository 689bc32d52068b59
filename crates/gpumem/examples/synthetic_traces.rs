//! Writes the synthetic allocation traces of `bench/traces/`: a transformer training run with
//! sequence lengths that grow and shrink, and two patterns known to fragment caching allocators.
//! Deterministic: the same files every run (fixed seeds, no clock).
//!
//! `cargo run -p gpumem --example synthetic_traces [-- OUT_DIR]` (default OUT_DIR: `bench/traces`)

use anyhow::Context;
use gpumem::ops::XorShift;
use gpumem::trace::{AllocTrace, TraceBuilder};
use std::collections::VecDeque;
use std::path::PathBuf;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// A whole number in `lo..hi`, a multiple of `align`.
fn between(rng: &mut XorShift, lo: u64, hi: u64, align: u64) -> u64 {
    (lo + rng.next_u64() % (hi - lo)) / align * align
}

/// The shape of the synthetic transformer (GPT-2 small's width, six layers).
struct Gpt {
    layers: usize,
    hidden: u64,
    heads: u64,
    vocab: u64,
    max_seq: u64,
    batch: u64,
}

/// One parameter tensor: its f32 elements.
struct Param {
    elems: u64,
    /// Whether forward casts it to fp16 (matrices under autocast; norms and biases stay f32).
    matrix: bool,
}

impl Gpt {
    /// Every parameter, in the order the model creates them: embeddings, then per layer.
    fn params(&self) -> Vec<Param> {
        let h = self.hidden;
        let p = |elems, matrix| Param { elems, matrix };
        let mut out = vec![p(self.vocab * h, false), p(self.max_seq * h, false)];
        for _ in 0..self.layers {
            out.extend([
                p(h, false),        // ln1.weight
                p(h, false),        // ln1.bias
                p(3 * h * h, true), // attn.qkv.weight
                p(3 * h, false),    // attn.qkv.bias
                p(h * h, true),     // attn.proj.weight
                p(h, false),        // attn.proj.bias
                p(h, false),        // ln2.weight
                p(h, false),        // ln2.bias
                p(4 * h * h, true), // mlp.fc1.weight
                p(4 * h, false),    // mlp.fc1.bias
                p(4 * h * h, true), // mlp.fc2.weight
                p(h, false),        // mlp.fc2.bias
            ]);
        }
        out.extend([p(h, false), p(h, false)]); // ln_f; the LM head is tied to the embedding
        out
    }
}

/// A matrix's gradient: computed in fp16, then added to its f32 `.grad` (which appears here).
fn weight_grad(b: &mut TraceBuilder, grads: &mut Vec<u64>, p: &Param) {
    let tmp = b.alloc(p.elems * 2, 0);
    grads.push(b.alloc(p.elems * 4, 0));
    b.free(tmp);
}

/// Mixed-precision training of a small GPT with AdamW: fp16 activations, f32 master weights,
/// gradients set to None after every step (torch's default), sequence lengths that grow and shrink.
fn transformer(steps_seq: &[u64]) -> AllocTrace {
    let gpt = Gpt {
        layers: 6,
        hidden: 768,
        heads: 12,
        vocab: 8192,
        max_seq: 1024,
        batch: 4,
    };
    let mut b = TraceBuilder::new();
    let params = gpt.params();
    let per_layer = 12;
    for p in &params {
        b.alloc(p.elems * 4, 0);
    }
    let mut adam: Vec<(u64, u64)> = Vec::new();
    let (h, half) = (gpt.hidden, 2);
    for &seq in steps_seq {
        let tokens = gpt.batch * seq;
        let act = |width: u64| tokens * width * half;
        let attn = gpt.batch * gpt.heads * seq * seq * half;
        let ids = b.alloc(tokens * 8, 0);
        let targets = b.alloc(tokens * 8, 0);
        // Forward: the embedding, then each layer keeps what its backward needs.
        let mut x = b.alloc(act(h), 0);
        let embedded = x;
        let mut saved: Vec<Vec<u64>> = Vec::new();
        for layer in 0..gpt.layers {
            let w = &params[2 + layer * per_layer..2 + (layer + 1) * per_layer];
            let casts: Vec<u64> = w
                .iter()
                .filter(|p| p.matrix)
                .map(|p| b.alloc(p.elems * half, 0))
                .collect();
            let ln1 = b.alloc(act(h), 0);
            let ln1_stats = b.alloc(tokens * 8, 0);
            let qkv = b.alloc(act(3 * h), 0);
            let scores = b.alloc(attn, 0);
            let probs = b.alloc(attn, 0);
            b.free(scores);
            let ctx = b.alloc(act(h), 0);
            let proj = b.alloc(act(h), 0);
            let mid = b.alloc(act(h), 0);
            b.free(proj);
            let ln2 = b.alloc(act(h), 0);
            let ln2_stats = b.alloc(tokens * 8, 0);
            let fc1 = b.alloc(act(4 * h), 0);
            let gelu = b.alloc(act(4 * h), 0);
            let fc2 = b.alloc(act(h), 0);
            let out = b.alloc(act(h), 0);
            b.free(fc2);
            let mut keep = vec![
                x, ln1, ln1_stats, qkv, probs, ctx, mid, ln2, ln2_stats, fc1, gelu,
            ];
            keep.extend(casts);
            saved.push(keep);
            x = out;
        }
        let ln_f = b.alloc(act(h), 0);
        let logits = b.alloc(act(gpt.vocab), 0);
        let log_probs = b.alloc(tokens * gpt.vocab * 4, 0); // cross-entropy upcasts to f32
        let loss = b.alloc(4, 0);
        // Backward, in reverse; each parameter's f32 .grad appears at its first gradient.
        let mut grads: Vec<u64> = Vec::new();
        let g_logits32 = b.alloc(tokens * gpt.vocab * 4, 0);
        b.free(log_probs);
        let g_logits = b.alloc(act(gpt.vocab), 0);
        b.free(g_logits32);
        let tmp = b.alloc(gpt.vocab * h * half, 0);
        grads.push(b.alloc(gpt.vocab * h * 4, 0)); // the tied embedding's gradient
        b.free(tmp);
        let mut g = b.alloc(act(h), 0);
        b.free(g_logits);
        b.free(logits);
        grads.push(b.alloc(h * 4, 0));
        grads.push(b.alloc(h * 4, 0));
        let g2 = b.alloc(act(h), 0);
        b.free(g);
        b.free(ln_f);
        b.free(x);
        g = g2;
        for layer in (0..gpt.layers).rev() {
            let w = &params[2 + layer * per_layer..2 + (layer + 1) * per_layer];
            let s = saved.pop().expect("one entry per layer");
            let [
                input,
                ln1,
                ln1_stats,
                qkv,
                probs,
                ctx,
                mid,
                ln2,
                ln2_stats,
                fc1,
                gelu,
            ] = s[..11].try_into().expect("eleven saved tensors");
            // MLP
            weight_grad(&mut b, &mut grads, &w[10]);
            grads.push(b.alloc(w[11].elems * 4, 0));
            let g_gelu = b.alloc(act(4 * h), 0);
            b.free(gelu);
            let g_fc1 = b.alloc(act(4 * h), 0);
            b.free(g_gelu);
            b.free(fc1);
            weight_grad(&mut b, &mut grads, &w[8]);
            grads.push(b.alloc(w[9].elems * 4, 0));
            let g_ln2 = b.alloc(act(h), 0);
            b.free(g_fc1);
            grads.push(b.alloc(w[6].elems * 4, 0));
            grads.push(b.alloc(w[7].elems * 4, 0));
            let g_mid = b.alloc(act(h), 0);
            b.free(g_ln2);
            b.free(ln2);
            b.free(ln2_stats);
            b.free(g);
            // Attention
            weight_grad(&mut b, &mut grads, &w[4]);
            grads.push(b.alloc(w[5].elems * 4, 0));
            let g_ctx = b.alloc(act(h), 0);
            let g_probs = b.alloc(attn, 0);
            b.free(g_ctx);
            let g_scores = b.alloc(attn, 0);
            b.free(g_probs);
            b.free(probs);
            let g_qkv = b.alloc(act(3 * h), 0);
            b.free(g_scores);
            b.free(ctx);
            b.free(qkv);
            weight_grad(&mut b, &mut grads, &w[2]);
            grads.push(b.alloc(w[3].elems * 4, 0));
            let g_ln1 = b.alloc(act(h), 0);
            b.free(g_qkv);
            grads.push(b.alloc(w[0].elems * 4, 0));
            grads.push(b.alloc(w[1].elems * 4, 0));
            let g_in = b.alloc(act(h), 0);
            b.free(g_ln1);
            b.free(ln1);
            b.free(ln1_stats);
            b.free(g_mid);
            b.free(mid);
            if layer > 0 {
                b.free(input);
            }
            for &cast in &s[11..] {
                b.free(cast);
            }
            g = g_in;
        }
        grads.push(b.alloc(gpt.max_seq * h * 4, 0)); // the position embedding's gradient
        b.free(embedded);
        b.free(g);
        b.free(loss);
        b.free(ids);
        b.free(targets);
        // AdamW: state on the first step; one temporary per parameter for the update.
        if adam.is_empty() {
            adam = params
                .iter()
                .map(|p| (b.alloc(p.elems * 4, 0), b.alloc(p.elems * 4, 0)))
                .collect();
        }
        for p in &params {
            let denom = b.alloc(p.elems * 4, 0);
            b.free(denom);
        }
        // optimizer.zero_grad(): set_to_none frees every gradient.
        for grad in grads {
            b.free(grad);
        }
    }
    b.finish(format!(
        "Synthetic transformer training: a 6-layer GPT (hidden 768, 12 heads, vocab 8192), batch 4, \
         fp16 activations under autocast with f32 master weights, AdamW, gradients set to None after \
         each step; sequence lengths per step {steps_seq:?}. Activations allocated layer by layer \
         forward and freed in reverse in backward. Generated by \
         `cargo run -p gpumem --example synthetic_traces`."
    ))
}

/// Short-lived large blocks interleaved with long-lived medium and small ones: the long-lived
/// blocks pin the segments the short-lived ones were carved from.
fn interleaved_lifetimes() -> AllocTrace {
    let mut rng = XorShift::new(11);
    let mut b = TraceBuilder::new();
    let mut short: VecDeque<u64> = VecDeque::new();
    // (the iteration it dies at, id)
    let mut long: Vec<(usize, u64)> = Vec::new();
    for i in 0..600 {
        let s = b.alloc(between(&mut rng, 4 * MIB, 9 * MIB, 4), 0);
        short.push_back(s);
        if i % 2 == 0 {
            let l = b.alloc(between(&mut rng, 1100 * KIB, 3 * MIB, 4), 0);
            long.push((i + 30 + (rng.next_u64() % 90) as usize, l));
        }
        let small = b.alloc(between(&mut rng, 4 * KIB, 512 * KIB, 4), 0);
        if i % 7 == 0 {
            long.push((i + 50 + (rng.next_u64() % 150) as usize, small));
        } else {
            b.free(small);
        }
        while short.len() > 2 {
            let id = short.pop_front().expect("not empty");
            b.free(id);
        }
        let (dead, alive): (Vec<_>, Vec<_>) = long.into_iter().partition(|&(end, _)| end <= i);
        for (_, id) in dead {
            b.free(id);
        }
        long = alive;
    }
    for id in short {
        b.free(id);
    }
    for (_, id) in long {
        b.free(id);
    }
    b.finish(
        "Interleaved lifetimes: 600 iterations, each allocating a short-lived block of 4-9 MiB (live \
         for 2 iterations), every other one a long-lived block of 1.1-3 MiB (live 30-120 \
         iterations), and a 4-512 KiB block, every 7th long-lived (50-200 iterations). Seed 11. \
         Generated by `cargo run -p gpumem --example synthetic_traces`.",
    )
}

/// Buffers that grow a little every step (a KV cache or an output list grown by concatenation):
/// each step allocates the larger buffer while the old one is still live (for the copy), then frees
/// the old one; a fixed-size temporary runs alongside.
fn growing_sizes() -> AllocTrace {
    let mut b = TraceBuilder::new();
    // (current size, growth per step, id)
    let mut buffers = [(MIB, 96 * KIB, None), (3 * MIB, 160 * KIB, None)];
    for _ in 0..360 {
        let temp = b.alloc(6 * MIB + 4 * KIB, 0);
        for (size, growth, id) in buffers.iter_mut() {
            *size += *growth;
            let new = b.alloc(*size, 0);
            if let Some(old) = id.replace(new) {
                b.free(old);
            }
        }
        b.free(temp);
    }
    for (_, _, id) in buffers {
        if let Some(id) = id {
            b.free(id);
        }
    }
    b.finish(
        "Growing sizes: two buffers grown every step (by 96 KiB from 1 MiB and by 160 KiB from \
         3 MiB, 360 steps, to 34.8 and 59.3 MiB), each step allocating the larger buffer before \
         freeing the old one, beside a 6 MiB temporary. Generated by \
         `cargo run -p gpumem --example synthetic_traces`.",
    )
}

fn main() -> anyhow::Result<()> {
    let out = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/traces"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let traces = [
        (
            "transformer-step",
            transformer(&[128, 256, 512, 1024, 768, 384, 1024, 256]),
        ),
        ("interleaved-lifetimes", interleaved_lifetimes()),
        ("growing-sizes", growing_sizes()),
    ];
    for (name, trace) in traces {
        let summary = trace
            .validate()
            .with_context(|| format!("the {name} trace"))?;
        let path = out.join(format!("{name}.json"));
        std::fs::write(&path, trace.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "{}: {} events ({} allocs, {} frees, {} live at the end)",
            path.display(),
            trace.events.len(),
            summary.allocs,
            summary.frees,
            summary.live_at_end
        );
    }
    Ok(())
}
