//! The kernels behind [`crate::optim`] and the in-place ops of [`crate::autograd::Tensor`]
//! (`add_`, `mul_`, `relu_`, ...): a square root into a new buffer, and in-place updates that
//! follow torch's `add_`, `addcmul_`, `addcdiv_`, `mul_` and `relu_`. NVRTC kernels on cuda
//! (`kernels.cu`), the same arithmetic in plain loops on cpu. An input may be the output itself
//! (`x.mul_(x)`): each element is read before it is written.

use super::cuda::Arg;
use super::elementwise::{Launch, map, relu_f32, update, update_with};
use super::{Float, expect_len, host, host_mut, same_device};
use crate::error::Result;
use crate::memory::buffer::Buffer;

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
    map("sqrt", &format!("sqrt_{}", T::DTYPE), x, f32::sqrt)
}

/// `x ← x + s` in place for a number `s` (`x.add_(s)`).
pub fn add_scalar<T: Float>(x: &mut Buffer<T>, s: f32) -> Result<()> {
    let kernel = format!("add_scalar_{}", T::DTYPE);
    update("add_scalar", &kernel, x, &[Arg::F32(s)], |v| v + s)
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
    let launch = Launch::begin(&dev, op, x.size_bytes());
    if dev.is_cuda() {
        let kernel = format!("{op}_{}", T::DTYPE);
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::F32(value),
            Arg::Ptr(a.ptr()),
            Arg::Ptr(b.ptr()),
            Arg::U64(n as u64),
        ];
        return launch.cuda(&kernel, n, &args);
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
    // The product kernel with the output in place of the first operand.
    let kernel = format!("mul_{}", T::DTYPE);
    let args = [
        Arg::Ptr(x.ptr()),
        Arg::Ptr(other.ptr()),
        Arg::Ptr(x.ptr()),
        Arg::U64(x.len() as u64),
    ];
    let what = "other (the length of x)";
    update_with("mul_in_place", &kernel, x, other, what, &args, |a, b| a * b)
}

/// `x ← max(x, 0)` in place (`x.relu_()`); NaN stays NaN and -0 becomes 0.
pub fn relu_in_place<T: Float>(x: &mut Buffer<T>) -> Result<()> {
    // The relu kernel with its output in place of its input.
    let kernel = format!("relu_{}", T::DTYPE);
    let output = [Arg::Ptr(x.ptr())];
    update("relu_in_place", &kernel, x, &output, relu_f32)
}
