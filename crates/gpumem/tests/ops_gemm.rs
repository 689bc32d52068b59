//! Matrix products against an f64 reference, for every layout and element type.
//!
//! The bound: with f32 accumulation over k terms, `|ĉ − c| ≤ γ·Σ_k |a_ik·b_kj|` with
//! `γ = (k + 2)·2^-23`, twice the textbook `k·u` (u = 2^-24) to leave room for accumulators that
//! truncate (tensor cores do); f16/bf16 inputs multiply exactly in f32, so the same bound holds;
//! a half output adds one rounding, `u_out·|c|` (2^-11 for f16, 2^-8 for bf16).
//!
//! On cuda a half output may cost more: cuBLAS may split k and add the partial products in the
//! output's precision, which torch 2.15 allows by default (`allow_fp16_reduced_precision_reduction`
//! and `allow_bf16_reduced_precision_reduction` are `(True, True)`: reduced precision, split-K) and
//! gpumem too (`CUBLAS_DEFAULT_MATH`). With `s ≤ k` partials, each rounded to the output type once
//! and added there `s − 1` times, each partial and running sum at most `Σ|ab|`, that adds at most
//! `(2k − 1)·u_out·Σ|ab|` (first order). The cpu device splits nothing and keeps the tight bound.

mod ops_support;

use gpumem::ops::{self, Float, MatMul};
use gpumem::{Error, bf16, f16};
use ops_support::{assert_close, block, data, reference_gemm, rng, seeded};

/// What a split-K reduction in the output's precision may add, per unit of `Σ|ab|`: on cuda
/// `(2k − 1)·u_out` (see the top of this file), on cpu nothing.
fn split_k(dev: &gpumem::Device, k: usize, u_out: f64) -> f64 {
    if dev.is_cuda() {
        (2 * k - 1) as f64 * u_out
    } else {
        0.0
    }
}

/// f32 accumulation's bound factor for k terms.
fn gamma(k: usize) -> f64 {
    (k as f64 + 2.0) * (-23f64).exp2()
}

fn values<T: Float>(buf: &gpumem::Buffer<T>) -> Vec<f64> {
    buf.to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_f32() as f64)
        .collect()
}

/// Random inputs rounded to I (as stored on the device) and their exact values.
fn operand<I: Float>(rng: &mut gpumem::ops::XorShift, n: usize) -> (Vec<I>, Vec<f64>) {
    let v: Vec<I> = data(rng, n).iter().map(|&x| I::from_f32(x)).collect();
    let f = v.iter().map(|x| x.to_f32() as f64).collect();
    (v, f)
}

/// Checks `matmul` (output I) and `matmul_f32` (output f32) for one shape.
fn check<I: Float>(shape: MatMul) {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let (ar, ac) = shape.a_shape();
    let (br, bc) = shape.b_shape();
    let (ha, a) = operand::<I>(&mut rng, ar * ac);
    let (hb, b) = operand::<I>(&mut rng, br * bc);
    let (da, db) = (dev.from_slice(&ha).unwrap(), dev.from_slice(&hb).unwrap());
    let MatMul { m, k, n, .. } = shape;
    let (want, abs) = reference_gemm(&a, &b, m, k, n, shape.transpose_a, shape.transpose_b);
    let what = format!(
        "{} {m}×{k}×{n} (Aᵀ: {}, Bᵀ: {})",
        I::DTYPE,
        shape.transpose_a,
        shape.transpose_b
    );

    let c = ops::matmul_f32(&da, &db, shape).unwrap();
    assert_close(&format!("{what} → f32"), &values(&c), &want, &abs, gamma(k));

    let c = ops::matmul(&da, &db, shape).unwrap();
    let u = I::DTYPE.unit_roundoff();
    // Normalise the bound to Σ|ab| (which is ≥ |c|): γ·Σ|ab| + u·|c| ≤ (γ + u)·Σ|ab|, but keep
    // the per-element rounding term tight by folding it into the scale.
    let scale: Vec<f64> = abs
        .iter()
        .zip(&want)
        .map(|(s, w)| (gamma(k) + split_k(&dev, k, u)) * s + u * (1.0 + gamma(k)) * w.abs())
        .collect();
    assert_close(
        &format!("{what} → {}", I::DTYPE),
        &values(&c),
        &want,
        &scale,
        1.0,
    );
}

fn every_layout<I: Float>() {
    for (m, k, n) in [(37, 53, 29), (64, 256, 48), (1, 300, 1)] {
        check::<I>(MatMul::new(m, k, n));
        check::<I>(MatMul::at_b(m, k, n));
        check::<I>(MatMul::a_bt(m, k, n));
    }
}

#[test]
fn f32_products_are_within_the_accumulation_bound_for_every_layout() {
    seeded(|| {
        every_layout::<f32>();
    })
}

#[test]
fn f16_products_accumulate_in_f32_and_round_once() {
    seeded(|| {
        every_layout::<f16>();
    })
}

#[test]
fn bf16_products_accumulate_in_f32_and_round_once() {
    seeded(|| {
        every_layout::<bf16>();
    })
}

#[test]
fn a_long_shared_dimension_stays_within_the_k_dependent_bound() {
    seeded(|| {
        check::<f32>(MatMul::a_bt(8, 4096, 8));
        check::<bf16>(MatMul::new(8, 4096, 8));
    })
}

#[test]
fn gemm_into_scales_and_accumulates_like_blas() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let (m, k, n) = (20, 31, 12);
        let a = data(&mut rng, m * k);
        let b = data(&mut rng, k * n);
        let c0 = data(&mut rng, m * n);
        let (da, db) = (dev.from_slice(&a).unwrap(), dev.from_slice(&b).unwrap());
        let mut c = dev.from_slice(&c0).unwrap();
        let (alpha, beta) = (0.5f32, -1.5f32);
        ops::gemm_into(alpha, &da, &db, MatMul::new(m, k, n), beta, &mut c).unwrap();
        let wide = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let (ab, abs) = reference_gemm(&wide(&a), &wide(&b), m, k, n, false, false);
        let want: Vec<f64> = (0..m * n)
            .map(|i| alpha as f64 * ab[i] + beta as f64 * c0[i] as f64)
            .collect();
        let scale: Vec<f64> = (0..m * n)
            .map(|i| alpha.abs() as f64 * abs[i] + (beta as f64 * c0[i] as f64).abs())
            .collect();
        assert_close("α·A·B + β·C", &values(&c), &want, &scale, gamma(k + 2));

        // β = 0: the old contents are not read, not even a NaN.
        let mut c = dev.from_slice(&vec![f32::NAN; m * n]).unwrap();
        ops::gemm_into(1.0, &da, &db, MatMul::new(m, k, n), 0.0, &mut c).unwrap();
        assert_close("β = 0 over NaN", &values(&c), &ab, &abs, gamma(k));
    })
}

#[test]
fn half_inputs_accumulate_into_an_f32_gradient_buffer() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let (m, k, n) = (16, 64, 24);
        let (ha, a) = operand::<f16>(&mut rng, k * m);
        let (hb, b) = operand::<f16>(&mut rng, k * n);
        let (da, db) = (dev.from_slice(&ha).unwrap(), dev.from_slice(&hb).unwrap());
        let mut grad = dev.alloc::<f32>(m * n).unwrap();
        let shape = MatMul::at_b(m, k, n);
        ops::gemm_into(1.0, &da, &db, shape, 1.0, &mut grad).unwrap();
        ops::gemm_into(1.0, &da, &db, shape, 1.0, &mut grad).unwrap();
        let (once, abs) = reference_gemm(&a, &b, m, k, n, true, false);
        let twice: Vec<f64> = once.iter().map(|v| 2.0 * v).collect();
        let abs2: Vec<f64> = abs.iter().map(|v| 2.0 * v).collect();
        assert_close(
            "two accumulated f16 products",
            &values(&grad),
            &twice,
            &abs2,
            gamma(k + 1),
        );
    })
}

#[test]
fn matmul_allocates_exactly_its_output_and_nothing_else() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let (m, k, n) = (64, 96, 48); // C: 64×48 f32 = 12,288 B; bf16: 6,144 B
        let a = dev.from_slice(&data(&mut rng, m * k)).unwrap();
        let b = dev.from_slice(&data(&mut rng, k * n)).unwrap();
        let start = dev.memory_allocated();
        dev.reset_peak_memory_stats();
        let c = ops::matmul(&a, &b, MatMul::new(m, k, n)).unwrap();
        assert_eq!(dev.memory_allocated(), start + block(&dev, m * n * 4));
        assert_eq!(dev.max_memory_allocated(), start + 12_288);
        drop(c);
        assert_eq!(dev.memory_allocated(), start);
        let (a16, b16) = (
            ops::cast::<f32, bf16>(&a).unwrap(),
            ops::cast::<f32, bf16>(&b).unwrap(),
        );
        let start = dev.memory_allocated();
        let c = ops::matmul(&a16, &b16, MatMul::new(m, k, n)).unwrap();
        assert_eq!(dev.memory_allocated() - start, 6_144);
        drop(c);
        assert_eq!(dev.memory_allocated(), start);
    })
}

#[test]
fn an_empty_shared_dimension_gives_zeros() {
    let dev = gpumem::testing::device();
    let a = dev.alloc::<f32>(0).unwrap();
    let b = dev.alloc::<f32>(0).unwrap();
    let c = ops::matmul(&a, &b, MatMul::new(3, 0, 2)).unwrap();
    assert_eq!(c.to_vec().unwrap(), [0.0; 6]);
}

#[test]
fn wrong_shapes_and_unsupported_types_are_errors() {
    let dev = gpumem::testing::device();
    let a = dev.from_slice(&[1.0f32; 6]).unwrap();
    let b = dev.from_slice(&[1.0f32; 6]).unwrap();
    let err = ops::matmul(&a, &b, MatMul::new(2, 3, 3)).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { op: "matmul", .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("B [3×3] needs 9 elements"),
        "{err}"
    );

    let h = ops::cast::<f32, f16>(&a).unwrap();
    let mut out = dev.alloc::<bf16>(4).unwrap();
    let err = ops::gemm_into(1.0, &h, &h, MatMul::a_bt(2, 3, 2), 0.0, &mut out).unwrap_err();
    assert!(
        err.to_string().contains("f16 inputs can give f32 or f16"),
        "{err}"
    );

    let mut c = dev.from_slice(&[0.0f32; 4]).unwrap();
    let alias = c.to(&dev).unwrap();
    let sq = MatMul::new(2, 2, 2);
    let err = ops::gemm_into(1.0, &alias, &alias, sq, 0.0, &mut c).unwrap_err();
    assert!(err.to_string().contains("shares memory"), "{err}");
}
