//! Element-wise ops and reductions: NVRTC kernels on cuda (`kernels.cu`), the same arithmetic in
//! plain loops on cpu. Values are computed in f32 and stored in the buffer's type; sums accumulate
//! in f64.

use super::cuda::{self, Arg};
use super::{Float, expect_len, host, host_mut, invalid, product, same_device, same_memory};
use crate::error::Result;
use crate::memory::activity::KernelSpan;
use crate::memory::buffer::{Buffer, Element};
use crate::memory::device::Device;
use crate::raw::backend::RawStream;

/// One kernel of an op, on either device: begun before the op's cuda-or-cpu branch, it is one span
/// of the device's activity, ending when [`Launch::cuda`] returns or, on cpu, when it is dropped.
/// The ops launch their NVRTC kernels through it alone (`cuda` takes it by value: one span, one
/// launch), so every kernel of the compute layer is recorded, and recorded once; GEMM records its
/// cuBLAS call itself. Off, it costs the one relaxed load of `ActivityLog::kernel`.
pub(super) struct Launch<'a> {
    dev: &'a Device,
    op: &'static str,
    _span: KernelSpan<'a>,
}

impl<'a> Launch<'a> {
    /// Begins `op`'s kernel on `dev`, which writes `bytes` bytes (for a reduction to one element,
    /// the bytes it reads).
    pub(super) fn begin(dev: &'a Device, op: &'static str, bytes: usize) -> Launch<'a> {
        Launch::named(dev, op, op, bytes)
    }

    /// As [`Launch::begin`] for a kernel recorded under its own `name` (a step of `op` that is
    /// not the whole op, such as `f64_div`); errors still name `op`.
    pub(super) fn named(
        dev: &'a Device,
        op: &'static str,
        name: &'static str,
        bytes: usize,
    ) -> Launch<'a> {
        Launch {
            dev,
            op,
            _span: dev.inner.activity.kernel(name, bytes),
        }
    }

    /// Launches `kernel` on the (cuda) device over `work` items.
    pub(super) fn cuda(self, kernel: &str, work: usize, args: &[Arg]) -> Result<()> {
        let (dev, op) = (self.dev, self.op);
        let backend = dev
            .cuda_backend()
            .ok_or_else(|| invalid(op, dev, "kernels run on cuda devices only".into()))?;
        cuda::kernels(backend)?.launch(op, kernel, work as u64, args)
    }
}

// The helpers below run an element-wise op on either device. On cpu they read and write through
// `host` and `host_mut`; that is sound because every buffer here is on the cpu device (a cuda
// device launched its kernel and returned above), the caller's `&`/`&mut` borrows keep other
// writers away for the call, and an output written while inputs are read is either a fresh block
// from `alloc`, which no other buffer shares, or an input's copy when they share memory.

/// `y[i] = f(x[i])` into a new buffer of `x`'s length: on cuda `kernel(x, y, n)`; on cpu `f` over
/// the values as f32, each result rounded to `D`.
pub(super) fn map<S: Float, D: Float>(
    op: &'static str,
    kernel: &str,
    x: &Buffer<S>,
    f: impl Fn(f32) -> f32,
) -> Result<Buffer<D>> {
    let dev = x.device().clone();
    let n = x.len();
    let mut y = dev.alloc::<D>(n)?;
    if n == 0 {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, op, y.size_bytes());
    if dev.is_cuda() {
        let args = [Arg::Ptr(x.ptr()), Arg::Ptr(y.ptr()), Arg::U64(n as u64)];
        launch.cuda(kernel, n, &args)?;
        return Ok(y);
    }
    // SAFETY: see above the helpers; y is a fresh block.
    let (xs, ys) = unsafe { (host(x), host_mut(&mut y)) };
    for (yv, xv) in ys.iter_mut().zip(xs) {
        *yv = D::from_f32(f(xv.to_f32()));
    }
    Ok(y)
}

/// The device and length of `a`, once `b` is checked to have both (`b_what` names `b` in the
/// error).
pub(super) fn check_pair<A: Element, B: Element>(
    op: &'static str,
    a: &Buffer<A>,
    b: &Buffer<B>,
    b_what: &str,
) -> Result<(Device, usize)> {
    let dev = a.device().clone();
    same_device(op, &dev, b)?;
    expect_len(op, b_what, b, a.len())?;
    Ok((dev, a.len()))
}

/// `y[i] = f(a[i], b[i])` into a new buffer of `a`'s length, once `b` is checked to have `a`'s
/// device and length (`b_what` names `b` in the error): on cuda `kernel(a, b, y, scalars.., n)`;
/// on cpu `f` over the values as f32, each result rounded to `T`.
pub(super) fn map2<T: Float>(
    op: &'static str,
    kernel: &str,
    a: &Buffer<T>,
    b: &Buffer<T>,
    b_what: &str,
    scalars: &[Arg],
    f: impl Fn(f32, f32) -> f32,
) -> Result<Buffer<T>> {
    let (dev, n) = check_pair(op, a, b, b_what)?;
    let mut y = dev.alloc::<T>(n)?;
    if n == 0 {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, op, y.size_bytes());
    if dev.is_cuda() {
        let buffers = [Arg::Ptr(a.ptr()), Arg::Ptr(b.ptr()), Arg::Ptr(y.ptr())];
        let args = [&buffers[..], scalars, &[Arg::U64(n as u64)]].concat();
        launch.cuda(kernel, n, &args)?;
        return Ok(y);
    }
    // SAFETY: see above the helpers; y is a fresh block.
    let (av, bv, ys) = unsafe { (host(a), host(b), host_mut(&mut y)) };
    for ((yv, p), q) in ys.iter_mut().zip(av).zip(bv) {
        *yv = T::from_f32(f(p.to_f32(), q.to_f32()));
    }
    Ok(y)
}

/// `x[i] = f(x[i])` in place: on cuda `kernel(x, args.., n)`; on cpu `f` over the values as f32,
/// each result rounded to `T`.
pub(super) fn update<T: Float>(
    op: &'static str,
    kernel: &str,
    x: &mut Buffer<T>,
    args: &[Arg],
    f: impl Fn(f32) -> f32,
) -> Result<()> {
    let dev = x.device().clone();
    let n = x.len();
    if n == 0 {
        return Ok(());
    }
    let launch = Launch::begin(&dev, op, x.size_bytes());
    if dev.is_cuda() {
        let args = [&[Arg::Ptr(x.ptr())][..], args, &[Arg::U64(n as u64)]].concat();
        return launch.cuda(kernel, n, &args);
    }
    // SAFETY: see above the helpers; x is the only buffer touched.
    for v in unsafe { host_mut(x) } {
        *v = T::from_f32(f(v.to_f32()));
    }
    Ok(())
}

/// `x[i] = f(x[i], b[i])` in place, once `b` is checked to have `x`'s device and length (`b_what`
/// names `b` in the error): on cuda `kernel(args)`; on cpu `f` over the values as f32, each result
/// rounded to `X`, with `b` copied first when it shares `x`'s memory.
pub(super) fn update_with<X: Float, B: Float>(
    op: &'static str,
    kernel: &str,
    x: &mut Buffer<X>,
    b: &Buffer<B>,
    b_what: &str,
    args: &[Arg],
    f: impl Fn(f32, f32) -> f32,
) -> Result<()> {
    let (dev, n) = check_pair(op, x, b, b_what)?;
    if n == 0 {
        return Ok(());
    }
    let launch = Launch::begin(&dev, op, x.size_bytes());
    if dev.is_cuda() {
        return launch.cuda(kernel, n, args);
    }
    // SAFETY (all): see above the helpers; b is copied before x is written when they share memory.
    let copy = if same_memory(x, b) {
        Some(unsafe { snapshot(b) })
    } else {
        None
    };
    let bs = match &copy {
        Some(v) => v.as_slice(),
        None => unsafe { host(b) },
    };
    let xs = unsafe { host_mut(x) };
    for (xv, bv) in xs.iter_mut().zip(bs) {
        *xv = X::from_f32(f(xv.to_f32(), bv.to_f32()));
    }
    Ok(())
}

/// A new one-element f64 buffer holding `Σx`, accumulated in f64 (kernel `sum_<dtype>` on cuda);
/// nothing is written to it when `x` is empty.
pub(super) fn f64_sum<T: Float>(op: &'static str, x: &Buffer<T>) -> Result<Buffer<f64>> {
    let dev = x.device().clone();
    let n = x.len();
    let mut total = dev.alloc::<f64>(1)?;
    if n == 0 {
        return Ok(total);
    }
    let launch = Launch::begin(&dev, op, x.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("sum_{}", T::DTYPE);
        let args = [Arg::Ptr(x.ptr()), Arg::U64(n as u64), Arg::Ptr(total.ptr())];
        launch.cuda(&kernel, n, &args)?;
    } else {
        // SAFETY: see above the helpers; total is a fresh block.
        let (xs, t) = unsafe { (host(x), host_mut(&mut total)) };
        t[0] = xs.iter().map(|v| v.to_f32() as f64).sum();
    }
    Ok(total)
}

/// A new one-element f64 buffer holding `Σ(pred − target)²`, accumulated in f64 (kernel
/// `sq_diff_sum_<dtype>` on cuda), once `target` is checked against `pred`; `None` when they are
/// empty.
pub(super) fn f64_sq_diff_sum<T: Float>(
    op: &'static str,
    pred: &Buffer<T>,
    target: &Buffer<T>,
) -> Result<Option<Buffer<f64>>> {
    let (dev, n) = check_pair(op, pred, target, "target (the length of pred)")?;
    if n == 0 {
        return Ok(None);
    }
    let mut total = dev.alloc::<f64>(1)?;
    let launch = Launch::begin(&dev, op, pred.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("sq_diff_sum_{}", T::DTYPE);
        let args = [
            Arg::Ptr(pred.ptr()),
            Arg::Ptr(target.ptr()),
            Arg::U64(n as u64),
            Arg::Ptr(total.ptr()),
        ];
        launch.cuda(&kernel, n, &args)?;
    } else {
        // SAFETY: see above the helpers; total is a fresh block.
        let (p, t, out) = unsafe { (host(pred), host(target), host_mut(&mut total)) };
        out[0] = p
            .iter()
            .zip(t)
            .map(|(a, b)| {
                let d = a.to_f32() as f64 - b.to_f32() as f64;
                d * d
            })
            .sum();
    }
    Ok(Some(total))
}

/// A copy of a cpu buffer's contents, for an op whose output shares memory with this input.
///
/// # Safety
/// `buf` is on the cpu device and nothing writes to it during the call.
unsafe fn snapshot<T: Float>(buf: &Buffer<T>) -> Vec<T> {
    // SAFETY: the caller's contract.
    unsafe { host(buf) }.to_vec()
}

/// Reads the single value of a one-element result buffer (one device-to-host copy, like `.item()`).
fn read_scalar<T: crate::memory::buffer::Element>(buf: &Buffer<T>) -> Result<T> {
    let mut out = [T::default()];
    buf.copy_to_slice(&mut out)?;
    Ok(out[0])
}

/// `x ← s·x` in place (`x.mul_(s)`).
pub fn scale<T: Float>(x: &mut Buffer<T>, s: f32) -> Result<()> {
    let kernel = format!("scale_{}", T::DTYPE);
    update("scale", &kernel, x, &[Arg::F32(s)], |v| v * s)
}

/// `y ← α·x + y` in place (`y.add_(x, alpha=α)`): a product then a sum, each rounded, never fused.
/// x and y may differ in type (f16 gradients into f32 accumulators).
pub fn axpy<X: Float, Y: Float>(alpha: f32, x: &Buffer<X>, y: &mut Buffer<Y>) -> Result<()> {
    let kernel = format!("axpy_{}_{}", X::DTYPE, Y::DTYPE);
    let args = [
        Arg::F32(alpha),
        Arg::Ptr(x.ptr()),
        Arg::Ptr(y.ptr()),
        Arg::U64(y.len() as u64),
    ];
    let what = "x (the length of y)";
    update_with("axpy", &kernel, y, x, what, &args, |yv, xv| alpha * xv + yv)
}

/// `max(x, 0)` into a new buffer (`torch.relu`); NaN stays NaN and -0 becomes 0.
pub fn relu<T: Float>(x: &Buffer<T>) -> Result<Buffer<T>> {
    map("relu", &format!("relu_{}", T::DTYPE), x, relu_f32)
}

/// ReLU of one value: NaN stays NaN and -0 becomes 0.
pub(super) fn relu_f32(v: f32) -> f32 {
    if v > 0.0 || v.is_nan() { v } else { 0.0 }
}

/// ReLU's backward from its output (what torch saves): `grad` where `output > 0`, else 0.
pub fn relu_backward<T: Float>(grad_output: &Buffer<T>, output: &Buffer<T>) -> Result<Buffer<T>> {
    const OP: &str = "relu_backward";
    let kernel = format!("relu_backward_{}", T::DTYPE);
    let what = "output (the length of grad_output)";
    let dx = |g: f32, o: f32| if o <= 0.0 { 0.0 } else { g };
    map2(OP, &kernel, grad_output, output, what, &[], dx)
}

/// `x` converted to another type in a new buffer (`x.to(dtype)`), rounding to nearest even.
pub fn cast<S: Float, D: Float>(x: &Buffer<S>) -> Result<Buffer<D>> {
    map("cast", &format!("cast_{}_{}", S::DTYPE, D::DTYPE), x, |v| v)
}

/// The sum of all elements, accumulated in f64 and rounded to f32 once (`x.sum().item()`).
pub fn sum<T: Float>(x: &Buffer<T>) -> Result<f32> {
    if x.is_empty() {
        return Ok(0.0);
    }
    Ok(read_scalar(&f64_sum("sum", x)?)? as f32)
}

/// `x[r, c] ← x[r, c] + bias[c]` in place for a `[rows×cols]` matrix (a layer's bias, one per
/// output column); the bias may be of another type (f32 master bias on f16 activations).
pub fn add_bias<T: Float, B: Float>(
    x: &mut Buffer<T>,
    bias: &Buffer<B>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    const OP: &str = "add_bias";
    let dev = x.device().clone();
    same_device(OP, &dev, bias)?;
    let n = product(OP, &dev, rows, cols)?;
    expect_len(OP, &format!("x [{rows}×{cols}]"), x, n)?;
    expect_len(OP, &format!("bias [{cols}]"), bias, cols)?;
    if n == 0 {
        return Ok(());
    }
    let launch = Launch::begin(&dev, OP, x.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("add_bias_{}_{}", T::DTYPE, B::DTYPE);
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(bias.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        return launch.cuda(&kernel, n, &args);
    }
    // SAFETY (all): cpu buffers; when they share memory the bias is copied before x is written.
    let copy = if same_memory(x, bias) {
        Some(unsafe { snapshot(bias) })
    } else {
        None
    };
    let b = match &copy {
        Some(v) => v.as_slice(),
        None => unsafe { host(bias) },
    };
    let xs = unsafe { host_mut(x) };
    for row in xs.chunks_exact_mut(cols) {
        for (xv, bv) in row.iter_mut().zip(b) {
            *xv = T::from_f32(xv.to_f32() + bv.to_f32());
        }
    }
    Ok(())
}

/// Column sums of a `[rows×cols]` matrix into `out` (f32, `cols` long), accumulated in f64: added
/// to what `out` holds when `accumulate` (a bias gradient's `+=`), else overwriting it.
pub fn col_sum_into<T: Float>(
    x: &Buffer<T>,
    rows: usize,
    cols: usize,
    out: &mut Buffer<f32>,
    accumulate: bool,
) -> Result<()> {
    const OP: &str = "col_sum_into";
    let dev = out.device().clone();
    same_device(OP, &dev, x)?;
    expect_len(
        OP,
        &format!("x [{rows}×{cols}]"),
        x,
        product(OP, &dev, rows, cols)?,
    )?;
    expect_len(OP, &format!("out [{cols}]"), out, cols)?;
    if same_memory(x, out) {
        return Err(invalid(
            OP,
            &dev,
            "the output shares memory with the input".into(),
        ));
    }
    if cols == 0 {
        return Ok(());
    }
    let launch = Launch::begin(&dev, OP, out.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("col_sum_{}", T::DTYPE);
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
            Arg::Ptr(out.ptr()),
            Arg::U32(accumulate as u32),
        ];
        return launch.cuda(&kernel, cols, &args);
    }
    // SAFETY: cpu buffers in different blocks.
    let (xs, o) = unsafe { (host(x), host_mut(out)) };
    for (c, ov) in o.iter_mut().enumerate() {
        let mut s = 0f64;
        for r in 0..rows {
            s += xs[r * cols + c].to_f32() as f64;
        }
        *ov = if accumulate {
            (*ov as f64 + s) as f32
        } else {
            s as f32
        };
    }
    Ok(())
}

/// Multiplies by `inv_scale` in place and says whether any element was inf or NaN before it
/// (torch's `_amp_foreach_non_finite_check_and_unscale_`, which a `GradScaler` calls).
pub fn unscale_and_check<T: Float>(x: &mut Buffer<T>, inv_scale: f32) -> Result<bool> {
    const OP: &str = "unscale_and_check";
    let dev = x.device().clone();
    let n = x.len();
    if n == 0 {
        return Ok(false);
    }
    let mut found = dev.alloc::<u32>(1)?;
    let launch = Launch::begin(&dev, OP, x.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("unscale_check_{}", T::DTYPE);
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::F32(inv_scale),
            Arg::U64(n as u64),
            Arg::Ptr(found.ptr()),
        ];
        launch.cuda(&kernel, n, &args)?;
    } else {
        // SAFETY: cpu buffers; found is a fresh block.
        let (xs, f) = unsafe { (host_mut(x), host_mut(&mut found)) };
        for v in xs {
            let value = v.to_f32();
            if !value.is_finite() {
                f[0] = 1;
            }
            if inv_scale != 1.0 {
                *v = T::from_f32(value * inv_scale);
            }
        }
        drop(launch);
    }
    Ok(read_scalar(&found)? != 0)
}

/// Mean squared error `mean((pred − target)²)`, accumulated in f64 (`F.mse_loss(pred, target)`).
pub fn mse_loss<T: Float>(pred: &Buffer<T>, target: &Buffer<T>) -> Result<f32> {
    match f64_sq_diff_sum("mse_loss", pred, target)? {
        None => Ok(f32::NAN), // torch: the mean of nothing
        Some(total) => Ok((read_scalar(&total)? / pred.len() as f64) as f32),
    }
}

/// The gradient of [`mse_loss`] times `grad_scale`: `c·(pred − target)` with `c = 2·grad_scale/n`,
/// in a new buffer. `grad_scale` is 1/k for k accumulation steps, or a loss scale for f16.
pub fn mse_loss_backward<T: Float>(
    pred: &Buffer<T>,
    target: &Buffer<T>,
    grad_scale: f32,
) -> Result<Buffer<T>> {
    const OP: &str = "mse_loss_backward";
    let kernel = format!("mse_grad_{}", T::DTYPE);
    let what = "target (the length of pred)";
    let c = (2.0 * grad_scale as f64 / pred.len() as f64) as f32;
    let g = |a: f32, b: f32| c * (a - b);
    map2(OP, &kernel, pred, target, what, &[Arg::F32(c)], g)
}

/// Sets every element to zero in place (`x.zero_()`, as `optimizer.zero_grad()` does for gradients).
pub fn zero<T: Float>(x: &mut Buffer<T>) -> Result<()> {
    let bytes = x.size_bytes();
    if bytes == 0 {
        return Ok(());
    }
    let dev = x.device().clone();
    // SAFETY: the buffer's block is ours and holds at least `bytes` bytes; the default stream
    // orders the fill after earlier work on the buffer.
    unsafe { dev.fill_zero(x.ptr(), bytes, RawStream(0), 0) }
}
