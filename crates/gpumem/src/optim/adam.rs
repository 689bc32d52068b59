//! Adam and AdamW (`torch.optim.Adam`, `torch.optim.AdamW`): two state buffers per parameter,
//! made on the first step as torch makes them.

use super::{Implementation, Optimizer, check_hyper, decayed_grad, share, with_grad};
use crate::autograd::Tensor;
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::ops::{self, Float};

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

    /// torch's `_single_tensor_adam`: one parameter at a time. Its temporaries live as Python's
    /// variables do: `grad` (a new block with Adam's weight decay) until the next parameter's
    /// `grad = grads[i]`, and `denom` until the next parameter's `denom = ...` replaces it, so
    /// the previous parameter's denominator is still allocated while the next one is made.
    fn step_for_loop(&mut self) -> Result<()> {
        let with_grad = with_grad(&self.params);
        self.init_group(&with_grad)?;
        let mut denom: Option<Buffer<T>> = None;
        for (i, g) in with_grad {
            let g = self.effective_grad(i, &g)?;
            let (step_size, bc2_sqrt) = self.update_moments(i, &g)?;
            let mut next = self.denominator(i, bc2_sqrt)?;
            ops::add_scalar(&mut next, self.options.eps)?;
            let current = denom.insert(next);
            self.apply(i, current, step_size)?;
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
