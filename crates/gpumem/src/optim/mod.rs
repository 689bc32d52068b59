//! Optimizers over [`crate::autograd`] parameters, with their state on the device as torch keeps it
//! (PyTorch 2.x as in its current source, `torch/optim/sgd.py`, `adam.py`, `adamw.py`):
//!
//! | optimizer | state per parameter (device memory) | created |
//! |-----------|-------------------------------------|---------|
//! | [`Sgd`], `momentum == 0` | nothing | — |
//! | [`Sgd`], `momentum > 0` | `momentum_buffer` (the parameter's size) | first step: a copy of the gradient |
//! | [`Adam`], [`Adam::adamw`] | `exp_avg`, `exp_avg_sq` (the parameter's size each) | first step: zeros |
//!
//! State is created lazily, on the first [`Optimizer::step`], only for parameters that have a
//! gradient, as torch does; Adam creates it for every such parameter before it updates any
//! (torch 2.15's `_init_group`). Adam's `step` count is a host number here: torch keeps it as a
//! one-element tensor on the CPU unless `capturable` or `fused` is set (both off by default), so it
//! takes no device memory either way. torch's `amsgrad=True` would add a third tensor,
//! `max_exp_avg_sq`; it is not offered here.
//!
//! Two implementations, chosen like torch's `foreach` argument ([`Implementation`]):
//! - [`Implementation::ForLoop`] (`_single_tensor_*`): one parameter at a time, so its temporaries
//!   are at most those of the largest parameter (Adam's denominator: `sqrt(exp_avg_sq)` and its
//!   quotient by the bias correction, two blocks for a moment).
//! - [`Implementation::ForEach`] (`_multi_tensor_*`): each operation over every parameter at once,
//!   as the `_foreach_*` kernels do, so a temporary exists for every parameter at the same time:
//!   Adam's `exp_avg_sq_sqrt` list is one more copy of all the parameters during `step()`.
//!   torch picks it by default when every parameter is a CUDA tensor (`foreach=None`); gpumem's
//!   devices all stand for GPU memory, so [`Implementation::Default`] picks it everywhere.
//!
//! [`Optimizer::zero_grad`] takes torch's `set_to_none` (default `True` since PyTorch 2.0): the
//! gradients are dropped and their blocks freed, rather than filled with zeros and kept.
//!
//! Every write to a parameter bumps its version counter, as torch's in-place updates do.

mod adam;
mod sgd;

pub use adam::{Adam, AdamOptions};
pub use sgd::{Sgd, SgdOptions};

use crate::autograd::Tensor;
use crate::error::{Error, Result};
use crate::memory::buffer::Buffer;
use crate::ops::{self, Float};

/// A second handle on the same memory (no copy).
pub(super) fn share<T: Float>(b: &Buffer<T>) -> Result<Buffer<T>> {
    b.to(b.device())
}

pub(super) fn invalid<T: Float>(op: &'static str, params: &[Tensor<T>], message: String) -> Error {
    Error::InvalidArgument {
        op,
        device: params
            .first()
            .map_or_else(|| "no device".to_string(), |p| p.device().to_string()),
        message,
    }
}

/// How a step walks the parameters (torch's `foreach` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    /// torch's `foreach=None`: torch 2.15 picks for-each when every parameter is a CUDA tensor
    /// (`_default_to_fused_or_foreach`). Every gpumem device is a GPU's memory (the `cpu` device
    /// stands in for one), so the default is for-each on every device.
    Default,
    /// One parameter at a time (`foreach=False`, torch's `_single_tensor_*`).
    ForLoop,
    /// Each operation over all parameters at once (`foreach=True`, torch's `_multi_tensor_*`).
    ForEach,
}

impl Implementation {
    fn for_each<T: Float>(self, params: &[Tensor<T>]) -> bool {
        match self {
            Implementation::Default => !params.is_empty(),
            Implementation::ForLoop => false,
            Implementation::ForEach => true,
        }
    }
}

/// What every optimizer here does (`torch.optim.Optimizer`).
pub trait Optimizer<T: Float> {
    /// Updates every parameter that has a gradient (`optimizer.step()`); creates the state on the
    /// first call.
    fn step(&mut self) -> Result<()>;

    /// The parameters, in the order given.
    fn params(&self) -> &[Tensor<T>];

    /// Bytes of the allocator blocks the optimizer's state holds on the device now.
    fn state_bytes(&self) -> u64;

    /// `optimizer.zero_grad(set_to_none)`: with `true` (torch's default since 2.0) every gradient
    /// is dropped and its block freed; with `false` every gradient is filled with zeros in place
    /// and keeps its block.
    fn zero_grad(&self, set_to_none: bool) -> Result<()> {
        for p in self.params() {
            if set_to_none {
                p.clear_grad();
            } else if let Some(g) = p.grad() {
                let mut data = share(g.data())?;
                ops::zero(&mut data)?;
            }
        }
        Ok(())
    }
}

pub(super) fn check_hyper<T: Float>(
    op: &'static str,
    params: &[Tensor<T>],
    checks: &[(&str, f32, bool)],
) -> Result<()> {
    for &(what, value, ok) in checks {
        if !ok || value.is_nan() {
            return Err(invalid(op, params, format!("Invalid {what}: {value}")));
        }
    }
    Ok(())
}

/// The parameters that have a gradient, with their index and gradient.
pub(super) fn with_grad<T: Float>(params: &[Tensor<T>]) -> Vec<(usize, Tensor<T>)> {
    params
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.grad().map(|g| (i, g)))
        .collect()
}

/// `p ← p + alpha·d`, counted as an in-place write of `p`.
pub(super) fn add_to_param<T: Float>(p: &Tensor<T>, alpha: f32, d: &Buffer<T>) -> Result<()> {
    let mut data = share(p.data())?;
    ops::axpy(alpha, d, &mut data)?;
    p.data().bump_version();
    Ok(())
}

/// `g + wd·p` in a new block (torch's `grad.add(param, alpha=weight_decay)`).
pub(super) fn decayed_grad<T: Float>(
    g: &Buffer<T>,
    p: &Tensor<T>,
    weight_decay: f32,
) -> Result<Buffer<T>> {
    let mut d = g.try_clone()?;
    ops::axpy(weight_decay, p.data(), &mut d)?;
    Ok(d)
}
