//! Chapter 8: what autograd keeps.
//!
//! Reference solution.

pub use ch08_predict::{ForwardMemory, PREDICT_SIZES};
use gpumem::autograd::{self, Mlp, Tensor, mse_loss};
use gpumem::ops::XorShift;
use gpumem::{Device, Result};

// ANCHOR: batch
/// A batch on the device: inputs `[rows, in]` and targets `[rows, out]`, neither requiring grad.
pub struct Batch {
    /// The inputs.
    pub x: Tensor,
    /// The targets.
    pub t: Tensor,
}

impl Batch {
    /// `rows` random examples for a model of `in_features` inputs and `out_features` outputs.
    pub fn random(
        dev: &Device,
        rng: &mut XorShift,
        rows: usize,
        in_features: usize,
        out_features: usize,
    ) -> Result<Batch> {
        Ok(Batch {
            x: Tensor::uniform(dev, &[rows, in_features], -1.0, 1.0, rng)?,
            t: Tensor::uniform(dev, &[rows, out_features], -1.0, 1.0, rng)?,
        })
    }

    /// The batch's loss, with a graph when grad mode is on and the model requires grad.
    pub fn loss(&self, model: &Mlp) -> Result<Tensor> {
        mse_loss(&model.forward(&self.x)?, &self.t)
    }
}
// ANCHOR_END: batch

// ANCHOR: evaluate
/// The mean loss of `model` over `batches`, computed without a graph: nothing is saved, so the
/// peak is one batch's forward pass and no more.
pub fn evaluate(model: &Mlp, batches: &[Batch]) -> Result<f32> {
    let _no_grad = autograd::no_grad();
    let mut total = 0.0;
    for batch in batches {
        total += batch.loss(model)?.item()?;
    }
    Ok(total / batches.len().max(1) as f32)
}
// ANCHOR_END: evaluate

// ANCHOR: loss_log
/// A running record of losses (what a training loop prints), which must not keep any graph.
#[derive(Debug, Default)]
pub struct LossLog {
    total: f32,
    count: usize,
}

impl LossLog {
    /// Records one step's loss.
    pub fn record(&mut self, loss: &Tensor) -> Result<()> {
        // A number on the host: the graph, and what it saved, stay with the tensor.
        self.total += loss.item()?;
        self.count += 1;
        Ok(())
    }

    /// The mean of the recorded losses (0 when there are none).
    pub fn mean(&self) -> f32 {
        if self.count == 0 {
            0.0
        } else {
            self.total / self.count as f32
        }
    }
}
// ANCHOR_END: loss_log

// ANCHOR: backward_twice
/// One forward pass of `x`, two losses on its output (against `t1` and against `t2`), and a
/// backward pass for each, so that the gradients are those of the sum. Returns the output, whose
/// graph must have freed what it saved.
pub fn backward_twice(model: &Mlp, x: &Tensor, t1: &Tensor, t2: &Tensor) -> Result<Tensor> {
    let out = model.forward(x)?;
    let first = mse_loss(&out, t1)?;
    let second = mse_loss(&out, t2)?;
    // The two losses share the model's part of the graph: the first backward must keep it.
    first.backward_with(true)?;
    second.backward()?;
    Ok(out)
}
// ANCHOR_END: backward_twice

// ANCHOR: source_example
/// The source's example on the device: an `[n, n]` tensor that requires grad, then `y = x * 2`
/// (under `no_grad()` when `use_no_grad`). Returns the bytes allocated by computing `y`, while
/// `y` is held.
pub fn kept_by_times_two(dev: &Device, n: usize, use_no_grad: bool) -> Result<u64> {
    let mut rng = XorShift::new(1);
    let x = Tensor::<f32>::uniform(dev, &[n, n], -1.0, 1.0, &mut rng)?.requires_grad_(true)?;
    let before = dev.memory_allocated();
    let y = if use_no_grad {
        let _no_grad = autograd::no_grad();
        x.mul_scalar(2.0)?
    } else {
        x.mul_scalar(2.0)?
    };
    let kept = dev.memory_allocated() - before;
    drop(y);
    Ok(kept)
}

/// As [`kept_by_times_two`] with an op after it that saves its input: `y = gelu(x * 2)`.
pub fn kept_by_times_two_then_gelu(dev: &Device, n: usize, use_no_grad: bool) -> Result<u64> {
    let mut rng = XorShift::new(1);
    let x = Tensor::<f32>::uniform(dev, &[n, n], -1.0, 1.0, &mut rng)?.requires_grad_(true)?;
    let before = dev.memory_allocated();
    let y = if use_no_grad {
        let _no_grad = autograd::no_grad();
        x.mul_scalar(2.0)?.gelu()?
    } else {
        x.mul_scalar(2.0)?.gelu()?
    };
    let kept = dev.memory_allocated() - before;
    drop(y);
    Ok(kept)
}
// ANCHOR_END: source_example
