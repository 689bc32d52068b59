//! A small reverse-mode autograd over device buffers: what PyTorch's autograd keeps in memory.
//!
//! A [`Tensor`] is a [`Buffer`](crate::Buffer) with a shape, and, when it was made by an op while grad mode was on
//! and some input required grad, a node of the graph (`grad_fn`). Each node keeps exactly the
//! tensors PyTorch's backward formula for that op keeps (PyTorch 2.x,
//! `tools/autograd/derivatives.yaml`), as ordinary allocator blocks, so `memory_allocated` shows
//! what autograd costs:
//!
//! | op | torch's node | saved for backward |
//! |----|--------------|--------------------|
//! | [`linear`] | `AddmmBackward0` | the input (if the weight requires grad) and the weight (if the input does) |
//! | [`Tensor::matmul`] | `MmBackward0` | each operand, if the other requires grad |
//! | [`Tensor::add`] | `AddBackward0` | nothing |
//! | [`Tensor::mul`] | `MulBackward0` | each operand, if the other requires grad |
//! | [`Tensor::mul_scalar`] | `MulBackward0` | the scalar only (no device memory) |
//! | [`Tensor::relu`] | `ReluBackward0` | its result |
//! | [`Tensor::gelu`] | `GeluBackward0` | its input |
//! | [`Tensor::sum`], [`Tensor::mean`] | `SumBackward0`, `MeanBackward0` | the shape only |
//! | [`mse_loss`] | `MseLossBackward0` | the prediction and the target |
//! | [`log_softmax`] | `LogSoftmaxBackward0` | its result |
//! | [`nll_loss`] | `NllLossBackward0` | the log-probabilities, the targets and a one-element `total_weight` |
//! | [`cross_entropy`] | the two above | as the two above |
//!
//! A transformer layer's ops (3-D tensors, [`Tensor::bmm`], [`Tensor::softmax`],
//! [`Tensor::dropout`], [`Tensor::layer_norm`], [`sdpa`], ...) have their own table in the
//! `transformer` part of this module: see [`sdpa`] and [`AttentionBackend`].
//!
//! A saved tensor is a second handle on the same block, not a copy: saving costs memory only when
//! the block would otherwise have been freed (a hidden activation that the next layer overwrote).
//! The graph stays alive as long as any tensor that references it (the loss, an output, a running
//! total built with [`Tensor::add`]) is alive; [`Tensor::detach`] and [`Tensor::item`] give values
//! without it. [`Tensor::backward`] frees each node's saved tensors right after the node has run
//! (PyTorch's `retain_graph=False`); a second backward through those nodes is an error with
//! torch's message. [`no_grad`] and [`inference_mode`] are RAII guards over a thread-local mode, as
//! torch's are. There is no `eval()` here because `eval()` is not an autograd switch: in torch it
//! changes what dropout and batch norm do, and the graph is recorded all the same.
//!
//! [`checkpoint`] runs a function without keeping what its ops would save, keeps only its inputs,
//! and runs the function again in backward; [`checkpoint_sequential`] does it for the segments of a
//! list of layers. Both behave like torch's `use_reentrant=False`: gradients reach the parameters a
//! function uses even when none of its inputs requires grad. [`forward_ops`] counts the forward
//! runs of each op on this thread, recomputation included.
//!
//! Differences from torch, each visible in the code: tensors have at most 4 dimensions, are
//! contiguous and do not broadcast; in-place ops take the handle and return it with its new
//! history (other clones keep the old one); a saved tensor's version counter lives in its memory;
//! `sum`'s backward materialises the gradient that torch keeps as an expanded view; the engine runs
//! on the calling thread, latest node first, as torch's does on one device.
//!
//! Chapters 5–7 keep [`crate::ops::Mlp`], whose forward returns its saved activations explicitly
//! and whose backward is written out by hand: their exercises and pictures are about gradient
//! buffers, micro-batches, casts and copies that the learner manages, and that model shows each of
//! them. This module is the graph that chapters 8 and 9 are about; both models compute the same
//! numbers on the same weights (a test checks it).

mod checkpoint;
mod engine;
mod errors;
mod functional;
mod graph;
mod in_place;
mod mode;
mod nn;
mod tensor;
mod transformer;
pub use transformer::{
    Attention, AttentionBackend, GptLayer, LAYER_NORM_EPS, LayerNormStats, LayerPlan, lse_len, sdpa,
};

pub use checkpoint::{
    Layer, Reentrant, checkpoint, checkpoint_sequential, checkpoint_sequential_with,
    checkpoint_with,
};
pub use functional::{class_targets, cross_entropy, linear, log_softmax, mse_loss, nll_loss};
pub use graph::SavedTensor;
pub use mode::{
    GradModeGuard, InferenceModeGuard, enable_grad, forward_ops, forward_ops_total, inference_mode,
    is_grad_enabled, is_inference_mode_enabled, no_grad,
};
pub use nn::{Activation, Linear, Mlp};
pub use tensor::Tensor;
