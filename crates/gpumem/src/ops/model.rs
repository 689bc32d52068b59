//! A tiny trainable model: linear layers with ReLU between them, a hand-written backward pass and
//! SGD. Activations and gradients are device buffers, so the allocator's stats show what training
//! costs: weights, gradients and the activations a forward pass keeps for backward.
//!
//! Layouts follow torch: a layer's weight is `[out_features × in_features]`, a batch of inputs is
//! `[batch × in_features]`. Forward passes run in the activations' type `T` (f32, f16 or bf16) with
//! f32 master weights: for f16/bf16 the weight is cast for the pass and the cast copy is kept for
//! backward (as autocast does), while weight and bias gradients are always accumulated in f32.

use super::{
    DType, Float, MatMul, XorShift, axpy, cast, col_sum_into, expect_len, gemm_into, invalid,
    matmul, product, relu, relu_backward, same_device, scale, unscale_and_check, zero,
};
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;
use std::any::Any;

/// A fully connected layer `y = x·Wᵀ + b` (torch's `nn.Linear`), with f32 master parameters.
pub struct Linear {
    /// The weight, `[out_features × in_features]`, row-major.
    pub weight: Buffer<f32>,
    /// The bias, `[out_features]`.
    pub bias: Buffer<f32>,
    /// Inputs per example.
    pub in_features: usize,
    /// Outputs per example.
    pub out_features: usize,
}

/// What a layer's forward pass keeps for its backward pass.
pub struct LinearSaved<T: Float> {
    /// The layer's input: the same memory as the caller's buffer (no copy), as torch saves it.
    pub input: Buffer<T>,
    /// The weight cast to `T` for the pass; `None` when `T` is f32 (the master weight serves).
    pub weight: Option<Buffer<T>>,
    /// Rows in the batch.
    pub batch: usize,
}

/// A layer's parameter gradients, always f32; backward adds into them (torch's `.grad`).
pub struct LinearGrads {
    /// Gradient of the weight, `[out_features × in_features]`.
    pub weight: Buffer<f32>,
    /// Gradient of the bias, `[out_features]`.
    pub bias: Buffer<f32>,
}

impl Linear {
    /// A layer with torch's default initialisation: weight and bias uniform in `±1/√in_features`.
    pub fn new(
        dev: &Device,
        in_features: usize,
        out_features: usize,
        rng: &mut XorShift,
    ) -> Result<Linear> {
        let bound = 1.0 / (in_features.max(1) as f32).sqrt();
        let n = product("Linear::new", dev, in_features, out_features)?;
        let weight = rng.uniform_vec(n, -bound, bound);
        let bias = rng.uniform_vec(out_features, -bound, bound);
        Linear::from_host(dev, &weight, &bias, in_features, out_features)
    }

    /// A layer with the given weight (`[out × in]`, row-major) and bias, copied to `dev`.
    pub fn from_host(
        dev: &Device,
        weight: &[f32],
        bias: &[f32],
        in_features: usize,
        out_features: usize,
    ) -> Result<Linear> {
        const OP: &str = "Linear::from_host";
        let n = product(OP, dev, in_features, out_features)?;
        if weight.len() != n || bias.len() != out_features {
            return Err(invalid(
                OP,
                dev,
                format!(
                    "a {in_features}→{out_features} layer needs {n} weights and {out_features} biases, got {} and {}",
                    weight.len(),
                    bias.len()
                ),
            ));
        }
        Ok(Linear {
            weight: dev.from_slice(weight)?,
            bias: dev.from_slice(bias)?,
            in_features,
            out_features,
        })
    }

    /// The device the parameters live on.
    pub fn device(&self) -> &Device {
        self.weight.device()
    }

    /// Number of parameters (weights and biases).
    pub fn num_parameters(&self) -> usize {
        self.weight.len() + self.bias.len()
    }

    /// `y[batch × out] = x[batch × in]·Wᵀ + b` in `T`, and what backward needs (the input, and the
    /// cast weight when `T` is not f32).
    pub fn forward<T: Float>(
        &self,
        x: &Buffer<T>,
        batch: usize,
    ) -> Result<(Buffer<T>, LinearSaved<T>)> {
        const OP: &str = "Linear::forward";
        let dev = self.device().clone();
        same_device(OP, &dev, x)?;
        let n = product(OP, &dev, batch, self.in_features)?;
        expect_len(OP, &format!("x [{batch}×{}]", self.in_features), x, n)?;
        let cast_weight = if T::DTYPE == DType::F32 {
            None
        } else {
            Some(cast::<f32, T>(&self.weight)?)
        };
        let saved = LinearSaved {
            input: x.to(&dev)?,
            weight: cast_weight,
            batch,
        };
        let w = self.weight_for(&saved)?;
        let mut y = matmul(
            x,
            w,
            MatMul::a_bt(batch, self.in_features, self.out_features),
        )?;
        super::add_bias(&mut y, &self.bias, batch, self.out_features)?;
        Ok((y, saved))
    }

    /// The weight in `T` for a pass: the saved cast copy, or the f32 master weight itself.
    fn weight_for<'a, T: Float>(&'a self, saved: &'a LinearSaved<T>) -> Result<&'a Buffer<T>> {
        match &saved.weight {
            Some(w) => Ok(w),
            None => (&self.weight as &dyn Any)
                .downcast_ref::<Buffer<T>>()
                .ok_or_else(|| {
                    invalid(
                        "Linear::backward",
                        self.device(),
                        format!("a {} pass saved no {} weight", T::DTYPE, T::DTYPE),
                    )
                }),
        }
    }

    /// Adds this batch's weight and bias gradients into `grads` (`dW += gᵀ·x`, `db += Σ rows of g`)
    /// and returns the input gradient `g·W`, `[batch × in]`.
    pub fn backward<T: Float>(
        &self,
        saved: &LinearSaved<T>,
        grad_output: &Buffer<T>,
        grads: &mut LinearGrads,
    ) -> Result<Buffer<T>> {
        self.backward_params(saved, grad_output, grads)?;
        let w = self.weight_for(saved)?;
        matmul(
            grad_output,
            w,
            MatMul::new(saved.batch, self.out_features, self.in_features),
        )
    }

    /// As [`backward`](Self::backward) without the input gradient (the first layer needs none).
    pub fn backward_params<T: Float>(
        &self,
        saved: &LinearSaved<T>,
        grad_output: &Buffer<T>,
        grads: &mut LinearGrads,
    ) -> Result<()> {
        const OP: &str = "Linear::backward";
        let dev = self.device();
        same_device(OP, dev, grad_output)?;
        let batch = saved.batch;
        let n = product(OP, dev, batch, self.out_features)?;
        expect_len(
            OP,
            &format!("grad_output [{batch}×{}]", self.out_features),
            grad_output,
            n,
        )?;
        expect_len(OP, "grads.weight", &grads.weight, self.weight.len())?;
        gemm_into(
            1.0,
            grad_output,
            &saved.input,
            MatMul::at_b(self.out_features, batch, self.in_features),
            1.0,
            &mut grads.weight,
        )?;
        col_sum_into(grad_output, batch, self.out_features, &mut grads.bias, true)
    }

    /// One SGD step: `W ← W − lr·dW`, `b ← b − lr·db`.
    pub fn sgd_step(&mut self, grads: &LinearGrads, lr: f32) -> Result<()> {
        axpy(-lr, &grads.weight, &mut self.weight)?;
        axpy(-lr, &grads.bias, &mut self.bias)
    }
}

impl LinearGrads {
    /// Zeroed gradients for `layer` (allocated once, then reused step after step).
    pub fn zeros(layer: &Linear) -> Result<LinearGrads> {
        let dev = layer.device();
        Ok(LinearGrads {
            weight: dev.alloc(layer.weight.len())?,
            bias: dev.alloc(layer.bias.len())?,
        })
    }

    /// Sets both gradients to zero (`optimizer.zero_grad(set_to_none=False)`).
    pub fn zero(&mut self) -> Result<()> {
        zero(&mut self.weight)?;
        zero(&mut self.bias)
    }

    /// `self ← self + alpha·other` (adding one micro-batch's gradients into an accumulator).
    pub fn accumulate(&mut self, other: &LinearGrads, alpha: f32) -> Result<()> {
        axpy(alpha, &other.weight, &mut self.weight)?;
        axpy(alpha, &other.bias, &mut self.bias)
    }

    /// Multiplies both gradients by `s`.
    pub fn scale(&mut self, s: f32) -> Result<()> {
        scale(&mut self.weight, s)?;
        scale(&mut self.bias, s)
    }

    /// Unscales both gradients by `inv_scale`; whether either held inf or NaN.
    pub fn unscale_and_check(&mut self, inv_scale: f32) -> Result<bool> {
        let w = unscale_and_check(&mut self.weight, inv_scale)?;
        let b = unscale_and_check(&mut self.bias, inv_scale)?;
        Ok(w || b)
    }

    /// Bytes of the allocator blocks behind both gradients.
    pub fn block_bytes(&self) -> usize {
        self.weight.block_bytes() + self.bias.block_bytes()
    }
}

/// A multi-layer perceptron: `Linear → ReLU → … → Linear` (ReLU after every layer but the last).
pub struct Mlp {
    /// The layers, input side first.
    pub layers: Vec<Linear>,
}

/// What a forward pass of an [`Mlp`] keeps for backward: per layer its saved input (and cast
/// weight), and every ReLU's output (the same memory as the next layer's saved input).
pub struct MlpSaved<T: Float> {
    /// One entry per layer.
    pub layers: Vec<LinearSaved<T>>,
    /// One entry per ReLU (one fewer than layers).
    pub relu_outputs: Vec<Buffer<T>>,
}

/// Parameter gradients of an [`Mlp`], one entry per layer.
pub struct MlpGrads {
    /// One entry per layer.
    pub layers: Vec<LinearGrads>,
}

impl Mlp {
    /// Layers of the given widths: `sizes = [in, hidden…, out]` (at least two entries).
    pub fn new(dev: &Device, sizes: &[usize], rng: &mut XorShift) -> Result<Mlp> {
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
        Ok(Mlp { layers })
    }

    /// The device the model lives on.
    pub fn device(&self) -> &Device {
        self.layers[0].device()
    }

    /// Inputs per example.
    pub fn in_features(&self) -> usize {
        self.layers.first().map_or(0, |l| l.in_features)
    }

    /// Outputs per example.
    pub fn out_features(&self) -> usize {
        self.layers.last().map_or(0, |l| l.out_features)
    }

    /// Number of parameters of all layers.
    pub fn num_parameters(&self) -> usize {
        self.layers.iter().map(Linear::num_parameters).sum()
    }

    /// The output `[batch × out]` for inputs `x` `[batch × in]`, and the activations backward needs.
    /// Each layer's pre-activation is freed once its ReLU has run (ReLU's backward needs only its
    /// output), as in torch.
    pub fn forward<T: Float>(
        &self,
        x: &Buffer<T>,
        batch: usize,
    ) -> Result<(Buffer<T>, MlpSaved<T>)> {
        let mut saved = MlpSaved {
            layers: Vec::with_capacity(self.layers.len()),
            relu_outputs: Vec::with_capacity(self.layers.len().saturating_sub(1)),
        };
        let mut hidden: Option<Buffer<T>> = None;
        for (i, layer) in self.layers.iter().enumerate() {
            let input = hidden.as_ref().unwrap_or(x);
            let (z, s) = layer.forward(input, batch)?;
            saved.layers.push(s);
            if i + 1 == self.layers.len() {
                return Ok((z, saved));
            }
            let a = relu(&z)?;
            drop(z);
            saved.relu_outputs.push(a.to(a.device())?);
            hidden = Some(a);
        }
        Err(invalid(
            "Mlp::forward",
            x.device(),
            "the model has no layers".into(),
        ))
    }

    /// Backward from the loss gradient `grad_output` `[batch × out]`: adds every layer's parameter
    /// gradients into `grads` and frees the saved activations as it goes (it takes them).
    pub fn backward<T: Float>(
        &self,
        saved: MlpSaved<T>,
        grad_output: &Buffer<T>,
        grads: &mut MlpGrads,
    ) -> Result<()> {
        const OP: &str = "Mlp::backward";
        let dev = grad_output.device();
        let count = self.layers.len();
        if grads.layers.len() != count || saved.layers.len() != count {
            return Err(invalid(
                OP,
                dev,
                format!(
                    "a {count}-layer model got gradients for {} and saved activations for {} layers",
                    grads.layers.len(),
                    saved.layers.len()
                ),
            ));
        }
        let MlpSaved {
            layers: mut saved_layers,
            mut relu_outputs,
        } = saved;
        let mut grad: Option<Buffer<T>> = None;
        for i in (0..count).rev() {
            let layer = &self.layers[i];
            let layer_saved = saved_layers
                .pop()
                .ok_or_else(|| invalid(OP, dev, "missing saved activations".into()))?;
            let g = grad.as_ref().unwrap_or(grad_output);
            if i == 0 {
                layer.backward_params(&layer_saved, g, &mut grads.layers[0])?;
                break;
            }
            let dx = layer.backward(&layer_saved, g, &mut grads.layers[i])?;
            drop(layer_saved);
            let relu_out = relu_outputs
                .pop()
                .ok_or_else(|| invalid(OP, dev, "missing a saved ReLU output".into()))?;
            let dz = relu_backward(&dx, &relu_out)?;
            drop((dx, relu_out));
            grad = Some(dz);
        }
        Ok(())
    }

    /// Zeroed gradients for every layer (allocate once, zero between steps).
    pub fn zero_grads(&self) -> Result<MlpGrads> {
        Ok(MlpGrads {
            layers: self
                .layers
                .iter()
                .map(LinearGrads::zeros)
                .collect::<Result<_>>()?,
        })
    }

    /// One SGD step on every layer.
    pub fn sgd_step(&mut self, grads: &MlpGrads, lr: f32) -> Result<()> {
        for (layer, g) in self.layers.iter_mut().zip(&grads.layers) {
            layer.sgd_step(g, lr)?;
        }
        Ok(())
    }

    /// Every parameter copied to the host as one vector: weights then bias, layer by layer (two
    /// device-to-host copies per layer).
    pub fn parameters_to_vec(&self) -> Result<Vec<f32>> {
        concat_to_host(self.layers.iter().flat_map(|l| [&l.weight, &l.bias]))
    }
}

/// The buffers' contents one after the other, on the host.
fn concat_to_host<'a>(buffers: impl Iterator<Item = &'a Buffer<f32>>) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for buffer in buffers {
        out.extend(buffer.to_vec()?);
    }
    Ok(out)
}

impl MlpGrads {
    /// Sets every gradient to zero.
    pub fn zero(&mut self) -> Result<()> {
        self.layers.iter_mut().try_for_each(LinearGrads::zero)
    }

    /// `self ← self + alpha·other`, layer by layer.
    pub fn accumulate(&mut self, other: &MlpGrads, alpha: f32) -> Result<()> {
        for (mine, theirs) in self.layers.iter_mut().zip(&other.layers) {
            mine.accumulate(theirs, alpha)?;
        }
        Ok(())
    }

    /// Multiplies every gradient by `s`.
    pub fn scale(&mut self, s: f32) -> Result<()> {
        self.layers.iter_mut().try_for_each(|g| g.scale(s))
    }

    /// Unscales every gradient by `inv_scale`; whether any held inf or NaN.
    pub fn unscale_and_check(&mut self, inv_scale: f32) -> Result<bool> {
        let mut found = false;
        for g in &mut self.layers {
            found |= g.unscale_and_check(inv_scale)?;
        }
        Ok(found)
    }

    /// Bytes of the allocator blocks behind every gradient.
    pub fn block_bytes(&self) -> usize {
        self.layers.iter().map(LinearGrads::block_bytes).sum()
    }

    /// Every gradient copied to the host as one vector, in the order of
    /// [`Mlp::parameters_to_vec`] (two device-to-host copies per layer).
    pub fn to_vec(&self) -> Result<Vec<f32>> {
        concat_to_host(self.layers.iter().flat_map(|g| [&g.weight, &g.bias]))
    }
}
