//! The attention kernels of a transformer layer for [`crate::autograd`]'s layer ops: batched
//! matrix products, softmax over the last dimension, causal masking, copies between `[b, s, h]`
//! rows and `[b, a, s, d]` heads, and a memory-efficient attention that never stores an `s × s`
//! matrix (its dropout from [`dropout_keeps`](super::dropout_keeps)). NVRTC kernels on cuda
//! (`attention.cu`, appended to `kernels.cu`), the same arithmetic in plain loops on cpu: dot
//! products and sums accumulate in f64, where a product of two f32 values is exact. Dropout and
//! LayerNorm, whose kernels are in `attention.cu` too, have their own files.

use super::cuda::Arg;
use super::dropout::dropout_keeps;
use super::elementwise::Launch;
use super::kernel_source::SDPA_TILE;
use super::{Float, check_len, count, host, host_mut, invalid};
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;

fn flag(b: bool) -> Arg {
    Arg::U32(b as u32)
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
    // Each row of op(A) and each column of op(B) is read into f64 once, contiguous: every product
    // and every sum is the one of reading the elements in place (the same f64 values, added in the
    // same order, l = 0..k), and the inner loop no longer converts or strides.
    if k == 0 {
        // Empty sums: every element is 0.
        cv.fill(T::from_f32(0.0));
        return Ok(c);
    }
    let (mut rows, mut cols) = (vec![0.0f64; m * k], vec![0.0f64; n * k]);
    for z in 0..batch {
        let (az, bz) = (&av[z * m * k..][..m * k], &bv[z * k * n..][..k * n]);
        for (at, x) in rows.iter_mut().enumerate() {
            let (i, l) = (at / k, at % k);
            *x = az[if transpose_a { l * m + i } else { i * k + l }].to_f32() as f64;
        }
        for (at, y) in cols.iter_mut().enumerate() {
            let (j, l) = (at / k, at % k);
            *y = bz[if transpose_b { j * k + l } else { l * n + j }].to_f32() as f64;
        }
        for (i, row) in rows.chunks_exact(k).enumerate() {
            for (j, col) in cols.chunks_exact(k).enumerate() {
                let mut s = 0.0f64;
                for l in 0..k {
                    s += row[l] * col[l];
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

    /// CUDA threads of one attention kernel: one per (head, query or key, tile of columns).
    fn threads(&self) -> usize {
        self.heads * self.s * self.d.div_ceil(SDPA_TILE)
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
            shape.threads(),
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
    if dev.is_cuda() {
        let common = [q, k, v, out, grad_out].map(|b| Arg::Ptr(b.ptr()));
        let launch = Launch::begin(&dev, OP, dq.size_bytes());
        let mut args = common.to_vec();
        args.extend([Arg::Ptr(lse.ptr()), Arg::Ptr(dq.ptr())]);
        args.extend(shape.args());
        launch.cuda(
            &format!("sdpa_backward_q_{}", T::DTYPE),
            shape.threads(),
            &args,
        )?;
        let launch = Launch::named(&dev, OP, "sdpa_backward_kv", dk.size_bytes() * 2);
        let mut args = common.to_vec();
        args.extend([Arg::Ptr(lse.ptr()), Arg::Ptr(dk.ptr()), Arg::Ptr(dv.ptr())]);
        args.extend(shape.args());
        launch.cuda(
            &format!("sdpa_backward_kv_{}", T::DTYPE),
            shape.threads(),
            &args,
        )?;
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
