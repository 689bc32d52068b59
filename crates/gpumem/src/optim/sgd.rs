//! SGD (`torch.optim.SGD`): momentum, Nesterov and weight decay, its momentum buffers made on the
//! first step.

use super::{
    Implementation, Optimizer, add_to_param, check_hyper, decayed_grad, invalid, share, with_grad,
};
use crate::autograd::Tensor;
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::ops::{self, Float};

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
