//! Shared by the `ops_*` tests: fresh random data, f64 references, comparisons that fail on NaN.
#![allow(dead_code)] // each test binary uses a different part of this module

use gpumem::Device;
use gpumem::allocator::round_size;
use gpumem::ops::XorShift;

/// f32's unit roundoff, 2^-24.
pub const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// The tests' generator and seed loop: one helper for every randomized test (see
/// `gpumem::testing`: `GPUMEM_TEST_SEED` replays a seed, `GPUMEM_TEST_SEEDS` sweeps a range).
pub use gpumem::testing::{rng, seeded};

/// `n` values with magnitudes in [0.5, 2) and random signs: never zero, never subnormal.
pub fn data(rng: &mut XorShift, n: usize) -> Vec<f32> {
    rng.nonzero_vec(n, 0.5, 2.0)
}

/// Checks `|got[i] − want[i]| ≤ tol · scale[i]` for every i. The comparison is written so that a
/// NaN anywhere (in `got`, `want` or the bound) fails.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], scale: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    assert_eq!(scale.len(), want.len(), "{what}: scale length");
    let mut worst = 0f64;
    for i in 0..want.len() {
        let err = (got[i] - want[i]).abs();
        let bound = tol * scale[i];
        assert!(
            err <= bound,
            "{what}[{i}]: got {}, want {} (error {err:e}, bound {bound:e} = {tol:e} × {:e})",
            got[i],
            want[i],
            scale[i]
        );
        if scale[i] > 0.0 {
            worst = worst.max(err / scale[i]);
        }
    }
    eprintln!("{what}: worst error/scale {worst:e} (tolerance {tol:e})");
}

/// [`assert_close`] relative to the reference itself: `|got − want| ≤ tol · |want|`.
pub fn assert_relative(what: &str, got: &[f64], want: &[f64], tol: f64) {
    let scale: Vec<f64> = want.iter().map(|w| w.abs()).collect();
    assert_close(what, got, want, &scale, tol);
}

/// Normwise: `|got[i] − want[i]| ≤ tol · max|want|` (for gradients, whose elements may cancel).
pub fn assert_normwise(what: &str, got: &[f64], want: &[f64], tol: f64) {
    let max = want.iter().fold(0f64, |m, w| m.max(w.abs()));
    assert!(max > 0.0, "{what}: the reference is all zeros");
    assert_close(what, got, want, &vec![max; want.len()], tol);
}

/// f32s as f64s.
pub fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The block the allocator gives a request of `bytes` on `dev` (its rounding rules).
pub fn block(dev: &Device, bytes: usize) -> u64 {
    round_size(bytes, &dev.allocator().config()) as u64
}

/// Row-major `op(A)·op(B)` in f64 and, per element, `Σ_k |a_ik·b_kj|` (the scale of its rounding
/// error bound).
pub fn reference_gemm(
    a: &[f64],
    b: &[f64],
    m: usize,
    k: usize,
    n: usize,
    transpose_a: bool,
    transpose_b: bool,
) -> (Vec<f64>, Vec<f64>) {
    let at = |i: usize, p: usize| {
        if transpose_a {
            a[p * m + i]
        } else {
            a[i * k + p]
        }
    };
    let bt = |p: usize, j: usize| {
        if transpose_b {
            b[j * k + p]
        } else {
            b[p * n + j]
        }
    };
    let mut c = vec![0f64; m * n];
    let mut s = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                let t = at(i, p) * bt(p, j);
                c[i * n + j] += t;
                s[i * n + j] += t.abs();
            }
        }
    }
    (c, s)
}
