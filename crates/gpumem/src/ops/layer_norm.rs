//! LayerNorm with f32 statistics: each row's mean and `1/√(var + eps)`, the normalised output, and
//! the backward, as torch's CUDA `native_layer_norm` and `native_layer_norm_backward`.

use super::cuda::Arg;
use super::elementwise::Launch;
use super::{Float, check_len, count, host, host_mut, invalid};
use crate::error::Result;
use crate::memory::buffer::Buffer;

/// Each row's mean and `1/√(var + eps)` of a `[rows, cols]` buffer, in f32 (what torch's CUDA
/// `native_layer_norm` returns beside its output).
pub fn layer_norm_stats<T: Float>(
    x: &Buffer<T>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<(Buffer<f32>, Buffer<f32>)> {
    const OP: &str = "layer_norm_stats";
    let dev = x.device().clone();
    check_len(
        OP,
        "x ([rows, cols])",
        &dev,
        x,
        count(OP, &dev, &[rows, cols])?,
    )?;
    if cols == 0 {
        return Err(invalid(OP, &dev, "rows of no elements have no mean".into()));
    }
    let mut mean = dev.alloc::<f32>(rows)?;
    let mut rstd = dev.alloc::<f32>(rows)?;
    if rows == 0 {
        return Ok((mean, rstd));
    }
    let launch = Launch::begin(&dev, OP, mean.size_bytes() * 2);
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(mean.ptr()),
            Arg::Ptr(rstd.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
            Arg::F32(eps),
        ];
        launch.cuda(&format!("ln_stats_{}", T::DTYPE), rows, &args)?;
        return Ok((mean, rstd));
    }
    // SAFETY: cpu buffers; mean and rstd are fresh blocks.
    let (xv, mv, rv) = unsafe { (host(x), host_mut(&mut mean), host_mut(&mut rstd)) };
    for ((xr, m), r) in xv.chunks(cols).zip(mv.iter_mut()).zip(rv.iter_mut()) {
        let mu = xr.iter().map(|v| v.to_f32() as f64).sum::<f64>() / cols as f64;
        let var = xr
            .iter()
            .map(|v| (v.to_f32() as f64 - mu).powi(2))
            .sum::<f64>()
            / cols as f64;
        *m = mu as f32;
        *r = (1.0 / (var + eps as f64).sqrt()) as f32;
    }
    Ok((mean, rstd))
}

/// LayerNorm's output `(x − mean)·rstd·w + b` from its statistics.
pub fn layer_norm_apply<T: Float>(
    x: &Buffer<T>,
    mean: &Buffer<f32>,
    rstd: &Buffer<f32>,
    weight: &Buffer<T>,
    bias: &Buffer<T>,
    rows: usize,
    cols: usize,
) -> Result<Buffer<T>> {
    const OP: &str = "layer_norm_apply";
    let dev = x.device().clone();
    check_len(
        OP,
        "x ([rows, cols])",
        &dev,
        x,
        count(OP, &dev, &[rows, cols])?,
    )?;
    check_len(OP, "mean ([rows])", &dev, mean, rows)?;
    check_len(OP, "rstd ([rows])", &dev, rstd, rows)?;
    check_len(OP, "weight ([cols])", &dev, weight, cols)?;
    check_len(OP, "bias ([cols])", &dev, bias, cols)?;
    let mut y = dev.alloc::<T>(x.len())?;
    if x.is_empty() {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, OP, y.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(mean.ptr()),
            Arg::Ptr(rstd.ptr()),
            Arg::Ptr(weight.ptr()),
            Arg::Ptr(bias.ptr()),
            Arg::Ptr(y.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        return launch
            .cuda(&format!("ln_apply_{}", T::DTYPE), x.len(), &args)
            .map(|()| y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (xv, mv, rv, wv, bv, yv) = unsafe {
        (
            host(x),
            host(mean),
            host(rstd),
            host(weight),
            host(bias),
            host_mut(&mut y),
        )
    };
    for (idx, o) in yv.iter_mut().enumerate() {
        let (r, c) = (idx / cols, idx % cols);
        let xhat = (xv[idx].to_f32() - mv[r]) * rv[r];
        *o = T::from_f32(xhat * wv[c].to_f32() + bv[c].to_f32());
    }
    Ok(y)
}

/// LayerNorm's backward: `(dx, dweight, dbias)` from the upstream gradient, the input and the
/// statistics (torch's `native_layer_norm_backward`).
#[allow(clippy::too_many_arguments)] // torch's native_layer_norm_backward takes as many
pub fn layer_norm_backward<T: Float>(
    grad_output: &Buffer<T>,
    x: &Buffer<T>,
    mean: &Buffer<f32>,
    rstd: &Buffer<f32>,
    weight: &Buffer<T>,
    rows: usize,
    cols: usize,
) -> Result<(Buffer<T>, Buffer<T>, Buffer<T>)> {
    const OP: &str = "layer_norm_backward";
    let dev = x.device().clone();
    let n = count(OP, &dev, &[rows, cols])?;
    check_len(OP, "x ([rows, cols])", &dev, x, n)?;
    check_len(OP, "grad_output ([rows, cols])", &dev, grad_output, n)?;
    check_len(OP, "mean ([rows])", &dev, mean, rows)?;
    check_len(OP, "rstd ([rows])", &dev, rstd, rows)?;
    check_len(OP, "weight ([cols])", &dev, weight, cols)?;
    let mut dx = dev.alloc::<T>(n)?;
    let mut dw = dev.alloc::<T>(cols)?;
    let mut db = dev.alloc::<T>(cols)?;
    if n == 0 {
        return Ok((dx, dw, db));
    }
    if dev.is_cuda() {
        let launch = Launch::begin(&dev, OP, dx.size_bytes());
        let args = [
            Arg::Ptr(grad_output.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::Ptr(mean.ptr()),
            Arg::Ptr(rstd.ptr()),
            Arg::Ptr(weight.ptr()),
            Arg::Ptr(dx.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        launch.cuda(&format!("ln_backward_{}", T::DTYPE), rows, &args)?;
        let launch = Launch::named(&dev, OP, "ln_param_grads", dw.size_bytes() * 2);
        let args = [
            Arg::Ptr(grad_output.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::Ptr(mean.ptr()),
            Arg::Ptr(rstd.ptr()),
            Arg::Ptr(dw.ptr()),
            Arg::Ptr(db.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        launch.cuda(&format!("ln_param_grads_{}", T::DTYPE), cols, &args)?;
        return Ok((dx, dw, db));
    }
    let _launch = Launch::begin(&dev, OP, dx.size_bytes());
    // SAFETY: cpu buffers; dx, dw and db are fresh blocks.
    let (gv, xv, mv, rv, wv) = unsafe {
        (
            host(grad_output),
            host(x),
            host(mean),
            host(rstd),
            host(weight),
        )
    };
    let (dxv, dwv, dbv) = unsafe { (host_mut(&mut dx), host_mut(&mut dw), host_mut(&mut db)) };
    let xhat = |i: usize, r: usize| (xv[i].to_f32() - mv[r]) * rv[r];
    for (r, dxr) in dxv.chunks_mut(cols).enumerate() {
        let (mut s1, mut s2) = (0.0f64, 0.0f64);
        for (c, w) in wv.iter().enumerate() {
            let i = r * cols + c;
            let gw = gv[i].to_f32() * w.to_f32();
            s1 += gw as f64;
            s2 += gw as f64 * xhat(i, r) as f64;
        }
        let (m1, m2) = ((s1 / cols as f64) as f32, (s2 / cols as f64) as f32);
        for ((c, w), d) in wv.iter().enumerate().zip(dxr.iter_mut()) {
            let i = r * cols + c;
            let gw = gv[i].to_f32() * w.to_f32();
            *d = T::from_f32(rv[r] * ((gw - m1) - xhat(i, r) * m2));
        }
    }
    for (c, (dwc, dbc)) in dwv.iter_mut().zip(dbv.iter_mut()).enumerate() {
        let (mut sw, mut sb) = (0.0f64, 0.0f64);
        for r in 0..rows {
            let i = r * cols + c;
            sw += gv[i].to_f32() as f64 * xhat(i, r) as f64;
            sb += gv[i].to_f32() as f64;
        }
        *dwc = T::from_f32(sw as f32);
        *dbc = T::from_f32(sb as f32);
    }
    Ok((dx, dw, db))
}
