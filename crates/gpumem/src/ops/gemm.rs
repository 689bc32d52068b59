//! Row-major matrix products: cuBLAS on cuda (`sgemm`, or `cublasGemmEx` with f32 accumulation for
//! f16/bf16 inputs), a blocked loop with f32 accumulation on cpu.

use super::cuda::{self, ColumnMajorGemm};
use super::{DType, Float, expect_len, host, host_mut, invalid, product, same_device, same_memory};
use crate::error::Result;
use crate::memory::buffer::Buffer;
use std::borrow::Cow;

/// The shape of a row-major product `C[m×n] = op(A)·op(B)`, where `op` takes a matrix as stored or
/// transposed. The three constructors name the products a linear layer needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatMul {
    /// Rows of C (and of op(A)).
    pub m: usize,
    /// The shared dimension: columns of op(A), rows of op(B).
    pub k: usize,
    /// Columns of C (and of op(B)).
    pub n: usize,
    /// Whether A is stored `[k×m]` and used transposed.
    pub transpose_a: bool,
    /// Whether B is stored `[n×k]` and used transposed.
    pub transpose_b: bool,
}

impl MatMul {
    /// `C = A·B` with A stored `[m×k]` and B stored `[k×n]` (a layer's input gradient: `grad_y·W`).
    pub fn new(m: usize, k: usize, n: usize) -> MatMul {
        MatMul {
            m,
            k,
            n,
            transpose_a: false,
            transpose_b: false,
        }
    }

    /// `C = Aᵀ·B` with A stored `[k×m]` and B stored `[k×n]` (a weight gradient: `grad_yᵀ·x`).
    pub fn at_b(m: usize, k: usize, n: usize) -> MatMul {
        MatMul {
            transpose_a: true,
            ..MatMul::new(m, k, n)
        }
    }

    /// `C = A·Bᵀ` with A stored `[m×k]` and B stored `[n×k]` (a layer's forward pass: `x·Wᵀ`).
    pub fn a_bt(m: usize, k: usize, n: usize) -> MatMul {
        MatMul {
            transpose_b: true,
            ..MatMul::new(m, k, n)
        }
    }

    /// Floating-point operations of the product: `2·m·n·k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// A's shape as stored, `(rows, cols)`.
    pub fn a_shape(&self) -> (usize, usize) {
        if self.transpose_a {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }

    /// B's shape as stored, `(rows, cols)`.
    pub fn b_shape(&self) -> (usize, usize) {
        if self.transpose_b {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }
}

/// `A·B` (or a transposed variant, per `shape`) in the inputs' type, as torch's `a @ b`: f32 through
/// `sgemm`; f16 and bf16 through `cublasGemmEx`, accumulating in f32 and rounding once at the end.
pub fn matmul<T: Float>(a: &Buffer<T>, b: &Buffer<T>, shape: MatMul) -> Result<Buffer<T>> {
    let dev = a.device().clone();
    let mut c = dev.alloc::<T>(product("matmul", &dev, shape.m, shape.n)?)?;
    run("matmul", 1.0, a, b, shape, 0.0, &mut c)?;
    Ok(c)
}

/// `A·B` (or a transposed variant) of inputs of any type, with an f32 result (no rounding to half).
pub fn matmul_f32<T: Float>(a: &Buffer<T>, b: &Buffer<T>, shape: MatMul) -> Result<Buffer<f32>> {
    let dev = a.device().clone();
    let mut c = dev.alloc::<f32>(product("matmul_f32", &dev, shape.m, shape.n)?)?;
    run("matmul_f32", 1.0, a, b, shape, 0.0, &mut c)?;
    Ok(c)
}

/// `C ← α·op(A)·op(B) + β·C` into an existing buffer (β = 1 accumulates, as a gradient does; with
/// β = 0 the old contents are not read). Outputs: f32 for any input type, or the inputs' own half
/// type (cuBLAS has no other combination). C must not share memory with A or B.
pub fn gemm_into<I: Float, O: Float>(
    alpha: f32,
    a: &Buffer<I>,
    b: &Buffer<I>,
    shape: MatMul,
    beta: f32,
    c: &mut Buffer<O>,
) -> Result<()> {
    run("gemm_into", alpha, a, b, shape, beta, c)
}

fn run<I: Float, O: Float>(
    op: &'static str,
    alpha: f32,
    a: &Buffer<I>,
    b: &Buffer<I>,
    shape: MatMul,
    beta: f32,
    c: &mut Buffer<O>,
) -> Result<()> {
    let dev = c.device().clone();
    same_device(op, &dev, a)?;
    same_device(op, &dev, b)?;
    if !(O::DTYPE == I::DTYPE || O::DTYPE == DType::F32) {
        return Err(invalid(
            op,
            &dev,
            format!(
                "{} inputs can give f32 or {} results, not {}",
                I::DTYPE,
                I::DTYPE,
                O::DTYPE
            ),
        ));
    }
    let MatMul { m, k, n, .. } = shape;
    let (ar, ac) = shape.a_shape();
    let (br, bc) = shape.b_shape();
    expect_len(op, &format!("A [{ar}×{ac}]"), a, product(op, &dev, ar, ac)?)?;
    expect_len(op, &format!("B [{br}×{bc}]"), b, product(op, &dev, br, bc)?)?;
    expect_len(op, &format!("C [{m}×{n}]"), c, product(op, &dev, m, n)?)?;
    if same_memory(c, a) || same_memory(c, b) {
        return Err(invalid(
            op,
            &dev,
            "the output shares memory with an input; a GEMM reads its inputs while it writes"
                .into(),
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let _span = dev.inner.activity.kernel(op, c.size_bytes());
    match dev.cuda_backend() {
        Some(backend) => {
            let dim = |v: usize| {
                i32::try_from(v.max(1)).map_err(|_| {
                    invalid(
                        op,
                        &dev,
                        format!("dimension {v} exceeds cuBLAS's limit of 2^31-1"),
                    )
                })
            };
            // Row-major C[m×n] is column-major Cᵀ[n×m] = op(B)ᵀ·op(A)ᵀ: swap the operands. A
            // row-major matrix's leading dimension is its number of columns as stored.
            let g = ColumnMajorGemm {
                transa: shape.transpose_b,
                transb: shape.transpose_a,
                m: dim(n)?,
                n: dim(m)?,
                k: if k == 0 { 0 } else { dim(k)? },
                alpha,
                a: b.ptr(),
                lda: dim(bc)?,
                b: a.ptr(),
                ldb: dim(ac)?,
                beta,
                c: c.ptr(),
                ldc: dim(n)?,
                input: I::DTYPE,
                output: O::DTYPE,
            };
            let blas = cuda::blas(backend)?;
            let blas = blas.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: a, b, c are live buffers of this device whose lengths match the shape (checked
            // above), in the element types named; c overlaps neither input (distinct blocks).
            unsafe { blas.gemm(op, &g) }
        }
        None => {
            cpu_gemm(alpha, a, b, shape, beta, c);
            Ok(())
        }
    }
}

/// `op(X)` as a row-major `[rows×cols]` f32 matrix, borrowed when X is f32 and not transposed.
fn rows_f32<T: Float>(x: &[T], transpose: bool, rows: usize, cols: usize) -> Cow<'_, [f32]> {
    if T::DTYPE == DType::F32 && !transpose {
        return Cow::Borrowed(bytemuck::cast_slice(x));
    }
    let mut out = Vec::with_capacity(rows * cols);
    if transpose {
        // Stored [cols×rows].
        for r in 0..rows {
            out.extend((0..cols).map(|c| x[c * rows + r].to_f32()));
        }
    } else {
        out.extend(x.iter().map(|v| v.to_f32()));
    }
    Cow::Owned(out)
}

fn cpu_gemm<I: Float, O: Float>(
    alpha: f32,
    a: &Buffer<I>,
    b: &Buffer<I>,
    shape: MatMul,
    beta: f32,
    c: &mut Buffer<O>,
) {
    let MatMul { m, k, n, .. } = shape;
    // SAFETY: cpu buffers; nothing writes to a or b during the call (c is a different block).
    let (a, b) = unsafe { (host(a), host(b)) };
    let a = rows_f32(a, shape.transpose_a, m, k);
    let b = rows_f32(b, shape.transpose_b, k, n);
    let acc = blocked_product(&a, &b, m, k, n);
    // SAFETY: a cpu buffer, exclusively ours for the call (it shares memory with neither input).
    let out = unsafe { host_mut(c) };
    for (o, &v) in out.iter_mut().zip(&acc) {
        let r = if beta == 0.0 {
            alpha * v
        } else {
            alpha * v + beta * o.to_f32()
        };
        *o = O::from_f32(r);
    }
}

/// `A[m×k]·B[k×n]` with f32 accumulation, each element summed over k in order; rows split over the
/// machine's cores when the product is large enough to pay for threads.
fn blocked_product(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    let work = m as u64 * n as u64 * k as u64;
    let threads = if work >= 1 << 22 {
        std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(m)
    } else {
        1
    };
    let rows_per = m.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, chunk) in c.chunks_mut(rows_per * n).enumerate() {
            let a = &a[t * rows_per * k..];
            s.spawn(move || product_rows(a, b, chunk, k, n));
        }
    });
    c
}

/// `c += a·b` for the rows of `c`; blocks of k and n keep a slab of B in cache.
fn product_rows(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
    const K_BLOCK: usize = 128;
    const N_BLOCK: usize = 512;
    let rows = c.len() / n;
    for j0 in (0..n).step_by(N_BLOCK) {
        let j1 = (j0 + N_BLOCK).min(n);
        for k0 in (0..k).step_by(K_BLOCK) {
            let k1 = (k0 + K_BLOCK).min(k);
            for i in 0..rows {
                let c_row = &mut c[i * n + j0..i * n + j1];
                let a_row = &a[i * k..(i + 1) * k];
                for (kk, &aik) in a_row.iter().enumerate().take(k1).skip(k0) {
                    let b_row = &b[kk * n + j0..kk * n + j1];
                    for (cv, &bv) in c_row.iter_mut().zip(b_row) {
                        *cv += aik * bv;
                    }
                }
            }
        }
    }
}
