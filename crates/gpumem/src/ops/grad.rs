//! The kernels behind [`crate::autograd`]'s ops that the rest of the compute layer lacks: fill, an
//! element-wise product, GELU, log-softmax, the negative log-likelihood, and reductions whose result
//! stays on the device as a one-element buffer (torch's 0-dim tensors). NVRTC kernels on cuda
//! (`kernels.cu`), the same arithmetic in plain loops on cpu; sums accumulate in f64.

use super::cuda::Arg;
use super::elementwise::{Launch, f64_sq_diff_sum, f64_sum, map, map2, update};
use super::{Float, expect_len, host, host_mut, invalid, product, same_device, same_memory};
use crate::error::Result;
use crate::memory::buffer::Buffer;

/// GELU's `√(2/π)` (tanh approximation).
const GELU_K: f32 = 0.797_884_6;
/// GELU's cubic coefficient (tanh approximation).
const GELU_C: f32 = 0.044715;

/// Sets every element to `value` in place (`x.fill_(value)`).
pub fn fill<T: Float>(x: &mut Buffer<T>, value: f32) -> Result<()> {
    let kernel = format!("fill_{}", T::DTYPE);
    update("fill", &kernel, x, &[Arg::F32(value)], |_| value)
}

/// The element-wise product `a * b` in a new buffer (`torch.mul`).
pub fn mul<T: Float>(a: &Buffer<T>, b: &Buffer<T>) -> Result<Buffer<T>> {
    const OP: &str = "mul";
    let kernel = format!("mul_{}", T::DTYPE);
    map2(OP, &kernel, a, b, "b (the length of a)", &[], |p, q| p * q)
}

/// `x ← x · s[0]` in place, where `s` is a one-element buffer on the same device (an upstream
/// gradient of a scalar loss, which stays on the device: no copy to the host).
pub fn scale_by<T: Float>(x: &mut Buffer<T>, s: &Buffer<T>) -> Result<()> {
    const OP: &str = "scale_by";
    let dev = x.device().clone();
    same_device(OP, &dev, s)?;
    expect_len(OP, "s (a scalar)", s, 1)?;
    if same_memory(x, s) {
        return Err(invalid(OP, &dev, "x shares memory with the scalar".into()));
    }
    let n = x.len();
    if n == 0 {
        return Ok(());
    }
    let launch = Launch::begin(&dev, OP, x.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("scale_by_{}", T::DTYPE);
        let args = [Arg::Ptr(x.ptr()), Arg::Ptr(s.ptr()), Arg::U64(n as u64)];
        return launch.cuda(&kernel, n, &args);
    }
    // SAFETY: cpu buffers in different blocks.
    let f = unsafe { host(s) }[0].to_f32();
    for v in unsafe { host_mut(x) } {
        *v = T::from_f32(v.to_f32() * f);
    }
    Ok(())
}

/// A one-element buffer holding `total[0] / divisor`, rounded once to `T`: the second kernel of
/// `op`, recorded as `f64_div`.
fn f64_div<T: Float>(op: &'static str, total: &Buffer<f64>, divisor: usize) -> Result<Buffer<T>> {
    let dev = total.device().clone();
    let mut y = dev.alloc::<T>(1)?;
    let launch = Launch::named(&dev, op, "f64_div", y.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("f64_div_{}", T::DTYPE);
        let args = [
            Arg::Ptr(total.ptr()),
            Arg::U64(divisor as u64),
            Arg::Ptr(y.ptr()),
        ];
        launch.cuda(&kernel, 1, &args)?;
        return Ok(y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (t, out) = unsafe { (host(total), host_mut(&mut y)) };
    out[0] = T::from_f32((t[0] / divisor as f64) as f32);
    Ok(y)
}

/// `Σx / divisor` as a one-element buffer on the device (`x.sum()` with divisor 1, `x.mean()` with
/// divisor `x.len()`). The f64 accumulator is a temporary 8-byte block, freed before returning.
pub fn sum_to_device<T: Float>(x: &Buffer<T>, divisor: usize) -> Result<Buffer<T>> {
    const OP: &str = "sum_to_device";
    f64_div(OP, &f64_sum(OP, x)?, divisor.max(1))
}

/// `mean((pred − target)²)` as a one-element buffer on the device (`F.mse_loss`, mean reduction).
pub fn mse_loss_to_device<T: Float>(pred: &Buffer<T>, target: &Buffer<T>) -> Result<Buffer<T>> {
    const OP: &str = "mse_loss";
    match f64_sq_diff_sum(OP, pred, target)? {
        None => Err(invalid(OP, pred.device(), "the mean of no elements".into())),
        Some(total) => f64_div(OP, &total, pred.len()),
    }
}

/// GELU with the tanh approximation (`F.gelu(x, approximate="tanh")`) in a new buffer.
pub fn gelu<T: Float>(x: &Buffer<T>) -> Result<Buffer<T>> {
    map("gelu", &format!("gelu_{}", T::DTYPE), x, |v| {
        let t = (GELU_K * (v + GELU_C * (v * (v * v)))).tanh();
        (0.5 * v) * (1.0 + t)
    })
}

/// GELU's backward from its input (what torch saves for it): `grad · gelu'(input)`.
pub fn gelu_backward<T: Float>(grad_output: &Buffer<T>, input: &Buffer<T>) -> Result<Buffer<T>> {
    const OP: &str = "gelu_backward";
    let kernel = format!("gelu_backward_{}", T::DTYPE);
    let what = "input (the length of grad_output)";
    let dx = |g: f32, v: f32| {
        let v2 = v * v;
        let t = (GELU_K * (v + GELU_C * (v * v2))).tanh();
        let d_inner = GELU_K * (1.0 + (3.0 * GELU_C) * v2);
        let left = 0.5 * (1.0 + t);
        let right = (0.5 * v) * ((1.0 - t * t) * d_inner);
        g * (left + right)
    };
    map2(OP, &kernel, grad_output, input, what, &[], dx)
}

/// Row-wise `log_softmax` of a `[rows×cols]` matrix in a new buffer (`F.log_softmax(x, dim=1)`).
pub fn log_softmax<T: Float>(x: &Buffer<T>, rows: usize, cols: usize) -> Result<Buffer<T>> {
    const OP: &str = "log_softmax";
    let dev = x.device().clone();
    let n = product(OP, &dev, rows, cols)?;
    expect_len(OP, &format!("x [{rows}×{cols}]"), x, n)?;
    let mut y = dev.alloc::<T>(n)?;
    if n == 0 {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, OP, y.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("log_softmax_{}", T::DTYPE);
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(y.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        launch.cuda(&kernel, rows, &args)?;
        return Ok(y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (xs, ys) = unsafe { (host(x), host_mut(&mut y)) };
    for (xr, yr) in xs.chunks_exact(cols).zip(ys.chunks_exact_mut(cols)) {
        let m = xr
            .iter()
            .map(|v| v.to_f32())
            .fold(f32::NEG_INFINITY, f32::max);
        let s: f64 = xr.iter().map(|v| ((v.to_f32() - m) as f64).exp()).sum();
        let lse = m + s.ln() as f32;
        for (o, v) in yr.iter_mut().zip(xr) {
            *o = T::from_f32(v.to_f32() - lse);
        }
    }
    Ok(y)
}

/// `log_softmax`'s backward from its output (what torch saves): `g − exp(y)·Σ_row g`.
pub fn log_softmax_backward<T: Float>(
    grad_output: &Buffer<T>,
    output: &Buffer<T>,
    rows: usize,
    cols: usize,
) -> Result<Buffer<T>> {
    const OP: &str = "log_softmax_backward";
    let dev = grad_output.device().clone();
    same_device(OP, &dev, output)?;
    let n = product(OP, &dev, rows, cols)?;
    expect_len(OP, &format!("grad_output [{rows}×{cols}]"), grad_output, n)?;
    expect_len(OP, &format!("output [{rows}×{cols}]"), output, n)?;
    let mut dx = dev.alloc::<T>(n)?;
    if n == 0 {
        return Ok(dx);
    }
    let launch = Launch::begin(&dev, OP, dx.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("log_softmax_backward_{}", T::DTYPE);
        let args = [
            Arg::Ptr(grad_output.ptr()),
            Arg::Ptr(output.ptr()),
            Arg::Ptr(dx.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        launch.cuda(&kernel, rows, &args)?;
        return Ok(dx);
    }
    // SAFETY: cpu buffers; dx is a fresh block.
    let (g, y, d) = unsafe { (host(grad_output), host(output), host_mut(&mut dx)) };
    for ((gr, yr), dr) in g
        .chunks_exact(cols)
        .zip(y.chunks_exact(cols))
        .zip(d.chunks_exact_mut(cols))
    {
        let s = gr.iter().map(|v| v.to_f32() as f64).sum::<f64>() as f32;
        for ((o, gv), yv) in dr.iter_mut().zip(gr).zip(yr) {
            let e = (yv.to_f32() as f64).exp() as f32;
            *o = T::from_f32(gv.to_f32() - e * s);
        }
    }
    Ok(dx)
}

/// Fails unless every target names a class in `0..cols` (checked on the host, before any upload).
pub fn check_targets(
    dev: &crate::memory::device::Device,
    targets: &[usize],
    cols: usize,
) -> Result<()> {
    match targets.iter().position(|&t| t >= cols) {
        None => Ok(()),
        Some(row) => Err(invalid(
            "nll_loss",
            dev,
            format!(
                "target {} of row {row} is out of bounds: there are {cols} classes (0..{cols})",
                targets[row]
            ),
        )),
    }
}

/// As [`check_targets`] for targets already on a cpu device.
fn check_target_buffer(
    dev: &crate::memory::device::Device,
    targets: &[i64],
    cols: usize,
) -> Result<()> {
    match targets
        .iter()
        .position(|&t| t < 0 || t as u64 >= cols as u64)
    {
        None => Ok(()),
        Some(row) => Err(invalid(
            "nll_loss",
            dev,
            format!(
                "target {} of row {row} is out of bounds: there are {cols} classes (0..{cols})",
                targets[row]
            ),
        )),
    }
}

/// The mean negative log-likelihood `−Σ_r logp[r, target[r]] / rows` as a one-element buffer
/// (`F.nll_loss`, mean reduction, no class weights). `targets` holds one class index per row.
pub fn nll_loss<T: Float>(
    logp: &Buffer<T>,
    targets: &Buffer<i64>,
    rows: usize,
    cols: usize,
) -> Result<Buffer<T>> {
    const OP: &str = "nll_loss";
    let dev = logp.device().clone();
    same_device(OP, &dev, targets)?;
    expect_len(
        OP,
        &format!("logp [{rows}×{cols}]"),
        logp,
        product(OP, &dev, rows, cols)?,
    )?;
    expect_len(OP, &format!("targets [{rows}]"), targets, rows)?;
    if rows == 0 {
        return Err(invalid(OP, &dev, "the mean over no rows".into()));
    }
    let mut total = dev.alloc::<f64>(1)?;
    let launch = Launch::begin(&dev, OP, logp.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("nll_sum_{}", T::DTYPE);
        let args = [
            Arg::Ptr(logp.ptr()),
            Arg::Ptr(targets.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
            Arg::Ptr(total.ptr()),
        ];
        launch.cuda(&kernel, rows, &args)?;
    } else {
        // SAFETY: cpu buffers; total is a fresh block.
        let (l, t, out) = unsafe { (host(logp), host(targets), host_mut(&mut total)) };
        check_target_buffer(&dev, t, cols)?;
        out[0] = -t
            .iter()
            .enumerate()
            .map(|(r, &c)| l[r * cols + c as usize].to_f32() as f64)
            .sum::<f64>();
        drop(launch);
    }
    f64_div(OP, &total, rows)
}

/// `nll_loss`'s backward: a `[rows×cols]` buffer of zeros but `−grad[0]/rows` at each row's target.
pub fn nll_loss_backward<T: Float>(
    grad_output: &Buffer<T>,
    targets: &Buffer<i64>,
    rows: usize,
    cols: usize,
) -> Result<Buffer<T>> {
    const OP: &str = "nll_loss_backward";
    let dev = grad_output.device().clone();
    same_device(OP, &dev, targets)?;
    expect_len(OP, "grad_output (a scalar)", grad_output, 1)?;
    expect_len(OP, &format!("targets [{rows}]"), targets, rows)?;
    let mut dx = dev.alloc::<T>(product(OP, &dev, rows, cols)?)?;
    if rows == 0 {
        return Ok(dx);
    }
    let launch = Launch::begin(&dev, OP, dx.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("nll_backward_{}", T::DTYPE);
        let args = [
            Arg::Ptr(grad_output.ptr()),
            Arg::Ptr(targets.ptr()),
            Arg::Ptr(dx.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        launch.cuda(&kernel, rows, &args)?;
        return Ok(dx);
    }
    // SAFETY: cpu buffers; dx is a fresh block.
    let (g, t, d) = unsafe { (host(grad_output), host(targets), host_mut(&mut dx)) };
    check_target_buffer(&dev, t, cols)?;
    let v = T::from_f32(-g[0].to_f32() / rows as f32);
    for (r, &c) in t.iter().enumerate() {
        d[r * cols + c as usize] = v;
    }
    Ok(dx)
}
