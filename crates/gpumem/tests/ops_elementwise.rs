//! Element-wise ops and reductions against f64 references computed here, on whichever device
//! `GPUMEM_DEVICE` names: every result within its rounding bound (f32: a few 2^-24, f16: 2^-11,
//! bf16: 2^-8, per element), NaN never passing, and the memory each op takes exactly as the
//! allocator's rules say.

mod ops_support;

use gpumem::ops::{self, DType, Float};
use gpumem::{Error, bf16, f16};
use ops_support::{U32, assert_close, assert_relative, block, data, rng, seeded, widen};

/// The values of a buffer as f64.
fn values<T: Float>(buf: &gpumem::Buffer<T>) -> Vec<f64> {
    buf.to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_f32() as f64)
        .collect()
}

/// Host data rounded to T, and the rounded values as f64 (what the device really holds).
fn rounded<T: Float>(v: &[f32]) -> (Vec<T>, Vec<f64>) {
    let t: Vec<T> = v.iter().map(|&x| T::from_f32(x)).collect();
    let f = t.iter().map(|x| x.to_f32() as f64).collect();
    (t, f)
}

fn scale_within_one_rounding<T: Float>() {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let n = 10_007;
    let (host, x) = rounded::<T>(&data(&mut rng, n));
    let s = rng.uniform(0.3, 3.0);
    let mut buf = dev.from_slice(&host).unwrap();
    ops::scale(&mut buf, s).unwrap();
    let want: Vec<f64> = x.iter().map(|v| v * s as f64).collect();
    let tol = T::DTYPE.unit_roundoff() + 2.0 * U32;
    assert_relative(&format!("scale {}", T::DTYPE), &values(&buf), &want, tol);
}

#[test]
fn scale_is_within_one_rounding_of_the_exact_product() {
    seeded(|| {
        scale_within_one_rounding::<f32>();
        scale_within_one_rounding::<f16>();
        scale_within_one_rounding::<bf16>();
    })
}

fn axpy_within_bound<X: Float, Y: Float>() {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let n = 4099;
    let (hx, x) = rounded::<X>(&data(&mut rng, n));
    let (hy, y) = rounded::<Y>(&data(&mut rng, n));
    let a = rng.uniform(-2.0, 2.0);
    let xb = dev.from_slice(&hx).unwrap();
    let mut yb = dev.from_slice(&hy).unwrap();
    ops::axpy(a, &xb, &mut yb).unwrap();
    let a = a as f64;
    let want: Vec<f64> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
    let scale: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(x, y)| (a * x).abs() + y.abs())
        .collect();
    // Two f32 roundings (product, then sum: never fused), then one to Y.
    let tol = if Y::DTYPE == DType::F32 {
        2.0 * U32 * (1.0 + U32)
    } else {
        Y::DTYPE.unit_roundoff() + 3.0 * U32
    };
    let what = format!("axpy {}→{}", X::DTYPE, Y::DTYPE);
    assert_close(&what, &values(&yb), &want, &scale, tol);
}

#[test]
fn axpy_rounds_product_and_sum_separately_for_every_type_pair() {
    seeded(|| {
        axpy_within_bound::<f32, f32>();
        axpy_within_bound::<f16, f32>();
        axpy_within_bound::<bf16, f32>();
        axpy_within_bound::<f32, f16>();
        axpy_within_bound::<bf16, bf16>();
    })
}

#[test]
fn axpy_of_a_buffer_into_itself_doubles_it() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let host = data(&mut rng, 1000);
        let mut y = dev.from_slice(&host).unwrap();
        let same = y.to(&dev).unwrap();
        assert!(same.shares_memory_with(&y));
        ops::axpy(1.0, &same, &mut y).unwrap();
        let want: Vec<f32> = host.iter().map(|v| v * 2.0).collect();
        assert_eq!(y.to_vec().unwrap(), want);
    })
}

fn relu_exact<T: Float>() {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let mut host = data(&mut rng, 3001);
    host[7] = f32::NAN;
    host[8] = -0.0;
    host[9] = f32::NEG_INFINITY;
    host[10] = f32::INFINITY;
    let (h, _) = rounded::<T>(&host);
    let x = dev.from_slice(&h).unwrap();
    let y = ops::relu(&x).unwrap().to_vec().unwrap();
    for (i, (&out, &inp)) in y.iter().zip(&h).enumerate() {
        let v = inp.to_f32();
        if v.is_nan() {
            assert!(
                out.to_f32().is_nan(),
                "relu({}) at {i}: NaN must pass",
                T::DTYPE
            );
        } else {
            let want = T::from_f32(if v > 0.0 { v } else { 0.0 });
            assert_eq!(
                out.to_f32().to_bits(),
                want.to_f32().to_bits(),
                "at {i}: relu({v})"
            );
        }
    }
}

#[test]
fn relu_is_exact_passes_nan_and_clears_negative_zero() {
    seeded(|| {
        relu_exact::<f32>();
        relu_exact::<f16>();
        relu_exact::<bf16>();
    })
}

#[test]
fn relu_backward_passes_the_gradient_where_the_output_is_positive() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let x = dev.from_slice(&data(&mut rng, 2048)).unwrap();
        let out = ops::relu(&x).unwrap();
        let g = data(&mut rng, 2048);
        let grad = dev.from_slice(&g).unwrap();
        let dx = ops::relu_backward(&grad, &out).unwrap().to_vec().unwrap();
        let o = out.to_vec().unwrap();
        for i in 0..g.len() {
            let want = if o[i] > 0.0 { g[i] } else { 0.0 };
            assert_eq!(dx[i].to_bits(), want.to_bits(), "at {i}");
        }
        assert!(o.contains(&0.0) && o.iter().any(|&v| v > 0.0));
    })
}

fn cast_like_half_crate<D: Float>() {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let host = data(&mut rng, 5000);
    let x = dev.from_slice(&host).unwrap();
    let y = ops::cast::<f32, D>(&x).unwrap();
    let got = y.to_vec().unwrap();
    for (i, (&g, &v)) in got.iter().zip(&host).enumerate() {
        let want = D::from_f32(v);
        assert_eq!(
            g.to_f32().to_bits(),
            want.to_f32().to_bits(),
            "f32→{} at {i}: {v}",
            D::DTYPE
        );
    }
    let what = format!("cast f32→{}", D::DTYPE);
    assert_relative(&what, &values(&y), &widen(&host), D::DTYPE.unit_roundoff());
    // And back: widening is exact.
    let back = ops::cast::<D, f32>(&y).unwrap();
    assert_eq!(values(&back), values(&y));
}

#[test]
fn casts_round_to_nearest_even_exactly_as_the_half_crate() {
    seeded(|| {
        cast_like_half_crate::<f16>();
        cast_like_half_crate::<bf16>();
        cast_like_half_crate::<f32>();
    })
}

#[test]
fn f16_overflows_where_bf16_keeps_the_range() {
    let dev = gpumem::testing::device();
    let host = [70_000.0f32, -1.0e6, 65_504.0, 1.0e-8, 3.0e38, f32::NAN];
    let x = dev.from_slice(&host).unwrap();
    let h = ops::cast::<f32, f16>(&x).unwrap().to_vec().unwrap();
    assert_eq!(h[0], f16::INFINITY);
    assert_eq!(h[1], f16::NEG_INFINITY);
    assert_eq!(h[2], f16::MAX);
    assert_eq!(
        h[3],
        f16::ZERO,
        "1e-8 is below f16's smallest subnormal: it flushes to 0"
    );
    assert_eq!(h[4], f16::INFINITY);
    assert!(h[5].is_nan());
    let b = ops::cast::<f32, bf16>(&x).unwrap().to_vec().unwrap();
    assert!(
        b[..5].iter().all(|v| v.is_finite() && *v != bf16::ZERO),
        "{b:?}"
    );
    assert!(b[5].is_nan());
}

#[test]
fn sum_accumulates_in_f64_and_costs_one_small_block_and_one_copy() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let host = data(&mut rng, 100_003);
        let x = dev.from_slice(&host).unwrap();
        let start = dev.memory_allocated();
        dev.reset_peak_memory_stats();
        dev.reset_transfer_stats();
        let got = ops::sum(&x).unwrap() as f64;
        let want: f64 = host.iter().map(|&v| v as f64).sum();
        let abs: f64 = host.iter().map(|&v| (v as f64).abs()).sum();
        assert_close("sum", &[got], &[want], &[abs], 2.0 * U32);
        assert_eq!(dev.memory_allocated(), start);
        assert_eq!(
            dev.max_memory_allocated(),
            start + 512,
            "one f64 result block"
        );
        let t = dev.transfer_stats();
        assert_eq!((t.device_to_host.copies, t.device_to_host.bytes), (1, 8));
        assert_eq!(t.host_to_device.copies, 0);
    })
}

#[test]
fn sum_of_half_buffers_is_exact_before_the_final_rounding() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let (h, x) = rounded::<bf16>(&data(&mut rng, 50_000));
        let buf = dev.from_slice(&h).unwrap();
        let got = ops::sum(&buf).unwrap() as f64;
        let want: f64 = x.iter().sum();
        let abs: f64 = x.iter().map(|v| v.abs()).sum();
        assert_close("sum bf16", &[got], &[want], &[abs], 2.0 * U32);
    })
}

fn add_bias_within_bound<T: Float>() {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let (rows, cols) = (33, 70);
    let (h, x) = rounded::<T>(&data(&mut rng, rows * cols));
    let b = data(&mut rng, cols);
    let mut buf = dev.from_slice(&h).unwrap();
    let bias = dev.from_slice(&b).unwrap();
    ops::add_bias(&mut buf, &bias, rows, cols).unwrap();
    let want: Vec<f64> = (0..rows * cols)
        .map(|i| x[i] + b[i % cols] as f64)
        .collect();
    let scale: Vec<f64> = (0..rows * cols)
        .map(|i| x[i].abs() + (b[i % cols] as f64).abs())
        .collect();
    let tol = if T::DTYPE == DType::F32 {
        U32
    } else {
        T::DTYPE.unit_roundoff() + 2.0 * U32
    };
    let what = format!("add_bias {}", T::DTYPE);
    assert_close(&what, &values(&buf), &want, &scale, tol);
}

#[test]
fn add_bias_adds_one_f32_bias_per_column() {
    seeded(|| {
        add_bias_within_bound::<f32>();
        add_bias_within_bound::<f16>();
        add_bias_within_bound::<bf16>();
    })
}

#[test]
fn col_sum_into_overwrites_or_accumulates() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let (rows, cols) = (257, 19);
        let host = data(&mut rng, rows * cols);
        let x = dev.from_slice(&host).unwrap();
        let start = data(&mut rng, cols);
        let mut out = dev.from_slice(&start).unwrap();
        let col = |c: usize| -> (f64, f64) {
            (0..rows).fold((0.0, 0.0), |(s, a), r| {
                let v = host[r * cols + c] as f64;
                (s + v, a + v.abs())
            })
        };
        ops::col_sum_into(&x, rows, cols, &mut out, true).unwrap();
        let want: Vec<f64> = (0..cols).map(|c| start[c] as f64 + col(c).0).collect();
        let scale: Vec<f64> = (0..cols)
            .map(|c| (start[c] as f64).abs() + col(c).1)
            .collect();
        assert_close(
            "col_sum accumulate",
            &values(&out),
            &want,
            &scale,
            2.0 * U32,
        );
        ops::col_sum_into(&x, rows, cols, &mut out, false).unwrap();
        let want: Vec<f64> = (0..cols).map(|c| col(c).0).collect();
        let scale: Vec<f64> = (0..cols).map(|c| col(c).1).collect();
        assert_close("col_sum overwrite", &values(&out), &want, &scale, 2.0 * U32);
    })
}

fn unscale_exact<T: Float>() {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let (h, x) = rounded::<T>(&data(&mut rng, 7777));
    let mut buf = dev.from_slice(&h).unwrap();
    let inv = 1.0 / 1024.0;
    assert!(!ops::unscale_and_check(&mut buf, inv).unwrap());
    let want: Vec<f64> = x.iter().map(|v| v / 1024.0).collect();
    assert_eq!(values(&buf), want, "a power of two unscales exactly");
}

#[test]
fn unscale_by_a_power_of_two_is_exact_and_finds_nothing_in_finite_data() {
    seeded(|| {
        unscale_exact::<f32>();
        unscale_exact::<f16>();
        unscale_exact::<bf16>();
    })
}

#[test]
fn unscale_and_check_finds_a_single_inf_or_nan_anywhere() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let n = 100_001;
        for (index, bad) in [
            (n - 1, f32::NAN),
            (0, f32::INFINITY),
            (n / 2, f32::NEG_INFINITY),
        ] {
            let mut host = data(&mut rng, n);
            host[index] = bad;
            let mut buf = dev.from_slice(&host).unwrap();
            assert!(
                ops::unscale_and_check(&mut buf, 0.5).unwrap(),
                "{bad} at {index} not found"
            );
        }
        // f16 overflow in a gradient is what loss scaling must catch.
        let mut grads = dev
            .from_slice(&[f16::from_f32(1.0), f16::INFINITY])
            .unwrap();
        assert!(ops::unscale_and_check(&mut grads, 1.0).unwrap());
        let mut fine = dev.from_slice(&[1.0f32, 2.0]).unwrap();
        assert!(!ops::unscale_and_check(&mut fine, 1.0).unwrap());
        assert_eq!(fine.to_vec().unwrap(), [1.0, 2.0]);
    })
}

#[test]
fn mse_loss_and_its_gradient_match_the_f64_reference() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let n = 6000;
        let p = data(&mut rng, n);
        let t = data(&mut rng, n);
        let pred = dev.from_slice(&p).unwrap();
        let target = dev.from_slice(&t).unwrap();
        let loss = ops::mse_loss(&pred, &target).unwrap() as f64;
        let want: f64 = p
            .iter()
            .zip(&t)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum::<f64>()
            / n as f64;
        assert_relative("mse_loss", &[loss], &[want], 2.0 * U32);
        let k = 4.0;
        let g = ops::mse_loss_backward(&pred, &target, 1.0 / k).unwrap();
        let want: Vec<f64> = p
            .iter()
            .zip(&t)
            .map(|(a, b)| 2.0 / k as f64 / n as f64 * (*a as f64 - *b as f64))
            .collect();
        assert_relative("mse_loss_backward", &values(&g), &want, 3.5 * U32);
    })
}

#[test]
fn zero_clears_in_place_without_allocating() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let mut buf = dev.from_slice(&data(&mut rng, 999)).unwrap();
        let start = dev.memory_allocated();
        dev.reset_peak_memory_stats();
        ops::zero(&mut buf).unwrap();
        ops::scale(&mut buf, 3.0).unwrap();
        assert!(buf.to_vec().unwrap().iter().all(|&v| v == 0.0));
        assert_eq!(
            dev.max_memory_allocated(),
            start,
            "in-place ops allocate nothing"
        );
    })
}

#[test]
fn an_op_allocates_exactly_its_output_block_and_returns_it_on_drop() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let n = 3000; // 12,000 B of f32: a 12,288 B block; 6,000 B of f16: 6,144 B
        let x = dev.from_slice(&data(&mut rng, n)).unwrap();
        let start = dev.memory_allocated();
        let y = ops::relu(&x).unwrap();
        assert_eq!(y.block_bytes() as u64, block(&dev, 12_000));
        assert_eq!(dev.memory_allocated(), start + 12_288);
        let h = ops::cast::<f32, f16>(&x).unwrap();
        assert_eq!(dev.memory_allocated(), start + 12_288 + 6_144);
        drop((y, h));
        assert_eq!(dev.memory_allocated(), start);
    })
}

#[test]
fn mismatched_lengths_are_errors_that_name_the_op() {
    let dev = gpumem::testing::device();
    let x = dev.from_slice(&[1.0f32, 2.0, 3.0]).unwrap();
    let mut y = dev.from_slice(&[1.0f32, 2.0]).unwrap();
    let err = ops::axpy(1.0, &x, &mut y).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { op: "axpy", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("needs 2 elements"), "{err}");
    let err = ops::add_bias(&mut y, &x, 1, 2).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { op: "add_bias", .. }),
        "{err}"
    );
    let err = ops::relu_backward(&x, &y).unwrap_err();
    assert!(err.to_string().starts_with("relu_backward on "), "{err}");
}

#[test]
fn buffers_of_two_devices_are_a_device_mismatch() {
    let dev = gpumem::testing::device();
    if !dev.is_cuda() {
        return; // one device only
    }
    let x = gpumem::Device::cpu().from_slice(&[1.0f32]).unwrap();
    let mut y = dev.from_slice(&[1.0f32]).unwrap();
    let err = ops::axpy(1.0, &x, &mut y).unwrap_err();
    assert!(
        matches!(err, Error::DeviceMismatch { op: "axpy", .. }),
        "{err}"
    );
}
