//! Modules with parameters that require grad: `Linear` and `Mlp` (`nn.Linear`, `nn.Sequential`).

use super::checkpoint::{Layer, run_layers};
use super::errors::invalid;
use super::functional::linear;
use super::graph::share;
use super::tensor::Tensor;
use crate::error::Result;
use crate::memory::device::Device;
use crate::ops::{self, Float, XorShift};
use std::rc::Rc;

/// A fully connected layer with parameters that require grad (`nn.Linear`).
pub struct Linear<T: Float = f32> {
    /// `[out_features, in_features]`.
    pub weight: Tensor<T>,
    /// `[out_features]`.
    pub bias: Tensor<T>,
}

impl<T: Float> Linear<T> {
    /// torch's default initialisation (uniform in `±1/√in_features`), drawn as
    /// [`crate::ops::Linear::new`] draws it, so both models start from the same weights.
    pub fn new(
        dev: &Device,
        in_features: usize,
        out_features: usize,
        rng: &mut XorShift,
    ) -> Result<Linear<T>> {
        let bound = 1.0 / (in_features.max(1) as f32).sqrt();
        let n = in_features.checked_mul(out_features).ok_or_else(|| {
            invalid(
                "Linear::new",
                dev,
                format!("{in_features} × {out_features} overflows"),
            )
        })?;
        let weight = rng.uniform_vec(n, -bound, bound);
        let bias = rng.uniform_vec(out_features, -bound, bound);
        Ok(Linear {
            weight: Tensor::from_f32(dev, &weight, &[out_features, in_features])?
                .requires_grad_(true)?,
            bias: Tensor::from_f32(dev, &bias, &[out_features])?.requires_grad_(true)?,
        })
    }

    /// `x·Wᵀ + b` through [`linear`].
    pub fn forward(&self, x: &Tensor<T>) -> Result<Tensor<T>> {
        linear(x, &self.weight, Some(&self.bias))
    }
}

/// The activation between an [`Mlp`]'s layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// [`Tensor::relu`]: saves its output, which the next layer saves anyway.
    Relu,
    /// [`Tensor::gelu`]: saves its input, a block nothing else keeps.
    Gelu,
}

/// `Linear → activation → … → Linear` with autograd (the activation after every layer but the
/// last).
pub struct Mlp<T: Float = f32> {
    /// The layers, input side first.
    pub layers: Vec<Linear<T>>,
    /// The activation between layers.
    pub activation: Activation,
}

impl<T: Float> Mlp<T> {
    /// Layers of widths `sizes = [in, hidden…, out]` (at least two entries).
    pub fn new(
        dev: &Device,
        sizes: &[usize],
        activation: Activation,
        rng: &mut XorShift,
    ) -> Result<Mlp<T>> {
        if sizes.len() < 2 {
            return Err(invalid(
                "Mlp::new",
                dev,
                format!("sizes needs at least [in, out], got {sizes:?}"),
            ));
        }
        let layers = sizes
            .windows(2)
            .map(|w| Linear::new(dev, w[0], w[1], rng))
            .collect::<Result<Vec<_>>>()?;
        Ok(Mlp { layers, activation })
    }

    /// The model as a list of [`Layer`]s, one per linear layer with its activation (the last
    /// without), for [`checkpoint_sequential`](crate::autograd::checkpoint_sequential).
    pub fn as_layers(&self) -> Vec<Layer<T>> {
        let count = self.layers.len();
        self.layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let (w, b) = (l.weight.clone(), l.bias.clone());
                let activation = (i + 1 < count).then_some(self.activation);
                Rc::new(move |x: &Tensor<T>| {
                    let z = linear(x, &w, Some(&b))?;
                    match activation {
                        None => Ok(z),
                        Some(Activation::Relu) => z.relu(),
                        Some(Activation::Gelu) => z.gelu(),
                    }
                }) as Layer<T>
            })
            .collect()
    }

    /// The output `[batch, out]` for `x` `[batch, in]`.
    pub fn forward(&self, x: &Tensor<T>) -> Result<Tensor<T>> {
        run_layers(&self.as_layers(), x)
    }

    /// Every parameter: weight then bias, layer by layer.
    pub fn parameters(&self) -> Vec<Tensor<T>> {
        self.layers
            .iter()
            .flat_map(|l| [l.weight.clone(), l.bias.clone()])
            .collect()
    }

    /// Drops every parameter's gradient (`optimizer.zero_grad()`, which sets them to None).
    pub fn zero_grad(&self) {
        self.parameters().iter().for_each(Tensor::clear_grad);
    }

    /// One SGD step in place on every parameter that has a gradient: `p ← p − lr·p.grad`.
    pub fn sgd_step(&self, lr: f32) -> Result<()> {
        for p in self.parameters() {
            if let Some(g) = p.grad() {
                let mut data = share(p.data());
                ops::axpy(-lr, g.data(), &mut data)?;
            }
        }
        Ok(())
    }
}
