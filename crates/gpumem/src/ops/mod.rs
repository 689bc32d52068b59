//! The compute layer: GEMM and element-wise kernels on both devices, every buffer from the caching
//! allocator.
//!
//! - [`matmul`], [`matmul_f32`], [`gemm_into`]: row-major matrix products; cuBLAS on cuda (`sgemm`
//!   for f32, `cublasGemmEx` with f32 accumulation for f16/bf16), a blocked loop on cpu.
//! - Element-wise ops ([`scale`], [`axpy`], [`relu`], [`relu_backward`], [`cast`], [`sum`],
//!   [`add_bias`], [`unscale_and_check`], ...): NVRTC kernels on cuda, compiled once per device at
//!   first use; plain loops on cpu. Both round every result the same way (no fused multiply-add;
//!   sums accumulate in f64), so a cpu run predicts a cuda run.
//! - The kernels of [`crate::autograd`]'s ops ([`mul`], [`gelu`], [`log_softmax`], [`nll_loss`],
//!   reductions to a one-element device buffer, ...): the same two paths.
//! - Optimizer and in-place kernels ([`sqrt`], [`addcmul`], [`addcdiv`], [`add_scalar`],
//!   [`mul_in_place`], [`relu_in_place`]) for [`crate::optim`] and `Tensor::add_` and friends.
//! - A transformer layer's kernels (`attention`): [`bmm`], [`softmax`], [`causal_mask`],
//!   [`dropout_mask`] (1 byte per element), LayerNorm with f32 statistics, head copies, and a
//!   memory-efficient attention ([`sdpa_forward`]) that stores no `s × s` matrix.
//! - A tiny model: [`Linear`] layers, [`Mlp`], [`mse_loss`], hand-written backward, SGD.
//!
//! Conventions, the same on both devices:
//! - Matrices are row-major; a `[rows × cols]` matrix is a buffer of `rows * cols` elements.
//! - Every output buffer comes from `Device::alloc`, so `memory_allocated` counts exactly the
//!   activations and gradients an op creates; results read back to the host (a [`sum`], a loss,
//!   the inf/NaN flag) pass through a one-element device buffer and one device-to-host copy, like
//!   torch's `.item()`. Not counted: cuBLAS's own workspace on cuda and the cpu GEMM's scratch
//!   space (ordinary heap memory), neither of which is a buffer of the program.
//! - All work runs on the device's default stream, where `alloc`, `from_slice` and `to_vec` run, so
//!   ops are ordered with them. Buffers written on another stream must be synchronised first.
//! - Every kernel launch and cuBLAS call is checked; a failure is an [`Error::Driver`] naming the
//!   op. Kernels run asynchronously, so a fault inside one surfaces at the next synchronising call;
//!   `GPUMEM_LAUNCH_BLOCKING=1` synchronises after every launch (as `CUDA_LAUNCH_BLOCKING=1` does).
//! - Bad arguments (lengths that do not match the shape, buffers of different devices) are errors,
//!   never panics.

mod attention;
pub(crate) mod cuda;
mod dropout;
mod elementwise;
mod gemm;
mod grad;
pub(crate) mod kernel_cache;
pub(crate) mod kernel_source;
mod layer_norm;
mod model;
mod optim;
mod random;

pub use attention::{
    HeadLayout, SdpaShape, bmm, causal_mask, heads_to_rows, rows_to_heads, sdpa_backward,
    sdpa_forward, softmax, softmax_backward,
};
pub use dropout::{dropout_apply, dropout_keeps, dropout_mask};
pub use elementwise::{
    add_bias, axpy, cast, col_sum_into, mse_loss, mse_loss_backward, relu, relu_backward, scale,
    sum, unscale_and_check, zero,
};
pub use gemm::{MatMul, gemm_into, matmul, matmul_f32};
pub use grad::{
    check_targets, fill, gelu, gelu_backward, log_softmax, log_softmax_backward,
    mse_loss_to_device, mul, nll_loss, nll_loss_backward, scale_by, sum_to_device,
};
pub use layer_norm::{layer_norm_apply, layer_norm_backward, layer_norm_stats};
pub use model::{Linear, LinearGrads, LinearSaved, Mlp, MlpGrads, MlpSaved};
pub use optim::{add_scalar, addcdiv, addcmul, mul_in_place, relu_in_place, sqrt};
pub use random::XorShift;

use crate::error::{Error, Result};
use crate::memory::buffer::{Buffer, Element};
use crate::memory::device::Device;
use crate::raw::backend::RawStream;
use half::{bf16, f16};

/// The element types the compute layer works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE single precision: 24-bit significand, range to 3.4e38.
    F32,
    /// IEEE half precision: 11-bit significand, range to 65504.
    F16,
    /// bfloat16: 8-bit significand, the range of f32.
    BF16,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// The short name: `f32`, `f16`, `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// torch's name: `torch.float32`, `torch.float16`, `torch.bfloat16`.
    pub fn torch_name(self) -> &'static str {
        match self {
            DType::F32 => "torch.float32",
            DType::F16 => "torch.float16",
            DType::BF16 => "torch.bfloat16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The unit roundoff: the largest relative error of rounding a real number to this type
    /// (2^-24, 2^-11, 2^-8), for values in the normal range.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            DType::F32 => (-24f64).exp2(),
            DType::F16 => (-11f64).exp2(),
            DType::BF16 => (-8f64).exp2(),
        }
    }

    /// The largest finite value.
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F32 => f32::MAX as f64,
            DType::F16 => f16::MAX.to_f64(),
            DType::BF16 => bf16::MAX.to_f64(),
        }
    }

    /// The smallest positive normal value (below it, values lose precision, then flush to zero).
    pub fn min_positive_normal(self) -> f64 {
        match self {
            DType::F32 => f32::MIN_POSITIVE as f64,
            DType::F16 => f16::MIN_POSITIVE.to_f64(),
            DType::BF16 => bf16::MIN_POSITIVE.to_f64(),
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A floating-point element type of the compute layer: `f32`, `f16` or `bf16`.
pub trait Float: Element + PartialEq + sealed::Sealed {
    /// Which type this is.
    const DTYPE: DType;
    /// The value as f32 (exact for every type here).
    fn to_f32(self) -> f32;
    /// The nearest value of this type (round to nearest, ties to even; overflow gives infinity).
    fn from_f32(value: f32) -> Self;
}

impl Float for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl Float for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl Float for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

/// Compiles the element-wise kernels and opens cuBLAS for `dev` now rather than at first use (so a
/// benchmark does not time NVRTC); allocates nothing. Does nothing on cpu.
pub fn warm_up(dev: &Device) -> Result<()> {
    if let Some(backend) = dev.cuda_backend() {
        cuda::kernels(backend)?;
        cuda::blas(backend)?;
    }
    Ok(())
}

/// The error for an argument an op cannot work with.
pub(crate) fn invalid(op: &'static str, dev: &Device, message: String) -> Error {
    Error::InvalidArgument {
        op,
        device: dev.to_string(),
        message,
    }
}

/// Fails unless `buf` lives on `dev`.
pub(crate) fn same_device<T: Element>(
    op: &'static str,
    dev: &Device,
    buf: &Buffer<T>,
) -> Result<()> {
    if buf.device() == dev {
        Ok(())
    } else {
        Err(Error::DeviceMismatch {
            op,
            expected: dev.to_string(),
            actual: buf.device().to_string(),
        })
    }
}

/// Fails unless `buf` holds `expected` elements (`what` names the operand and its shape).
pub(crate) fn expect_len<T: Element>(
    op: &'static str,
    what: &str,
    buf: &Buffer<T>,
    expected: usize,
) -> Result<()> {
    if buf.len() == expected {
        Ok(())
    } else {
        Err(invalid(
            op,
            buf.device(),
            format!(
                "{what} needs {expected} elements but the buffer holds {}",
                buf.len()
            ),
        ))
    }
}

/// `a × b`, or an error naming the op when it overflows.
pub(crate) fn product(op: &'static str, dev: &Device, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| invalid(op, dev, format!("{a} × {b} elements overflow usize")))
}

/// The contents of a cpu buffer.
///
/// # Safety
/// `buf` is on the cpu device (its address is host memory) and nothing writes to its memory while
/// the slice lives.
pub(crate) unsafe fn host<T: Element>(buf: &Buffer<T>) -> &[T] {
    after_default_stream(buf);
    if buf.is_empty() {
        return &[];
    }
    // SAFETY: a cpu block is host memory aligned to 512 B holding at least len elements of T,
    // initialised (alloc zero-fills); the caller guarantees no concurrent writer.
    unsafe { std::slice::from_raw_parts(buf.ptr() as usize as *const T, buf.len()) }
}

/// The contents of a cpu buffer, for writing.
///
/// # Safety
/// As for [`host`], and no other reference to the memory (through a buffer sharing it) lives.
pub(crate) unsafe fn host_mut<T: Element>(buf: &mut Buffer<T>) -> &mut [T] {
    after_default_stream(buf);
    if buf.is_empty() {
        return &mut [];
    }
    // SAFETY: as in `host`; exclusiveness is the caller's guarantee.
    unsafe { std::slice::from_raw_parts_mut(buf.ptr() as usize as *mut T, buf.len()) }
}

/// A cpu kernel runs on the host when called, in the order of the legacy default stream (where cuda
/// launches kernels): after the work queued there, which may write its buffers. Work queued on
/// other streams runs only if that stream was waited for, as on a GPU.
fn after_default_stream<T: Element>(buf: &Buffer<T>) {
    // Cannot fail: the cpu backend's stream synchronize only runs queued copies.
    let _ = buf.device().inner.backend.stream_synchronize(RawStream(0));
}

/// Whether two buffers start at the same address (distinct live blocks never do, so this is
/// "they share memory", whatever their element types).
pub(crate) fn same_memory<T: Element, U: Element>(a: &Buffer<T>, b: &Buffer<U>) -> bool {
    a.ptr() == b.ptr() && a.device() == b.device()
}

/// Checks that `buf` is on `dev` and holds `n` elements (`what` names it in the error).
pub(crate) fn check_len<T: Element>(
    op: &'static str,
    what: &str,
    dev: &Device,
    buf: &Buffer<T>,
    n: usize,
) -> Result<()> {
    same_device(op, dev, buf)?;
    expect_len(op, what, buf, n)
}

/// The number of elements of a buffer of shape `dims`; an error naming `op` if it overflows.
pub(crate) fn count(op: &'static str, dev: &Device, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| invalid(op, dev, format!("shape {dims:?} overflows usize")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_sizes_match_the_rust_types() {
        assert_eq!(f32::DTYPE.size(), size_of::<f32>());
        assert_eq!(f16::DTYPE.size(), size_of::<f16>());
        assert_eq!(bf16::DTYPE.size(), size_of::<bf16>());
    }

    #[test]
    fn unit_roundoff_is_half_an_ulp_of_one() {
        assert_eq!(DType::F32.unit_roundoff(), (f32::EPSILON / 2.0) as f64);
        assert_eq!(DType::F16.unit_roundoff(), f16::EPSILON.to_f64() / 2.0);
        assert_eq!(DType::BF16.unit_roundoff(), bf16::EPSILON.to_f64() / 2.0);
        assert_eq!(DType::F16.max_finite(), 65504.0);
    }
}
