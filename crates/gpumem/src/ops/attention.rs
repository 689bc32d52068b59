//! The kernels of a transformer layer for [`crate::autograd`]'s layer ops: batched matrix
//! products, softmax over the last dimension, causal masking, dropout with a 1-byte mask,
//! LayerNorm with f32 statistics, copies between `[b, s, h]` rows and `[b, a, s, d]` heads, and a
//! memory-efficient attention that never stores an `s × s` matrix. NVRTC kernels on cuda
//! (`attention.cu`, appended to `kernels.cu`), the same arithmetic in plain loops on cpu: dot
//! products and sums accumulate in f64, where a product of two f32 values is exact.
//!
//! Dropout decides each element from a counter-based hash of `(seed, index)`, the same on both
//! devices: the mask can be made again from the seed alone, which is how the fused attention
//! kernels drop the same elements in backward without storing a mask (torch's memory-efficient and
//! flash kernels keep a Philox seed and offset for the same reason).

use super::cuda::Arg;
use super::elementwise::Launch;
use super::{Float, expect_len, host, host_mut, invalid, same_device};
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;

/// The largest head dimension [`sdpa_forward`] takes (the CUDA kernels' per-thread accumulators).
pub const SDPA_MAX_HEAD_DIM: usize = 256;

/// `(name, parameters, call)` of every entry point of `attention.cu`, for `ops/cuda.rs`.
pub(crate) fn kernel_entries(n: &str, c: &str) -> Vec<(String, String, String)> {
    let e = |name: &str, params: String, call: &str| (format!("{name}_{n}"), params, call.into());
    vec![
        e(
            "bmm",
            format!(
                "const {c}* a, const {c}* b, {c}* y, gm_u64 z, gm_u64 m, gm_u64 k, gm_u64 n, \
                 gm_u32 ta, gm_u32 tb"
            ),
            "gm_bmm(a, b, y, z, m, k, n, ta, tb)",
        ),
        e(
            "causal_mask",
            format!("const {c}* x, {c}* y, gm_u64 rows, gm_u64 cols, float fill"),
            "gm_causal_mask(x, y, rows, cols, fill)",
        ),
        e(
            "softmax",
            format!("const {c}* x, {c}* y, gm_u64 rows, gm_u64 cols"),
            "gm_softmax(x, y, rows, cols)",
        ),
        e(
            "softmax_backward",
            format!("const {c}* g, const {c}* y, {c}* dx, gm_u64 rows, gm_u64 cols"),
            "gm_softmax_backward(g, y, dx, rows, cols)",
        ),
        e(
            "dropout_apply",
            format!("const {c}* x, const unsigned char* m, {c}* y, float scale, gm_u64 n"),
            "gm_dropout_apply(x, m, y, scale, n)",
        ),
        e(
            "ln_stats",
            format!("const {c}* x, float* mean, float* rstd, gm_u64 rows, gm_u64 cols, float eps"),
            "gm_ln_stats(x, mean, rstd, rows, cols, eps)",
        ),
        e(
            "ln_apply",
            format!(
                "const {c}* x, const float* mean, const float* rstd, const {c}* w, const {c}* b, \
                 {c}* y, gm_u64 rows, gm_u64 cols"
            ),
            "gm_ln_apply(x, mean, rstd, w, b, y, rows, cols)",
        ),
        e(
            "ln_backward",
            format!(
                "const {c}* g, const {c}* x, const float* mean, const float* rstd, const {c}* w, \
                 {c}* dx, gm_u64 rows, gm_u64 cols"
            ),
            "gm_ln_backward(g, x, mean, rstd, w, dx, rows, cols)",
        ),
        e(
            "ln_param_grads",
            format!(
                "const {c}* g, const {c}* x, const float* mean, const float* rstd, {c}* dw, \
                 {c}* db, gm_u64 rows, gm_u64 cols"
            ),
            "gm_ln_param_grads(g, x, mean, rstd, dw, db, rows, cols)",
        ),
        e(
            "heads",
            format!(
                "const {c}* src, {c}* dst, gm_u64 b, gm_u64 s, gm_u64 a, gm_u64 d, gm_u64 stride, \
                 gm_u64 offset, gm_u32 to_heads"
            ),
            "gm_heads(src, dst, b, s, a, d, stride, offset, to_heads)",
        ),
        e(
            "sdpa_forward",
            format!(
                "const {c}* q, const {c}* k, const {c}* v, {c}* out, float* lse, gm_u64 heads, \
                 gm_u64 s, gm_u64 d, gm_u64 lse_stride, float scale, gm_u32 causal, float p, \
                 gm_u64 seed, gm_u64 a, gm_u32 rows"
            ),
            "gm_sdpa_forward(q, k, v, out, lse, heads, s, d, lse_stride, scale, causal, p, seed, a, \
             rows)",
        ),
        e(
            "sdpa_backward_q",
            format!(
                "const {c}* q, const {c}* k, const {c}* v, const {c}* out, const {c}* dout, \
                 const float* lse, {c}* dq, gm_u64 heads, gm_u64 s, gm_u64 d, gm_u64 lse_stride, \
                 float scale, gm_u32 causal, float p, gm_u64 seed, gm_u64 a, gm_u32 rows"
            ),
            "gm_sdpa_backward_q(q, k, v, out, dout, lse, dq, heads, s, d, lse_stride, scale, \
             causal, p, seed, a, rows)",
        ),
        e(
            "sdpa_backward_kv",
            format!(
                "const {c}* q, const {c}* k, const {c}* v, const {c}* out, const {c}* dout, \
                 const float* lse, {c}* dk, {c}* dv, gm_u64 heads, gm_u64 s, gm_u64 d, \
                 gm_u64 lse_stride, float scale, gm_u32 causal, float p, gm_u64 seed, gm_u64 a, \
                 gm_u32 rows"
            ),
            "gm_sdpa_backward_kv(q, k, v, out, dout, lse, dk, dv, heads, s, d, lse_stride, scale, \
             causal, p, seed, a, rows)",
        ),
    ]
}

/// The dtype-free entry points of `attention.cu`.
pub(crate) fn untyped_kernel_entries() -> Vec<(String, String, String)> {
    vec![(
        "dropout_mask".into(),
        "unsigned char* mask, gm_u64 n, gm_u64 seed, float p".into(),
        "gm_dropout_mask(mask, n, seed, p)".into(),
    )]
}

/// splitmix64's finaliser of `seed` and element `i` (the same as `gm_mix` in `attention.cu`).
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether element `i` survives dropout of probability `p` under `seed` (the same on both devices).
pub fn dropout_keeps(seed: u64, i: u64, p: f32) -> bool {
    (mix(seed, i) >> 40) as f32 * (1.0 / 16_777_216.0) >= p
}

fn flag(b: bool) -> Arg {
    Arg::U32(b as u32)
}

fn check_len<T: crate::memory::buffer::Element>(
    op: &'static str,
    what: &str,
    dev: &Device,
    buf: &Buffer<T>,
    n: usize,
) -> Result<()> {
    same_device(op, dev, buf)?;
    expect_len(op, what, buf, n)
}

fn count(op: &'static str, dev: &Device, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| invalid(op, dev, format!("shape {dims:?} overflows usize")))
    })
}

/// Batched matrix products `C[z] = op(A[z])·op(B[z])` for `z < batch` (`torch.bmm`, with
/// `transpose_a`/`transpose_b` standing for torch's transposed views): A is `[batch, m, k]` (or
/// `[batch, k, m]` when transposed), B is `[batch, k, n]` (or `[batch, n, k]`), C `[batch, m, n]`.
#[allow(clippy::too_many_arguments)] // the shape of a batched GEMM: three sizes, a batch, two flags
pub fn bmm<T: Float>(
    a: &Buffer<T>,
    b: &Buffer<T>,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Buffer<T>> {
    const OP: &str = "bmm";
    let dev = a.device().clone();
    check_len(
        OP,
        "a ([batch, m, k])",
        &dev,
        a,
        count(OP, &dev, &[batch, m, k])?,
    )?;
    check_len(
        OP,
        "b ([batch, k, n])",
        &dev,
        b,
        count(OP, &dev, &[batch, k, n])?,
    )?;
    let total = count(OP, &dev, &[batch, m, n])?;
    let mut c = dev.alloc::<T>(total)?;
    if total == 0 {
        return Ok(c);
    }
    let launch = Launch::begin(&dev, OP, c.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(a.ptr()),
            Arg::Ptr(b.ptr()),
            Arg::Ptr(c.ptr()),
            Arg::U64(batch as u64),
            Arg::U64(m as u64),
            Arg::U64(k as u64),
            Arg::U64(n as u64),
            flag(transpose_a),
            flag(transpose_b),
        ];
        launch.cuda(&format!("bmm_{}", T::DTYPE), total, &args)?;
        return Ok(c);
    }
    // SAFETY: cpu buffers; c is a fresh block.
    let (av, bv, cv) = unsafe { (host(a), host(b), host_mut(&mut c)) };
    for z in 0..batch {
        let (az, bz) = (&av[z * m * k..][..m * k], &bv[z * k * n..][..k * n]);
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for l in 0..k {
                    let x = az[if transpose_a { l * m + i } else { i * k + l }].to_f32();
                    let y = bz[if transpose_b { j * k + l } else { l * n + j }].to_f32();
                    s += x as f64 * y as f64;
                }
                cv[(z * m + i) * n + j] = T::from_f32(s as f32);
            }
        }
    }
    Ok(c)
}

/// `x` with `fill` above the diagonal of each `[cols, cols]` matrix of a `[rows, cols]` buffer
/// (`scores.masked_fill(causal, fill)` with torch's upper-triangular boolean mask: `-inf` forward,
/// 0 for the gradient).
pub fn causal_mask<T: Float>(
    x: &Buffer<T>,
    rows: usize,
    cols: usize,
    fill: f32,
) -> Result<Buffer<T>> {
    const OP: &str = "causal_mask";
    let dev = x.device().clone();
    check_len(
        OP,
        "x ([rows, cols])",
        &dev,
        x,
        count(OP, &dev, &[rows, cols])?,
    )?;
    let mut y = dev.alloc::<T>(x.len())?;
    if x.is_empty() {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, OP, y.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(y.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
            Arg::F32(fill),
        ];
        return launch
            .cuda(&format!("causal_mask_{}", T::DTYPE), x.len(), &args)
            .map(|()| y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (xv, yv) = unsafe { (host(x), host_mut(&mut y)) };
    for (idx, (out, v)) in yv.iter_mut().zip(xv).enumerate() {
        let (i, j) = ((idx / cols) % cols, idx % cols);
        *out = if j > i { T::from_f32(fill) } else { *v };
    }
    Ok(y)
}

/// Row-wise softmax of a `[rows, cols]` buffer (`F.softmax(x, dim=-1)`) in a new buffer.
pub fn softmax<T: Float>(x: &Buffer<T>, rows: usize, cols: usize) -> Result<Buffer<T>> {
    const OP: &str = "softmax";
    let dev = x.device().clone();
    check_len(
        OP,
        "x ([rows, cols])",
        &dev,
        x,
        count(OP, &dev, &[rows, cols])?,
    )?;
    let mut y = dev.alloc::<T>(x.len())?;
    if x.is_empty() {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, OP, y.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(y.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        return launch
            .cuda(&format!("softmax_{}", T::DTYPE), rows, &args)
            .map(|()| y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (xv, yv) = unsafe { (host(x), host_mut(&mut y)) };
    for (xr, yr) in xv.chunks(cols).zip(yv.chunks_mut(cols)) {
        let m = xr.iter().fold(f32::NEG_INFINITY, |m, v| m.max(v.to_f32()));
        let s: f64 = xr.iter().map(|v| ((v.to_f32() - m) as f64).exp()).sum();
        for (o, v) in yr.iter_mut().zip(xr) {
            *o = T::from_f32((((v.to_f32() - m) as f64).exp() / s) as f32);
        }
    }
    Ok(y)
}

/// Softmax's backward from its output (what torch saves): `y · (g − Σ g·y)` row by row.
pub fn softmax_backward<T: Float>(
    grad_output: &Buffer<T>,
    output: &Buffer<T>,
    rows: usize,
    cols: usize,
) -> Result<Buffer<T>> {
    const OP: &str = "softmax_backward";
    let dev = output.device().clone();
    let n = count(OP, &dev, &[rows, cols])?;
    check_len(OP, "output ([rows, cols])", &dev, output, n)?;
    check_len(OP, "grad_output ([rows, cols])", &dev, grad_output, n)?;
    let mut dx = dev.alloc::<T>(n)?;
    if n == 0 {
        return Ok(dx);
    }
    let launch = Launch::begin(&dev, OP, dx.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(grad_output.ptr()),
            Arg::Ptr(output.ptr()),
            Arg::Ptr(dx.ptr()),
            Arg::U64(rows as u64),
            Arg::U64(cols as u64),
        ];
        let kernel = format!("softmax_backward_{}", T::DTYPE);
        return launch.cuda(&kernel, rows, &args).map(|()| dx);
    }
    // SAFETY: cpu buffers; dx is a fresh block.
    let (gv, yv, dv) = unsafe { (host(grad_output), host(output), host_mut(&mut dx)) };
    for ((gr, yr), dr) in gv
        .chunks(cols)
        .zip(yv.chunks(cols))
        .zip(dv.chunks_mut(cols))
    {
        let s: f64 = gr
            .iter()
            .zip(yr)
            .map(|(g, y)| g.to_f32() as f64 * y.to_f32() as f64)
            .sum();
        let sf = s as f32;
        for ((d, g), y) in dr.iter_mut().zip(gr).zip(yr) {
            *d = T::from_f32(y.to_f32() * (g.to_f32() - sf));
        }
    }
    Ok(dx)
}

/// The 1-byte keep mask (1 keeps, 0 drops) of dropout with probability `p` for `n` elements under
/// `seed`, made on the device (CUDA's `native_dropout` keeps a `bool` mask of one byte per element).
pub fn dropout_mask(dev: &Device, n: usize, p: f32, seed: u64) -> Result<Buffer<u8>> {
    const OP: &str = "dropout_mask";
    let mut mask = dev.alloc::<u8>(n)?;
    if n == 0 {
        return Ok(mask);
    }
    let launch = Launch::begin(dev, OP, mask.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(mask.ptr()),
            Arg::U64(n as u64),
            Arg::U64(seed),
            Arg::F32(p),
        ];
        return launch.cuda("dropout_mask", n, &args).map(|()| mask);
    }
    // SAFETY: a cpu buffer, a fresh block.
    for (i, m) in unsafe { host_mut(&mut mask) }.iter_mut().enumerate() {
        *m = dropout_keeps(seed, i as u64, p) as u8;
    }
    Ok(mask)
}

/// `x · mask · scale` in a new buffer: dropout's forward (scale `1/(1−p)`) and its backward.
pub fn dropout_apply<T: Float>(x: &Buffer<T>, mask: &Buffer<u8>, scale: f32) -> Result<Buffer<T>> {
    const OP: &str = "dropout_apply";
    let dev = x.device().clone();
    check_len(OP, "mask (the length of x)", &dev, mask, x.len())?;
    let mut y = dev.alloc::<T>(x.len())?;
    if x.is_empty() {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, OP, y.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(mask.ptr()),
            Arg::Ptr(y.ptr()),
            Arg::F32(scale),
            Arg::U64(x.len() as u64),
        ];
        let kernel = format!("dropout_apply_{}", T::DTYPE);
        return launch.cuda(&kernel, x.len(), &args).map(|()| y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (xv, mv, yv) = unsafe { (host(x), host(mask), host_mut(&mut y)) };
    for ((o, v), &m) in yv.iter_mut().zip(xv).zip(mv) {
        *o = T::from_f32(if m != 0 { v.to_f32() * scale } else { 0.0 });
    }
    Ok(y)
}

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

/// Where the heads sit in a `[b, s, …]` buffer: rows of `stride` elements, the `a·d` head values
/// starting at column `offset` (`stride = 3h`, `offset = 0, h, 2h` for q, k, v of a fused QKV).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadLayout {
    /// Batch.
    pub b: usize,
    /// Sequence length.
    pub s: usize,
    /// Heads.
    pub a: usize,
    /// Head dimension.
    pub d: usize,
    /// Elements per `[b, s]` row of the row-major buffer.
    pub stride: usize,
    /// First column of the heads in a row.
    pub offset: usize,
}

impl HeadLayout {
    fn heads_len(&self, op: &'static str, dev: &Device) -> Result<usize> {
        if self.offset + self.a * self.d > self.stride {
            return Err(invalid(
                op,
                dev,
                format!(
                    "{} heads of {} at column {} do not fit rows of {}",
                    self.a, self.d, self.offset, self.stride
                ),
            ));
        }
        count(op, dev, &[self.b, self.a, self.s, self.d])
    }

    fn args(&self) -> [Arg; 6] {
        [self.b, self.s, self.a, self.d, self.stride, self.offset].map(|v| Arg::U64(v as u64))
    }
}

/// The heads of `rows` (`[b, s, stride]`) copied out to a new `[b, a, s, d]` buffer: what torch's
/// `view(b, s, a, d).transpose(1, 2)` followed by the contiguous copy `bmm` needs makes.
pub fn rows_to_heads<T: Float>(rows: &Buffer<T>, layout: HeadLayout) -> Result<Buffer<T>> {
    const OP: &str = "rows_to_heads";
    let dev = rows.device().clone();
    let n = layout.heads_len(OP, &dev)?;
    let row_len = count(OP, &dev, &[layout.b, layout.s, layout.stride])?;
    check_len(OP, "rows ([b, s, stride])", &dev, rows, row_len)?;
    let mut heads = dev.alloc::<T>(n)?;
    heads_copy(OP, rows, &mut heads, layout, true)?;
    Ok(heads)
}

/// `[b, a, s, d]` heads written into `rows` (`[b, s, stride]`, an existing buffer) at the layout's
/// columns: torch's `transpose(1, 2).reshape(b, s, h)` when `stride = h`, and the backward of
/// [`rows_to_heads`].
pub fn heads_to_rows<T: Float>(
    heads: &Buffer<T>,
    rows: &mut Buffer<T>,
    layout: HeadLayout,
) -> Result<()> {
    const OP: &str = "heads_to_rows";
    let dev = heads.device().clone();
    let n = layout.heads_len(OP, &dev)?;
    check_len(OP, "heads ([b, a, s, d])", &dev, heads, n)?;
    let row_len = count(OP, &dev, &[layout.b, layout.s, layout.stride])?;
    check_len(OP, "rows ([b, s, stride])", &dev, rows, row_len)?;
    heads_copy(OP, heads, rows, layout, false)
}

fn heads_copy<T: Float>(
    op: &'static str,
    src: &Buffer<T>,
    dst: &mut Buffer<T>,
    layout: HeadLayout,
    to_heads: bool,
) -> Result<()> {
    let dev = src.device().clone();
    let n = layout.b * layout.a * layout.s * layout.d;
    if n == 0 {
        return Ok(());
    }
    let launch = Launch::begin(&dev, op, n * std::mem::size_of::<T>());
    if dev.is_cuda() {
        let mut args = vec![Arg::Ptr(src.ptr()), Arg::Ptr(dst.ptr())];
        args.extend(layout.args());
        args.push(flag(to_heads));
        return launch.cuda(&format!("heads_{}", T::DTYPE), n, &args);
    }
    // SAFETY: cpu buffers in different blocks (dst is borrowed mutably).
    let (sv, dv) = unsafe { (host(src), host_mut(dst)) };
    let HeadLayout {
        s,
        a,
        d,
        stride,
        offset,
        ..
    } = layout;
    for idx in 0..n {
        let (di, si, ai, bi) = (
            idx % d,
            (idx / d) % s,
            (idx / (d * s)) % a,
            idx / (d * s * a),
        );
        let row = (bi * s + si) * stride + offset + ai * d + di;
        if to_heads {
            dv[idx] = sv[row];
        } else {
            dv[row] = sv[idx];
        }
    }
    Ok(())
}

/// The shape of a fused attention call: `heads` = batch × heads matrices of `[s, d]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdpaShape {
    /// Batch × heads.
    pub heads: usize,
    /// Sequence length (queries and keys).
    pub s: usize,
    /// Head dimension.
    pub d: usize,
    /// Elements between one head's log-sum-exp row and the next (at least `s`).
    pub lse_stride: usize,
    /// The scores' scale, usually `1/√d`.
    pub scale: f32,
    /// Keys after the query are masked.
    pub causal: bool,
    /// Dropout probability on the attention weights.
    pub p: f32,
    /// Dropout's seed.
    pub seed: u64,
    /// Heads per batch element: with `rows`, head `z` is head `z % a` of batch element `z / a`.
    pub a: usize,
    /// The output (and its gradient) is laid out as a layer's `[b, s, a·d]` rows rather than
    /// `[heads, s, d]`: torch's fused kernels write it so, and `transpose(1, 2).reshape(b, s, h)`
    /// is then a view.
    pub rows: bool,
}

impl SdpaShape {
    fn check(&self, dev: &Device, q: &[&Buffer<impl Float>]) -> Result<usize> {
        const OP: &str = "sdpa";
        if self.d > SDPA_MAX_HEAD_DIM {
            return Err(invalid(
                OP,
                dev,
                format!("head dimension {} is above {SDPA_MAX_HEAD_DIM}", self.d),
            ));
        }
        if self.lse_stride < self.s {
            return Err(invalid(OP, dev, "lse_stride is below s".into()));
        }
        if self.rows && (self.a == 0 || !self.heads.is_multiple_of(self.a)) {
            return Err(invalid(
                OP,
                dev,
                format!(
                    "{} heads do not make whole batch elements of {}",
                    self.heads, self.a
                ),
            ));
        }
        let n = count(OP, dev, &[self.heads, self.s, self.d])?;
        for t in q {
            check_len(OP, "q, k, v, out ([heads, s, d])", dev, t, n)?;
        }
        Ok(n)
    }

    fn args(&self) -> [Arg; 10] {
        [
            Arg::U64(self.heads as u64),
            Arg::U64(self.s as u64),
            Arg::U64(self.d as u64),
            Arg::U64(self.lse_stride as u64),
            Arg::F32(self.scale),
            flag(self.causal),
            Arg::F32(self.p),
            Arg::U64(self.seed),
            Arg::U64(self.a as u64),
            flag(self.rows),
        ]
    }

    /// Where element `c` of query `i` of head `z` sits in the output (`gm_out_index`).
    fn out_index(&self, z: usize, i: usize, c: usize) -> usize {
        let (s, d, a) = (self.s, self.d, self.a.max(1));
        if self.rows {
            (((z / a) * s + i) * a + z % a) * d + c
        } else {
            (z * s + i) * d + c
        }
    }

    fn score<T: Float>(&self, q: &[T], k: &[T], z: usize, i: usize, j: usize) -> f64 {
        let (s, d) = (self.s, self.d);
        let dot: f64 = (0..d)
            .map(|l| {
                q[(z * s + i) * d + l].to_f32() as f64 * k[(z * s + j) * d + l].to_f32() as f64
            })
            .sum();
        dot * self.scale as f64
    }

    fn kept(&self, z: usize, i: usize, j: usize) -> bool {
        self.p <= 0.0 || dropout_keeps(self.seed, ((z * self.s + i) * self.s + j) as u64, self.p)
    }

    fn keep_scale(&self) -> f64 {
        if self.p > 0.0 {
            1.0 / (1.0 - self.p as f64)
        } else {
            1.0
        }
    }

    fn dp<T: Float>(&self, v: &[T], dout: &[T], z: usize, i: usize, j: usize) -> f64 {
        if !self.kept(z, i, j) {
            return 0.0;
        }
        let (s, d) = (self.s, self.d);
        let dot: f64 = (0..d)
            .map(|l| {
                dout[self.out_index(z, i, l)].to_f32() as f64
                    * v[(z * s + j) * d + l].to_f32() as f64
            })
            .sum();
        dot * self.keep_scale()
    }
}

/// Memory-efficient attention: `(out, lse)` for `q`, `k`, `v` of `[heads, s, d]`, with `out`
/// `[heads, s, d]` (or `[b, s, a·d]` rows, see [`SdpaShape::rows`]) and the f32 log-sum-exp of each query's scores, `[heads, lse_stride]`. No
/// `s × s` matrix is stored: the cpu loop keeps one row of probabilities in ordinary heap memory,
/// the CUDA kernel none.
pub fn sdpa_forward<T: Float>(
    q: &Buffer<T>,
    k: &Buffer<T>,
    v: &Buffer<T>,
    shape: SdpaShape,
) -> Result<(Buffer<T>, Buffer<f32>)> {
    const OP: &str = "sdpa_forward";
    let dev = q.device().clone();
    let n = shape.check(&dev, &[q, k, v])?;
    let mut out = dev.alloc::<T>(n)?;
    let mut lse = dev.alloc::<f32>(count(OP, &dev, &[shape.heads, shape.lse_stride])?)?;
    if n == 0 {
        return Ok((out, lse));
    }
    let launch = Launch::begin(&dev, OP, out.size_bytes());
    if dev.is_cuda() {
        let mut args = vec![
            Arg::Ptr(q.ptr()),
            Arg::Ptr(k.ptr()),
            Arg::Ptr(v.ptr()),
            Arg::Ptr(out.ptr()),
            Arg::Ptr(lse.ptr()),
        ];
        args.extend(shape.args());
        launch.cuda(
            &format!("sdpa_forward_{}", T::DTYPE),
            shape.heads * shape.s,
            &args,
        )?;
        return Ok((out, lse));
    }
    let SdpaShape { heads, s, d, .. } = shape;
    // SAFETY: cpu buffers; out and lse are fresh blocks.
    let (qv, kv, vv) = unsafe { (host(q), host(k), host(v)) };
    let (ov, lv) = unsafe { (host_mut(&mut out), host_mut(&mut lse)) };
    let mut acc = vec![0.0f64; d];
    for z in 0..heads {
        for i in 0..s {
            let last = if shape.causal { i + 1 } else { s };
            let scores: Vec<f64> = (0..last).map(|j| shape.score(qv, kv, z, i, j)).collect();
            let m = scores.iter().fold(-1.0e300f64, |m, &x| m.max(x));
            let l = m + scores.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            lv[z * shape.lse_stride + i] = l as f32;
            acc.iter_mut().for_each(|a| *a = 0.0);
            for (j, x) in scores.iter().enumerate() {
                if !shape.kept(z, i, j) {
                    continue;
                }
                let w = (x - l).exp() * shape.keep_scale();
                for (c, a) in acc.iter_mut().enumerate() {
                    *a += w * vv[(z * s + j) * d + c].to_f32() as f64;
                }
            }
            for (c, a) in acc.iter().enumerate() {
                ov[shape.out_index(z, i, c)] = T::from_f32(*a as f32);
            }
        }
    }
    Ok((out, lse))
}

/// Memory-efficient attention's backward: `(dq, dk, dv)` from the saved `q`, `k`, `v`, `out` and
/// `lse` (the probabilities are recomputed, and dropout's decisions made again from the seed).
pub fn sdpa_backward<T: Float>(
    grad_out: &Buffer<T>,
    saved: [&Buffer<T>; 4],
    lse: &Buffer<f32>,
    shape: SdpaShape,
) -> Result<(Buffer<T>, Buffer<T>, Buffer<T>)> {
    const OP: &str = "sdpa_backward";
    let [q, k, v, out] = saved;
    let dev = q.device().clone();
    let n = shape.check(&dev, &[q, k, v, out, grad_out])?;
    check_len(
        OP,
        "lse ([heads, lse_stride])",
        &dev,
        lse,
        shape.heads * shape.lse_stride,
    )?;
    let mut dq = dev.alloc::<T>(n)?;
    let mut dk = dev.alloc::<T>(n)?;
    let mut dv = dev.alloc::<T>(n)?;
    if n == 0 {
        return Ok((dq, dk, dv));
    }
    let rows = shape.heads * shape.s;
    if dev.is_cuda() {
        let common = [q, k, v, out, grad_out].map(|b| Arg::Ptr(b.ptr()));
        let launch = Launch::begin(&dev, OP, dq.size_bytes());
        let mut args = common.to_vec();
        args.extend([Arg::Ptr(lse.ptr()), Arg::Ptr(dq.ptr())]);
        args.extend(shape.args());
        launch.cuda(&format!("sdpa_backward_q_{}", T::DTYPE), rows, &args)?;
        let launch = Launch::named(&dev, OP, "sdpa_backward_kv", dk.size_bytes() * 2);
        let mut args = common.to_vec();
        args.extend([Arg::Ptr(lse.ptr()), Arg::Ptr(dk.ptr()), Arg::Ptr(dv.ptr())]);
        args.extend(shape.args());
        launch.cuda(&format!("sdpa_backward_kv_{}", T::DTYPE), rows, &args)?;
        return Ok((dq, dk, dv));
    }
    let _launch = Launch::begin(&dev, OP, dq.size_bytes());
    let SdpaShape { heads, s, d, .. } = shape;
    // SAFETY: cpu buffers; dq, dk and dv are fresh blocks.
    let (qv, kv, vv, ov, gv, lv) = unsafe {
        (
            host(q),
            host(k),
            host(v),
            host(out),
            host(grad_out),
            host(lse),
        )
    };
    let (dqv, dkv, dvv) = unsafe { (host_mut(&mut dq), host_mut(&mut dk), host_mut(&mut dv)) };
    let delta = |z: usize, i: usize| -> f64 {
        (0..d)
            .map(|l| {
                let o = shape.out_index(z, i, l);
                gv[o].to_f32() as f64 * ov[o].to_f32() as f64
            })
            .sum()
    };
    let prob = |z: usize, i: usize, j: usize| {
        (shape.score(qv, kv, z, i, j) - lv[z * shape.lse_stride + i] as f64).exp()
    };
    let mut acc = vec![0.0f64; d];
    let mut acc_v = vec![0.0f64; d];
    for z in 0..heads {
        for i in 0..s {
            let last = if shape.causal { i + 1 } else { s };
            let dl = delta(z, i);
            acc.iter_mut().for_each(|a| *a = 0.0);
            for j in 0..last {
                let ds = prob(z, i, j) * (shape.dp(vv, gv, z, i, j) - dl);
                for (c, a) in acc.iter_mut().enumerate() {
                    *a += ds * kv[(z * s + j) * d + c].to_f32() as f64;
                }
            }
            for (c, a) in acc.iter().enumerate() {
                dqv[(z * s + i) * d + c] = T::from_f32((a * shape.scale as f64) as f32);
            }
        }
        for j in 0..s {
            let first = if shape.causal { j } else { 0 };
            acc.iter_mut().for_each(|a| *a = 0.0);
            acc_v.iter_mut().for_each(|a| *a = 0.0);
            for i in first..s {
                let p = prob(z, i, j);
                let ds = p * (shape.dp(vv, gv, z, i, j) - delta(z, i));
                let pv = if shape.kept(z, i, j) {
                    p * shape.keep_scale()
                } else {
                    0.0
                };
                for c in 0..d {
                    acc[c] += ds * qv[(z * s + i) * d + c].to_f32() as f64;
                    acc_v[c] += pv * gv[shape.out_index(z, i, c)].to_f32() as f64;
                }
            }
            for c in 0..d {
                dkv[(z * s + j) * d + c] = T::from_f32((acc[c] * shape.scale as f64) as f32);
                dvv[(z * s + j) * d + c] = T::from_f32(acc_v[c] as f32);
            }
        }
    }
    Ok((dq, dk, dv))
}
