//! The kernels behind [`crate::optim`] and the in-place ops of [`crate::autograd::Tensor`]
//! (`add_`, `mul_`, `relu_`, ...): a square root into a new buffer, and in-place updates that
//! follow torch's `add_`, `addcmul_`, `addcdiv_`, `mul_` and `relu_`. NVRTC kernels on cuda
//! (`kernels.cu`), the same arithmetic in plain loops on cpu. An input may be the output itself
//! (`x.mul_(x)`): each element is read before it is written.

use super::cuda::Arg;
use super::elementwise::launch;
use super::{Float, expect_len, host, host_mut, same_device};
use crate::buffer::Buffer;
use crate::error::Result;

/// The values of a cpu buffer as f32, copied (so the output may be the same buffer).
///
/// # Safety
/// `buf` is on the cpu device and nothing writes to it during the call.
unsafe fn read<T: Float>(buf: &Buffer<T>) -> Vec<f32> {
    // SAFETY: the caller's contract.
    unsafe { host(buf) }.iter().map(|v| v.to_f32()).collect()
}

/// `√x` element-wise into a new buffer (`torch.sqrt`).
pub fn sqrt<T: Float>(x: &Buffer<T>) -> Result<Buffer<T>> {
    const OP: &str = "sqrt";
    let dev = x.device().clone();
    let n = x.len();
    let mut y = dev.alloc::<T>(n)?;
    if n == 0 {
        return Ok(y);
    }
    if dev.is_cuda() {
        let kernel = format!("sqrt_{}", T::DTYPE);
        let args = [Arg::Ptr(x.ptr()), Arg::Ptr(y.ptr()), Arg::U64(n as u64)];
        launch(&dev, OP, &kernel, n, &args)?;
        return Ok(y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (xs, ys) = unsafe { (host(x), host_mut(&mut y)) };
    for (yv, xv) in ys.iter_mut().zip(xs) {
        *yv = T::from_f32(xv.to_f32().sqrt());
    }
    Ok(y)
}

/// `x ← x + s` in place for a number `s` (`x.add_(s)`).
pub fn add_scalar<T: Float>(x: &mut Buffer<T>, s: f32) -> Result<()> {
    const OP: &str = "add_scalar";
    let dev = x.device().clone();
    let n = x.len();
    if n == 0 {
        return Ok(());
    }
    if dev.is_cuda() {
        let kernel = format!("add_scalar_{}", T::DTYPE);
        let args = [Arg::Ptr(x.ptr()), Arg::F32(s), Arg::U64(n as u64)];
        return launch(&dev, OP, &kernel, n, &args);
    }
    // SAFETY: a cpu buffer we hold exclusively for the call.
    for v in unsafe { host_mut(x) } {
        *v = T::from_f32(v.to_f32() + s);
    }
    Ok(())
}

/// `x ← x + value·a·b` in place (`x.addcmul_(a, b, value=value)`), each product rounded.
pub fn addcmul<T: Float>(
    x: &mut Buffer<T>,
    value: f32,
    a: &Buffer<T>,
    b: &Buffer<T>,
) -> Result<()> {
    ternary("addcmul", x, value, a, b, |x, v, a, b| x + v * a * b)
}

/// `x ← x + value·a/b` in place (`x.addcdiv_(a, b, value=value)`).
pub fn addcdiv<T: Float>(
    x: &mut Buffer<T>,
    value: f32,
    a: &Buffer<T>,
    b: &Buffer<T>,
) -> Result<()> {
    ternary("addcdiv", x, value, a, b, |x, v, a, b| x + v * (a / b))
}

fn ternary<T: Float>(
    op: &'static str,
    x: &mut Buffer<T>,
    value: f32,
    a: &Buffer<T>,
    b: &Buffer<T>,
    f: impl Fn(f32, f32, f32, f32) -> f32,
) -> Result<()> {
    let dev = x.device().clone();
    same_device(op, &dev, a)?;
    same_device(op, &dev, b)?;
    expect_len(op, "a (the length of x)", a, x.len())?;
    expect_len(op, "b (the length of x)", b, x.len())?;
    let n = x.len();
    if n == 0 {
        return Ok(());
    }
    if dev.is_cuda() {
        let kernel = format!("{op}_{}", T::DTYPE);
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::F32(value),
            Arg::Ptr(a.ptr()),
            Arg::Ptr(b.ptr()),
            Arg::U64(n as u64),
        ];
        return launch(&dev, op, &kernel, n, &args);
    }
    // SAFETY: cpu buffers; a and b are copied before x is written.
    let (av, bv) = unsafe { (read(a), read(b)) };
    let xs = unsafe { host_mut(x) };
    for ((xv, p), q) in xs.iter_mut().zip(av).zip(bv) {
        *xv = T::from_f32(f(xv.to_f32(), value, p, q));
    }
    Ok(())
}

/// `x ← x · other` element-wise in place (`x.mul_(other)`).
pub fn mul_in_place<T: Float>(x: &mut Buffer<T>, other: &Buffer<T>) -> Result<()> {
    const OP: &str = "mul_in_place";
    let dev = x.device().clone();
    same_device(OP, &dev, other)?;
    expect_len(OP, "other (the length of x)", other, x.len())?;
    let n = x.len();
    if n == 0 {
        return Ok(());
    }
    if dev.is_cuda() {
        // The product kernel with the output in place of the first operand.
        let kernel = format!("mul_{}", T::DTYPE);
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(other.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::U64(n as u64),
        ];
        return launch(&dev, OP, &kernel, n, &args);
    }
    // SAFETY: cpu buffers; other is copied before x is written.
    let ov = unsafe { read(other) };
    for (xv, o) in unsafe { host_mut(x) }.iter_mut().zip(ov) {
        *xv = T::from_f32(xv.to_f32() * o);
    }
    Ok(())
}

/// `x ← max(x, 0)` in place (`x.relu_()`); NaN stays NaN and -0 becomes 0.
pub fn relu_in_place<T: Float>(x: &mut Buffer<T>) -> Result<()> {
    const OP: &str = "relu_in_place";
    let dev = x.device().clone();
    let n = x.len();
    if n == 0 {
        return Ok(());
    }
    if dev.is_cuda() {
        // The relu kernel with its output in place of its input.
        let kernel = format!("relu_{}", T::DTYPE);
        let args = [Arg::Ptr(x.ptr()), Arg::Ptr(x.ptr()), Arg::U64(n as u64)];
        return launch(&dev, OP, &kernel, n, &args);
    }
    // SAFETY: a cpu buffer we hold exclusively for the call.
    for v in unsafe { host_mut(x) } {
        let f = v.to_f32();
        *v = T::from_f32(if f > 0.0 || f.is_nan() { f } else { 0.0 });
    }
    Ok(())
}
