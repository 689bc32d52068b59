//! The functions of `torch.nn.functional` that chapters use: `linear`, `mse_loss`, `log_softmax`,
//! `nll_loss` and `cross_entropy`, with what each saves.

use super::errors::{autograd_error, invalid};
use super::graph::{Saved, next_value, share};
use super::mode::count_forward;
use super::tensor::Tensor;
use crate::error::{Error, Result};
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;
use crate::ops::{self, DType, Float, MatMul};
use std::any::Any;

/// `x·Wᵀ + b` for `x` `[batch, in]`, `weight` `[out, in]` and `bias` `[out]` (`F.linear`, whose
/// node in torch is `AddmmBackward0`, or `MmBackward0` without a bias). Saves the input if the
/// weight requires grad and the weight if the input does: both are existing blocks, so saving
/// adds no memory until the caller drops its own handle on the input.
pub fn linear<T: Float>(
    x: &Tensor<T>,
    weight: &Tensor<T>,
    bias: Option<&Tensor<T>>,
) -> Result<Tensor<T>> {
    const OP: &str = "linear";
    let dev = x.device().clone();
    let (batch, inf) = x.matrix(OP, "the input")?;
    let (outf, inf2) = weight.matrix(OP, "the weight")?;
    if inf != inf2 {
        return Err(invalid(
            OP,
            &dev,
            format!("input [{batch}, {inf}] and weight [{outf}, {inf2}] differ in features"),
        ));
    }
    if weight.device() != &dev {
        return Err(Error::DeviceMismatch {
            op: OP,
            expected: dev.to_string(),
            actual: weight.device().to_string(),
        });
    }
    if let Some(b) = bias
        && b.shape() != [outf]
    {
        return Err(invalid(
            OP,
            &dev,
            format!("the bias must have shape [{outf}], got {:?}", b.shape()),
        ));
    }
    count_forward(OP);
    let mut y = ops::matmul(x.data(), weight.data(), MatMul::a_bt(batch, inf, outf))?;
    if let Some(b) = bias {
        ops::add_bias(&mut y, b.data(), batch, outf)?;
    }
    let needs_x = x.requires_grad();
    let needs_w = weight.requires_grad();
    let needs_b = bias.is_some_and(|b| b.requires_grad());
    let (xs, ws) = (share(x.data()), share(weight.data()));
    let mut inputs = vec![x, weight];
    inputs.extend(bias);
    let has_bias = bias.is_some();
    let out = Tensor::record(
        if has_bias {
            "AddmmBackward0"
        } else {
            "MmBackward0"
        },
        y,
        vec![batch, outf],
        &inputs,
        move |_, _| {
            let mut saved = Vec::new();
            if needs_w {
                saved.push(Saved::Value(xs));
            }
            if needs_x {
                saved.push(Saved::Value(ws));
            }
            saved
        },
        Box::new(move |saved, g| {
            let mut it = saved.iter();
            let saved_x = if needs_w {
                Some(next_value(&mut it)?)
            } else {
                None
            };
            let saved_w = if needs_x {
                Some(next_value(&mut it)?)
            } else {
                None
            };
            let mut grads = Vec::with_capacity(3);
            // dx = g·W [batch×in].
            grads.push(match saved_w {
                Some(w) => Some(ops::matmul(g, w, MatMul::new(batch, outf, inf))?),
                None => None,
            });
            // dW = gᵀ·x [out×in].
            grads.push(match saved_x {
                Some(xv) => Some(ops::matmul(g, xv, MatMul::at_b(outf, batch, inf))?),
                None => None,
            });
            if has_bias {
                grads.push(if needs_b {
                    Some(column_sums(g, batch, outf)?)
                } else {
                    None
                });
            }
            Ok(grads)
        }),
    )?;
    // torch's `F.linear` multiplies by `weight.t()`, a view with its own node.
    if let Some(node) = &out.inner.grad_fn {
        node.transposed_input.set(Some(1));
    }
    Ok(out)
}

/// Column sums of `g` `[rows×cols]` in `T` (a bias gradient), accumulated in f64.
pub(super) fn column_sums<T: Float>(g: &Buffer<T>, rows: usize, cols: usize) -> Result<Buffer<T>> {
    let mut sums = g.device().alloc::<f32>(cols)?;
    ops::col_sum_into(g, rows, cols, &mut sums, false)?;
    if T::DTYPE == DType::F32 {
        let boxed: Box<dyn Any> = Box::new(sums);
        return boxed
            .downcast::<Buffer<T>>()
            .map(|b| *b)
            .map_err(|_| autograd_error("internal: f32 is not f32"));
    }
    ops::cast::<f32, T>(&sums)
}

/// The mean squared error `mean((pred − target)²)` as a scalar (`F.mse_loss`); saves both.
pub fn mse_loss<T: Float>(pred: &Tensor<T>, target: &Tensor<T>) -> Result<Tensor<T>> {
    const OP: &str = "mse_loss";
    pred.same_shape(OP, target)?;
    count_forward(OP);
    let y = ops::mse_loss_to_device(pred.data(), target.data())?;
    let (p, t) = (share(pred.data()), share(target.data()));
    let needs_target = target.requires_grad();
    Tensor::record(
        "MseLossBackward0",
        y,
        Vec::new(),
        &[pred, target],
        move |_, _| vec![Saved::Value(p), Saved::Value(t)],
        Box::new(move |saved, g| {
            let mut dp = ops::mse_loss_backward(saved[0].value()?, saved[1].value()?, 1.0)?;
            ops::scale_by(&mut dp, g)?;
            let dt = if needs_target {
                let mut d = dp.try_clone()?;
                ops::scale(&mut d, -1.0)?;
                Some(d)
            } else {
                None
            };
            Ok(vec![Some(dp), dt])
        }),
    )
}

/// Row-wise log-softmax of a `[rows, classes]` matrix (`F.log_softmax(x, dim=1)`); saves its
/// result.
pub fn log_softmax<T: Float>(x: &Tensor<T>) -> Result<Tensor<T>> {
    const OP: &str = "log_softmax";
    let (rows, cols) = x.matrix(OP, "the input")?;
    count_forward(OP);
    let y = ops::log_softmax(x.data(), rows, cols)?;
    Tensor::record(
        "LogSoftmaxBackward0",
        y,
        vec![rows, cols],
        &[x],
        |_, result| vec![Saved::Value(share(result))],
        Box::new(move |saved, g| {
            Ok(vec![Some(ops::log_softmax_backward(
                g,
                saved[0].value()?,
                rows,
                cols,
            )?)])
        }),
    )
}

/// Class indices on the device for [`nll_loss`] and [`cross_entropy`] (torch's int64 targets):
/// checked against `classes` on the host, then one host-to-device copy.
pub fn class_targets(dev: &Device, targets: &[usize], classes: usize) -> Result<Buffer<i64>> {
    ops::check_targets(dev, targets, classes)?;
    let values: Vec<i64> = targets.iter().map(|&t| t as i64).collect();
    dev.from_slice(&values)
}

/// The mean negative log-likelihood of `logp` `[rows, classes]` at `targets` (`F.nll_loss`);
/// saves the log-probabilities, the targets and a one-element `total_weight` (the number of rows),
/// as torch's `nll_loss_forward` returns it. Make the targets with [`class_targets`].
pub fn nll_loss<T: Float>(logp: &Tensor<T>, targets: &Buffer<i64>) -> Result<Tensor<T>> {
    const OP: &str = "nll_loss";
    let (rows, cols) = logp.matrix(OP, "the log-probabilities")?;
    count_forward(OP);
    let y = ops::nll_loss(logp.data(), targets, rows, cols)?;
    let mut total_weight = logp.device().alloc::<T>(1)?;
    ops::fill(&mut total_weight, rows as f32)?;
    let (l, t) = (share(logp.data()), share(targets));
    Tensor::record(
        "NllLossBackward0",
        y,
        Vec::new(),
        &[logp],
        move |_, _| vec![Saved::Value(l), Saved::Index(t), Saved::Value(total_weight)],
        Box::new(move |saved, g| {
            Ok(vec![Some(ops::nll_loss_backward(
                g,
                saved[1].index()?,
                rows,
                cols,
            )?)])
        }),
    )
}

/// Cross-entropy of logits `[rows, classes]` against class targets (`F.cross_entropy`): torch
/// builds it as [`log_softmax`] then [`nll_loss`], and so does this, with the same two nodes.
pub fn cross_entropy<T: Float>(logits: &Tensor<T>, targets: &Buffer<i64>) -> Result<Tensor<T>> {
    nll_loss(&log_softmax(logits)?, targets)
}
