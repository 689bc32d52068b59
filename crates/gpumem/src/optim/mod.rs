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

use crate::autograd::Tensor;
use crate::error::{Error, Result};
use crate::memory::buffer::Buffer;
use crate::ops::{self, Float};

/// A second handle on the same memory (no copy).
fn share<T: Float>(b: &Buffer<T>) -> Result<Buffer<T>> {
    b.to(b.device())
}

fn invalid<T: Float>(op: &'static str, params: &[Tensor<T>], message: String) -> Error {
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

fn check_hyper<T: Float>(
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
fn with_grad<T: Float>(params: &[Tensor<T>]) -> Vec<(usize, Tensor<T>)> {
    params
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.grad().map(|g| (i, g)))
        .collect()
}

/// `p ← p + alpha·d`, counted as an in-place write of `p`.
fn add_to_param<T: Float>(p: &Tensor<T>, alpha: f32, d: &Buffer<T>) -> Result<()> {
    let mut data = share(p.data())?;
    ops::axpy(alpha, d, &mut data)?;
    p.data().bump_version();
    Ok(())
}

/// `g + wd·p` in a new block (torch's `grad.add(param, alpha=weight_decay)`).
fn decayed_grad<T: Float>(g: &Buffer<T>, p: &Tensor<T>, weight_decay: f32) -> Result<Buffer<T>> {
    let mut d = g.try_clone()?;
    ops::axpy(weight_decay, p.data(), &mut d)?;
    Ok(d)
}

/// Hyperparameters of [`Sgd`] (`torch.optim.SGD`'s arguments and defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdOptions {
    /// Learning rate (torch's default 1e-3).
    pub lr: f32,
    /// Momentum factor; 0 keeps no state (default 0).
    pub momentum: f32,
    /// Dampening of the gradient in the momentum buffer (default 0).
    pub dampening: f32,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f32,
    /// Nesterov momentum (default false).
    pub nesterov: bool,
    /// For-loop or for-each (default: torch's rule).
    pub implementation: Implementation,
}

impl Default for SgdOptions {
    fn default() -> Self {
        SgdOptions {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            implementation: Implementation::Default,
        }
    }
}

/// Stochastic gradient descent with optional momentum (`torch.optim.SGD`).
pub struct Sgd<T: Float = f32> {
    params: Vec<Tensor<T>>,
    options: SgdOptions,
    /// `state[p]["momentum_buffer"]`: `None` until the parameter's first step with momentum.
    momentum_buffers: Vec<Option<Buffer<T>>>,
}

impl<T: Float> Sgd<T> {
    /// An optimizer over `params`; errors for the values torch refuses (a negative learning rate,
    /// momentum or weight decay; Nesterov without momentum or with dampening).
    pub fn new(params: Vec<Tensor<T>>, options: SgdOptions) -> Result<Sgd<T>> {
        const OP: &str = "Sgd::new";
        let o = options;
        check_hyper(
            OP,
            &params,
            &[
                ("learning rate", o.lr, o.lr >= 0.0),
                ("momentum value", o.momentum, o.momentum >= 0.0),
                ("weight_decay value", o.weight_decay, o.weight_decay >= 0.0),
            ],
        )?;
        if o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0) {
            return Err(invalid(
                OP,
                &params,
                "Nesterov momentum requires a momentum and zero dampening".into(),
            ));
        }
        let momentum_buffers = params.iter().map(|_| None).collect();
        Ok(Sgd {
            params,
            options,
            momentum_buffers,
        })
    }

    /// The momentum buffer of parameter `i` (`optimizer.state[p]["momentum_buffer"]`), if made.
    pub fn momentum_buffer(&self, i: usize) -> Option<&Buffer<T>> {
        self.momentum_buffers.get(i).and_then(Option::as_ref)
    }

    /// `buf ← momentum·buf + (1 − dampening)·g`, or `buf ← a copy of g` on the parameter's first
    /// step (torch: `torch.clone(grad).detach()`); returns the buffer.
    fn update_buffer(&mut self, i: usize, g: &Buffer<T>) -> Result<&Buffer<T>> {
        let o = self.options;
        let buf = match self.momentum_buffers[i].take() {
            None => g.try_clone()?,
            Some(mut buf) => {
                ops::scale(&mut buf, o.momentum)?;
                ops::axpy(1.0 - o.dampening, g, &mut buf)?;
                buf
            }
        };
        Ok(self.momentum_buffers[i].insert(buf))
    }

    /// torch's `_single_tensor_sgd`: one parameter at a time.
    fn step_for_loop(&mut self) -> Result<()> {
        let o = self.options;
        for (i, g) in with_grad(&self.params) {
            let p = self.params[i].clone();
            // `grad.add(param, alpha=weight_decay)`: a temporary, with weight decay only.
            let decayed = match o.weight_decay {
                0.0 => None,
                wd => Some(decayed_grad(g.data(), &p, wd)?),
            };
            let g = decayed.as_ref().unwrap_or(g.data());
            if o.momentum == 0.0 {
                add_to_param(&p, -o.lr, g)?;
            } else if o.nesterov {
                let buf = self.update_buffer(i, g)?;
                // `grad.add(buf, alpha=momentum)`: another temporary.
                let mut d = g.try_clone()?;
                ops::axpy(o.momentum, buf, &mut d)?;
                add_to_param(&p, -o.lr, &d)?;
            } else {
                add_to_param(&p, -o.lr, self.update_buffer(i, g)?)?;
            }
        }
        Ok(())
    }

    /// torch's `_multi_tensor_sgd`: each operation over every parameter with a gradient.
    fn step_for_each(&mut self) -> Result<()> {
        let o = self.options;
        let with_grad = with_grad(&self.params);
        // `_foreach_add(grads, params, alpha=weight_decay)`: a new list, all alive at once.
        let mut grads: Vec<Buffer<T>> = Vec::with_capacity(with_grad.len());
        for (i, g) in &with_grad {
            grads.push(match o.weight_decay {
                0.0 => share(g.data())?,
                wd => decayed_grad(g.data(), &self.params[*i], wd)?,
            });
        }
        if o.momentum != 0.0 {
            let mut bufs = Vec::with_capacity(grads.len());
            for ((i, _), g) in with_grad.iter().zip(&grads) {
                bufs.push(share(self.update_buffer(*i, g)?)?);
            }
            if o.nesterov {
                // `_foreach_add_(grads, bufs, alpha=momentum)`: in place, as torch does.
                for (g, buf) in grads.iter_mut().zip(&bufs) {
                    ops::axpy(o.momentum, buf, g)?;
                }
            } else {
                grads = bufs;
            }
        }
        for ((i, _), g) in with_grad.iter().zip(&grads) {
            add_to_param(&self.params[*i], -o.lr, g)?;
        }
        Ok(())
    }
}

impl<T: Float> Optimizer<T> for Sgd<T> {
    fn step(&mut self) -> Result<()> {
        if self.options.implementation.for_each(&self.params) {
            self.step_for_each()
        } else {
            self.step_for_loop()
        }
    }

    fn params(&self) -> &[Tensor<T>] {
        &self.params
    }

    fn state_bytes(&self) -> u64 {
        self.momentum_buffers
            .iter()
            .flatten()
            .map(|b| b.block_bytes() as u64)
            .sum()
    }
}

/// Hyperparameters of [`Adam`] (`torch.optim.Adam`'s / `AdamW`'s arguments).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamOptions {
    /// Learning rate (default 1e-3).
    pub lr: f32,
    /// Decay rates of the two moving averages (default 0.9, 0.999).
    pub betas: (f32, f32),
    /// Added to the denominator (default 1e-8).
    pub eps: f32,
    /// Adam: L2 penalty added to the gradient (default 0); AdamW: decoupled decay of the weights
    /// (default 1e-2).
    pub weight_decay: f32,
    /// For-loop or for-each (default: torch's rule).
    pub implementation: Implementation,
}

impl Default for AdamOptions {
    /// `torch.optim.Adam`'s defaults.
    fn default() -> Self {
        AdamOptions {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            implementation: Implementation::Default,
        }
    }
}

impl AdamOptions {
    /// `torch.optim.AdamW`'s defaults (weight decay 1e-2).
    pub fn adamw() -> AdamOptions {
        AdamOptions {
            weight_decay: 1e-2,
            ..AdamOptions::default()
        }
    }
}

/// The state torch keeps for one parameter of Adam.
struct AdamState<T: Float> {
    /// How many steps this parameter has had (`state["step"]`, a CPU tensor in torch).
    step: u64,
    exp_avg: Buffer<T>,
    exp_avg_sq: Buffer<T>,
}

/// Adam (`torch.optim.Adam`) or, made with [`Adam::adamw`], AdamW (`torch.optim.AdamW`).
pub struct Adam<T: Float = f32> {
    params: Vec<Tensor<T>>,
    options: AdamOptions,
    /// Decoupled weight decay (AdamW).
    decoupled: bool,
    state: Vec<Option<AdamState<T>>>,
}

impl<T: Float> Adam<T> {
    /// `torch.optim.Adam(params, ...)`; errors for the values torch refuses.
    pub fn new(params: Vec<Tensor<T>>, options: AdamOptions) -> Result<Adam<T>> {
        Adam::make(params, options, false)
    }

    /// `torch.optim.AdamW(params, ...)`: the weights decay by `lr·weight_decay` at each step,
    /// outside the moving averages (use [`AdamOptions::adamw`] for its defaults).
    pub fn adamw(params: Vec<Tensor<T>>, options: AdamOptions) -> Result<Adam<T>> {
        Adam::make(params, options, true)
    }

    fn make(params: Vec<Tensor<T>>, options: AdamOptions, decoupled: bool) -> Result<Adam<T>> {
        let o = options;
        check_hyper(
            "Adam::new",
            &params,
            &[
                ("learning rate", o.lr, o.lr >= 0.0),
                ("epsilon value", o.eps, o.eps >= 0.0),
                (
                    "beta parameter at index 0",
                    o.betas.0,
                    (0.0..1.0).contains(&o.betas.0),
                ),
                (
                    "beta parameter at index 1",
                    o.betas.1,
                    (0.0..1.0).contains(&o.betas.1),
                ),
                ("weight_decay value", o.weight_decay, o.weight_decay >= 0.0),
            ],
        )?;
        let state = params.iter().map(|_| None).collect();
        Ok(Adam {
            params,
            options,
            decoupled,
            state,
        })
    }

    /// torch's class name: `"Adam"` or `"AdamW"`.
    pub fn name(&self) -> &'static str {
        if self.decoupled { "AdamW" } else { "Adam" }
    }

    /// `state[p]["exp_avg"]` and `state[p]["exp_avg_sq"]` of parameter `i`, once made.
    pub fn moments(&self, i: usize) -> Option<(&Buffer<T>, &Buffer<T>)> {
        self.state
            .get(i)
            .and_then(Option::as_ref)
            .map(|s| (&s.exp_avg, &s.exp_avg_sq))
    }

    /// `state[p]["step"]` of parameter `i` (0 before its first step).
    pub fn step_count(&self, i: usize) -> u64 {
        self.state
            .get(i)
            .and_then(Option::as_ref)
            .map_or(0, |s| s.step)
    }

    /// The state of parameter `i`, made (zeros, step 0) on its first use.
    fn state_for(&mut self, i: usize) -> Result<&mut AdamState<T>> {
        let state = match self.state[i].take() {
            Some(state) => state,
            None => {
                let (dev, n) = (self.params[i].device(), self.params[i].numel());
                AdamState {
                    step: 0,
                    exp_avg: dev.alloc::<T>(n)?,
                    exp_avg_sq: dev.alloc::<T>(n)?,
                }
            }
        };
        Ok(self.state[i].insert(state))
    }

    /// Counts a step of parameter `i` and updates its moments from `g`:
    /// `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`. Returns the step size `lr / (1 − β₁ᵗ)` and
    /// `√(1 − β₂ᵗ)`.
    fn update_moments(&mut self, i: usize, g: &Buffer<T>) -> Result<(f32, f32)> {
        let AdamOptions { lr, betas, .. } = self.options;
        let (b1, b2) = betas;
        let s = self.state_for(i)?;
        s.step += 1;
        ops::scale(&mut s.exp_avg, b1)?;
        ops::axpy(1.0 - b1, g, &mut s.exp_avg)?;
        ops::scale(&mut s.exp_avg_sq, b2)?;
        ops::addcmul(&mut s.exp_avg_sq, 1.0 - b2, g, g)?;
        let t = i32::try_from(s.step).unwrap_or(i32::MAX);
        let bc1 = 1.0 - (b1 as f64).powi(t);
        let bc2 = 1.0 - (b2 as f64).powi(t);
        Ok(((lr as f64 / bc1) as f32, bc2.sqrt() as f32))
    }

    /// AdamW's `p ← p·(1 − lr·wd)`.
    fn decay_weights(&self, p: &Tensor<T>) -> Result<()> {
        let o = self.options;
        let mut data = share(p.data())?;
        ops::scale(&mut data, 1.0 - o.lr * o.weight_decay)?;
        p.data().bump_version();
        Ok(())
    }

    /// The gradient Adam uses for parameter `i`: AdamW decays the weights instead; Adam with
    /// weight decay makes `grad + wd·p` in a new block (`grad.add(param, alpha=weight_decay)`).
    fn effective_grad(&self, i: usize, g: &Tensor<T>) -> Result<Buffer<T>> {
        let o = self.options;
        let p = &self.params[i];
        if o.weight_decay == 0.0 {
            share(g.data())
        } else if self.decoupled {
            self.decay_weights(p)?;
            share(g.data())
        } else {
            decayed_grad(g.data(), p, o.weight_decay)
        }
    }

    /// `p ← p − step_size·m / denom` for parameter `i`.
    fn apply(&mut self, i: usize, denom: &Buffer<T>, step_size: f32) -> Result<()> {
        let p = self.params[i].clone();
        let s = self.state_for(i)?;
        let mut data = share(p.data())?;
        ops::addcdiv(&mut data, -step_size, &s.exp_avg, denom)?;
        p.data().bump_version();
        Ok(())
    }

    /// `√v / √(1 − β₂ᵗ)` in a new block: the square root, then the quotient in a second block
    /// (torch's `exp_avg_sq.sqrt() / bias_correction2_sqrt`), the root's block freed after.
    fn denominator(&mut self, i: usize, bc2_sqrt: f32) -> Result<Buffer<T>> {
        let root = ops::sqrt(&self.state_for(i)?.exp_avg_sq)?;
        let mut quotient = root.try_clone()?;
        ops::scale(&mut quotient, 1.0 / bc2_sqrt)?;
        Ok(quotient)
    }

    /// torch's `_init_group`: the state of every parameter with a gradient, made before any
    /// parameter is updated (so a failure here, such as an out-of-memory, leaves every
    /// parameter as it was).
    fn init_group(&mut self, with_grad: &[(usize, Tensor<T>)]) -> Result<()> {
        for (i, _) in with_grad {
            self.state_for(*i)?;
        }
        Ok(())
    }

    /// torch's `_single_tensor_adam`: one parameter at a time.
    fn step_for_loop(&mut self) -> Result<()> {
        let with_grad = with_grad(&self.params);
        self.init_group(&with_grad)?;
        for (i, g) in with_grad {
            let g = self.effective_grad(i, &g)?;
            let (step_size, bc2_sqrt) = self.update_moments(i, &g)?;
            drop(g);
            let mut denom = self.denominator(i, bc2_sqrt)?;
            ops::add_scalar(&mut denom, self.options.eps)?;
            self.apply(i, &denom, step_size)?;
        }
        Ok(())
    }

    /// torch's `_multi_tensor_adam`: each operation over every parameter with a gradient.
    fn step_for_each(&mut self) -> Result<()> {
        let with_grad = with_grad(&self.params);
        self.init_group(&with_grad)?;
        // The gradients as Adam uses them: with Adam's weight decay, a new list (`_foreach_add`).
        let mut grads = Vec::with_capacity(with_grad.len());
        for (i, g) in &with_grad {
            grads.push(self.effective_grad(*i, g)?);
        }
        let mut corrections = Vec::with_capacity(with_grad.len());
        for ((i, _), g) in with_grad.iter().zip(&grads) {
            corrections.push(self.update_moments(*i, g)?);
        }
        // torch: `del device_grads` before the denominators.
        drop(grads);
        // `exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs)`: one new block per parameter, all alive
        // until the last parameter is updated; then `_foreach_div_` and `_foreach_add_` in place.
        let mut denoms = Vec::with_capacity(with_grad.len());
        for (i, _) in &with_grad {
            denoms.push(ops::sqrt(&self.state_for(*i)?.exp_avg_sq)?);
        }
        for (d, (_, bc2_sqrt)) in denoms.iter_mut().zip(&corrections) {
            ops::scale(d, 1.0 / bc2_sqrt)?;
            ops::add_scalar(d, self.options.eps)?;
        }
        for (((i, _), d), (step_size, _)) in with_grad.iter().zip(&denoms).zip(&corrections) {
            self.apply(*i, d, *step_size)?;
        }
        Ok(())
    }
}

impl<T: Float> Optimizer<T> for Adam<T> {
    fn step(&mut self) -> Result<()> {
        if self.options.implementation.for_each(&self.params) {
            self.step_for_each()
        } else {
            self.step_for_loop()
        }
    }

    fn params(&self) -> &[Tensor<T>] {
        &self.params
    }

    fn state_bytes(&self) -> u64 {
        self.state
            .iter()
            .flatten()
            .map(|s| (s.exp_avg.block_bytes() + s.exp_avg_sq.block_bytes()) as u64)
            .sum()
    }
}
