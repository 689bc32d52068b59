//! Graded tests for chapter 6: mixed precision.

use ch06_mixed_precision::{DeviceBatch, GradScaler, Momentum, mixed_precision_step, round_trip};
use ch06_predict::{MixedMemory, PREDICT_ROWS, PREDICT_SIZES, predict_memory};
use gpumem::ops::{DType, Float, Linear, Mlp, MlpGrads, XorShift};
use gpumem::testing::Prediction;
use gpumem::testing::assert_close;
use gpumem::testing::{rng, seeded};
use gpumem::{Device, bf16, f16};

/// `v` rounded to `T` and back: values that `T` holds exactly.
fn rounded<T: Float>(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&a| T::from_f32(a).to_f32()).collect()
}

/// Every gradient (weights and biases, layer by layer) as one f64 vector.
fn flat(grads: &MlpGrads) -> anyhow::Result<Vec<f64>> {
    Ok(grads.to_vec()?.into_iter().map(f64::from).collect())
}

/// A model of `(in, out)` layers with the given parameters (copied to the device).
fn model_from(dev: &Device, layers: &[(usize, usize, Vec<f32>, Vec<f32>)]) -> anyhow::Result<Mlp> {
    let mut out = Vec::new();
    for (i, o, w, b) in layers {
        out.push(Linear::from_host(dev, w, b, *i, *o)?);
    }
    Ok(Mlp { layers: out })
}

// ---- round_trip ----

#[test]
fn round_trip_f16_overflows_to_inf_and_flushes_tiny_values_to_zero() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let back = round_trip::<f16>(&dev, &[70000.0, 65504.0, 1e-8, 1e-4, 1.001, -70000.0])?;
    assert_eq!(
        back[0],
        f32::INFINITY,
        "70000 is above f16's largest, 65504"
    );
    assert_eq!(back[1], 65504.0);
    assert_eq!(
        back[2], 0.0,
        "1e-8 is below half of f16's smallest step, 2^-24"
    );
    assert_eq!(back[3], f16::from_f32(1e-4).to_f32());
    assert_eq!(back[4], 1.000_976_6, "11 significant bits: 1 + 2^-10");
    assert_eq!(back[5], f32::NEG_INFINITY);
    assert_eq!(dev.memory_allocated(), 0, "every buffer was freed");
    Ok(())
}

#[test]
fn round_trip_bf16_keeps_the_range_with_three_significant_digits() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let values = [70000.0, 1e-8, 1e30, 1.001, 123.456, 0.1];
    let back = round_trip::<bf16>(&dev, &values)?;
    assert_eq!(back[0], 70144.0, "a multiple of 512 near 70000, not inf");
    assert_eq!(back[1], bf16::from_f32(1e-8).to_f32());
    assert_eq!(back[3], 1.0, "8 significant bits: 1.001 rounds to 1");
    assert_eq!(back[4], 123.5, "3 significant digits");
    for (b, v) in back.iter().zip(values) {
        let err = ((b - v) / v).abs();
        assert!(
            err <= 1.0 / 256.0,
            "{v} came back as {b}: relative error {err}"
        );
    }
    Ok(())
}

#[test]
fn round_trip_casts_on_the_device_through_one_half_buffer() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let values = rng().nonzero_vec(1024, 1e-3, 1e3);
        let back = round_trip::<f16>(&dev, &values)?;
        assert_eq!(back, rounded::<f16>(&values));
        let stats = dev.transfer_stats();
        assert_eq!(
            (stats.host_to_device.copies, stats.host_to_device.bytes),
            (1, 4096),
            "the f32 values go up once"
        );
        assert_eq!(
            (stats.device_to_host.copies, stats.device_to_host.bytes),
            (1, 4096),
            "the f32 result comes down once"
        );
        assert_eq!(
            dev.memory_stats().get("allocated_bytes.all.allocated"),
            Some(4096 + 2048 + 4096),
            "blocks allocated in all: the f32 upload, the f16 copy, the f32 result"
        );
        assert_eq!(dev.memory_allocated(), 0);
        Ok(())
    })
}

// ---- GradScaler ----

/// What a scripted step's gradients hold.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Grads {
    Clean,
    Inf,
    NaN,
}

/// Fills the one-layer gradients of a 4→4 model: 1.0 everywhere, with one inf or NaN.
fn fill(grads: &mut MlpGrads, kind: Grads) -> anyhow::Result<()> {
    let g = &mut grads.layers[0];
    let mut weight = vec![1.0f32; 16];
    let mut bias = vec![1.0f32; 4];
    match kind {
        Grads::Clean => {}
        Grads::Inf => weight[5] = f32::INFINITY,
        Grads::NaN => bias[2] = f32::NAN,
    }
    g.weight.copy_from_slice(&weight)?;
    g.bias.copy_from_slice(&bias)?;
    Ok(())
}

/// Runs `steps` scripted steps, each `(kind, repeats, scale after each of them)`, checking after
/// every step the scale and whether the optimizer ran, and at the end of each line the count of
/// clean steps. Returns the number of optimizer calls.
fn run_script(
    scaler: &mut GradScaler,
    grads: &mut MlpGrads,
    script: &[(Grads, u32, f32, u32)],
) -> anyhow::Result<u32> {
    let mut calls = 0;
    let mut step = 0;
    for &(kind, repeats, scale, tracker) in script {
        for _ in 0..repeats {
            step += 1;
            fill(grads, kind)?;
            let mut ran = false;
            let stepped = scaler.step(grads, |_| {
                ran = true;
                Ok(())
            })?;
            scaler.update();
            calls += u32::from(ran);
            assert_eq!(stepped, ran, "step {step}: step() says whether it ran");
            assert_eq!(
                ran,
                kind == Grads::Clean,
                "step {step} ({kind:?}): the optimizer runs only on finite gradients"
            );
            assert_eq!(scaler.scale, scale, "step {step} ({kind:?}): the scale");
        }
        assert_eq!(
            scaler.growth_tracker, tracker,
            "clean steps in a row after step {step}"
        );
    }
    Ok(calls)
}

/// Gradients of a 4→4 model (16 weights, 4 biases).
fn small_grads(dev: &Device) -> anyhow::Result<MlpGrads> {
    let model = Mlp::new(dev, &[4, 4], &mut rng())?;
    Ok(model.zero_grads()?)
}

#[test]
fn grad_scaler_starts_at_2_16_and_doubles_after_2000_clean_steps() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut grads = small_grads(&dev)?;
        let mut scaler = GradScaler::new();
        assert_eq!(scaler.scale, 65536.0);
        let calls = run_script(
            &mut scaler,
            &mut grads,
            &[
                (Grads::Clean, 1999, 65536.0, 1999),
                (Grads::Clean, 1, 131072.0, 0),
                (Grads::Clean, 1999, 131072.0, 1999),
                (Grads::Clean, 1, 262144.0, 0),
            ],
        )?;
        assert_eq!(calls, 4000);
        assert_eq!(
            dev.memory_allocated(),
            grads.block_bytes() as u64,
            "a step leaves nothing behind but the gradients"
        );
        Ok(())
    })
}

#[test]
fn grad_scaler_halves_skips_and_restarts_the_count_on_inf_or_nan() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut grads = small_grads(&dev)?;
        let mut scaler = GradScaler::new();
        let calls = run_script(
            &mut scaler,
            &mut grads,
            &[
                (Grads::Clean, 1000, 65536.0, 1000),
                (Grads::Inf, 1, 32768.0, 0),
                // Without the restart, the scale would grow 1000 steps from here.
                (Grads::Clean, 1999, 32768.0, 1999),
                (Grads::Clean, 1, 65536.0, 0),
                (Grads::NaN, 1, 32768.0, 0),
                (Grads::Inf, 1, 16384.0, 0),
                (Grads::Clean, 1999, 16384.0, 1999),
                (Grads::Clean, 1, 32768.0, 0),
            ],
        )?;
        assert_eq!(calls, 1000 + 2000 + 2000);
        Ok(())
    })
}

#[test]
fn grad_scaler_unscales_the_gradients_before_the_optimizer_sees_them() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut grads = small_grads(&dev)?;
        let values: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) * 0.25).collect();
        let scaled: Vec<f32> = values.iter().map(|v| v * 65536.0).collect();
        grads.layers[0].weight.copy_from_slice(&scaled)?;
        let mut scaler = GradScaler::new();
        let before = dev.memory_allocated();
        let mut seen = Vec::new();
        let stepped = scaler.step(&mut grads, |g| {
            seen = g.layers[0].weight.to_vec()?;
            Ok(())
        })?;
        assert!(stepped);
        assert_eq!(seen, values, "divided by 2^16 exactly");
        assert_eq!(
            grads.layers[0].weight.to_vec()?,
            values,
            "unscaled in place"
        );
        assert_eq!(
            dev.memory_allocated(),
            before,
            "unscaling allocates nothing that lasts"
        );
        Ok(())
    })
}

#[test]
fn grad_scaler_step_after_unscale_does_not_unscale_twice() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut grads = small_grads(&dev)?;
        fill(&mut grads, Grads::Clean)?;
        let mut scaler = GradScaler::new();
        // As before gradient clipping: unscale_, then step.
        assert!(!scaler.unscale(&mut grads)?);
        let mut seen = Vec::new();
        assert!(scaler.step(&mut grads, |g| {
            seen = g.layers[0].bias.to_vec()?;
            Ok(())
        })?);
        assert_eq!(seen, vec![1.0 / 65536.0; 4], "divided once, not twice");
        scaler.update();
        assert_eq!(scaler.found_inf, None, "update forgets this step's check");
        assert_eq!(scaler.growth_tracker, 1);
        Ok(())
    })
}

#[test]
fn grad_scaler_never_grows_the_scale_to_infinity() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut grads = small_grads(&dev)?;
        let top = 2f32.powi(127);
        let mut scaler = GradScaler::with_settings(top, 2.0, 0.5, 1);
        let calls = run_script(&mut scaler, &mut grads, &[(Grads::Clean, 3, top, 0)])?;
        assert_eq!(calls, 3);
        Ok(())
    })
}

// ---- mixed_precision_step ----

/// A 64 → 128 → 16 model whose weights `T` holds exactly and whose hidden biases are zero, so
/// that a pass in `T` and a pass in f32 agree on every ReLU (rounding never changes a sign).
fn exact_model<T: Float>(dev: &Device, rng: &mut XorShift) -> anyhow::Result<Mlp> {
    let w0 = rounded::<T>(&rng.uniform_vec(128 * 64, -0.125, 0.125));
    let w1 = rounded::<T>(&rng.uniform_vec(16 * 128, -0.088, 0.088));
    let b1 = rounded::<T>(&rng.uniform_vec(16, -0.088, 0.088));
    model_from(dev, &[(64, 128, w0, vec![0.0; 128]), (128, 16, w1, b1)])
}

/// A copy of `model`.
fn copy_of(dev: &Device, model: &Mlp) -> anyhow::Result<Mlp> {
    let mut layers = Vec::new();
    for l in &model.layers {
        layers.push((
            l.in_features,
            l.out_features,
            l.weight.to_vec()?,
            l.bias.to_vec()?,
        ));
    }
    model_from(dev, &layers)
}

/// What one step on a copy of a model did.
struct Step {
    /// Whether the optimizer ran.
    stepped: bool,
    /// The gradients the step left (unscaled).
    grads: Vec<f64>,
    /// The parameters before the step.
    before: Vec<f32>,
    /// The parameters after the step.
    after: Vec<f32>,
}

/// One `mixed_precision_step` in `T` on a copy of `model`.
fn step_in<T: Float>(
    dev: &Device,
    model: &Mlp,
    x: &[f32],
    t: &[f32],
    rows: usize,
    scaler: &mut GradScaler,
) -> anyhow::Result<Step> {
    let mut model = copy_of(dev, model)?;
    let mut grads = model.zero_grads()?;
    let mut optimizer = Momentum::new(&model, 0.1, 0.9)?;
    let batch = DeviceBatch::<T>::from_host(dev, x, t, rows)?;
    let before = model.parameters_to_vec()?;
    let start = dev.memory_allocated();
    let outcome = mixed_precision_step(&mut model, &mut grads, &mut optimizer, scaler, &batch)?;
    assert_eq!(
        dev.memory_allocated(),
        start,
        "{}: the step freed its activations",
        T::DTYPE
    );
    assert!(outcome.loss.is_finite(), "the loss is {}", outcome.loss);
    Ok(Step {
        stepped: outcome.stepped,
        grads: flat(&grads)?,
        before,
        after: model.parameters_to_vec()?,
    })
}

/// The model's parameters on the host, layer by layer: (in, out, weight [out×in], bias), in f64.
type HostLayer = (usize, usize, Vec<f64>, Vec<f64>);

fn host_layers(model: &Mlp) -> anyhow::Result<Vec<HostLayer>> {
    let mut layers = Vec::new();
    for l in &model.layers {
        let wide = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
        layers.push((
            l.in_features,
            l.out_features,
            wide(l.weight.to_vec()?),
            wide(l.bias.to_vec()?),
        ));
    }
    Ok(layers)
}

/// `rows` inputs for `exact_model`, each row drawn again until every first-layer pre-activation
/// `z = x·W0ᵀ` is at least `T`'s smallest normal in magnitude. Then rounding `z` to `T` keeps its
/// sign (a `z` that rounds to 0 in `T` but not in f32 turns a ReLU off in one pass only: its whole
/// row of W0's gradient then differs, the failure of seed 7694720226940991941) and errs by at
/// most `T`'s unit roundoff relative to `z`. A row is drawn again with probability about 2%
/// (f16: 128 values of `z` of spread about 0.3, each below 2^-14 with probability 1.6e-4).
fn inputs_keeping_every_relu<T: Float>(
    model: &Mlp,
    rng: &mut XorShift,
    rows: usize,
) -> anyhow::Result<Vec<f32>> {
    let (inputs, hidden, w0, _) = &host_layers(model)?[0];
    let smallest = T::DTYPE.min_positive_normal();
    let mut x = Vec::with_capacity(rows * inputs);
    for _ in 0..rows {
        let row = (0..100)
            .map(|_| rounded::<T>(&rng.nonzero_vec(*inputs, 0.1, 1.0)))
            .find(|row| {
                (0..*hidden).all(|o| {
                    let z: f64 = (0..*inputs)
                        .map(|i| row[i] as f64 * w0[o * inputs + i])
                        .sum();
                    z.abs() >= smallest
                })
            })
            .ok_or_else(|| anyhow::anyhow!("100 draws of a row all had a pre-activation near 0"))?;
        x.extend(row);
    }
    Ok(x)
}

/// How far the gradients of one `mixed_precision_step` in `T` (loss scale `scale`) and of one in
/// f32 (scale 1) can be apart, gradient by gradient, in the order of `MlpGrads::to_vec`: a
/// first-order bound of the rounding errors of each pass against the exact step, added.
///
/// With `u` the pass's unit roundoff (`T`'s, or 2^-24 for f32), `v` = 2^-24 (the f32 arithmetic
/// inside every op), `γ(n)` = n·v (a sum of n terms in f32) and `η` half of `T`'s smallest
/// subnormal (absolute error of a rounding to a subnormal), for the 2-layer model and a batch
/// whose pre-activations keep their signs (`inputs_keeping_every_relu`), every rounding of the
/// pass is counted where it happens:
///
/// - `z = x·W0ᵀ`, rounded to `T`: |Δz| ≤ u|z| + γ(in)·Σ|x||W0|; `h = relu(z)`, the same mask.
/// - `y = h·W1ᵀ`, rounded, then `+ b1`, rounded: |Δy| ≤ Σ|Δh||W1| + γ(hidden)·Σ|h||W1| + 2u|y| + 2η.
/// - `g = c·(y − t)` (c = 2·scale/n, a power of two), `y − t` in f32, rounded to `T`:
///   |Δg| ≤ c_1·(|Δy| + v|y − t|) + u|g| + η/scale (c_1 = 2/n: the unscaled gradient).
/// - `dW1 = gᵀh`, `db1 = Σ_rows g` in f32 (products of two `T` values are exact in f32):
///   |ΔdW1| ≤ Σ(|Δg||h| + |g||Δh|) + γ(rows)·Σ|g||h|.
/// - `gh = g·W1`, rounded to `T`, masked: |Δgh| ≤ Σ|Δg||W1| + γ(out)·Σ|g||W1| + u|gh| + η/scale.
/// - `dW0 = ghᵀx`, `db0 = Σ_rows gh`: |ΔdW0| ≤ Σ|Δgh||x| + γ(rows)·Σ|gh||x|.
///
/// Unscaling multiplies by 1/scale, a power of two: exact. The bound is of first order in u; it
/// is widened by 10%, more than the second-order terms can add (at most 6 roundings on a path:
/// (1 + u)^6 − 1 ≤ 6u·(1 + 4u), and u ≤ 2^-8).
fn step_gradient_bound<T: Float>(
    model: &Mlp,
    x: &[f32],
    t: &[f32],
    rows: usize,
    scale: f64,
) -> anyhow::Result<Vec<f64>> {
    let layers = host_layers(model)?;
    let [(inputs, hidden, w0, _), (_, out, w1, b1)] = &layers[..] else {
        anyhow::bail!("the bound is for a model of two layers");
    };
    let (inputs, hidden, out) = (*inputs, *hidden, *out);
    let v = DType::F32.unit_roundoff();
    let gamma = |n: usize| n as f64 * v;
    let n = (rows * out) as f64;
    // Exact values, in f64 (the model's values and the data are exact in T and in f32).
    let x: Vec<f64> = x.iter().map(|&a| a as f64).collect();
    let t: Vec<f64> = t.iter().map(|&a| a as f64).collect();
    let mut z = vec![0.0; rows * hidden];
    let mut z_abs = vec![0.0; rows * hidden];
    for r in 0..rows {
        for o in 0..hidden {
            for i in 0..inputs {
                let p = x[r * inputs + i] * w0[o * inputs + i];
                z[r * hidden + o] += p;
                z_abs[r * hidden + o] += p.abs();
            }
        }
    }
    let h: Vec<f64> = z.iter().map(|&a| a.max(0.0)).collect();
    let mut y = vec![0.0; rows * out];
    let mut y_abs = vec![0.0; rows * out];
    for r in 0..rows {
        for o in 0..out {
            for j in 0..hidden {
                let p = h[r * hidden + j] * w1[o * hidden + j];
                y[r * out + o] += p;
                y_abs[r * out + o] += p.abs();
            }
            y[r * out + o] += b1[o];
        }
    }
    let g: Vec<f64> = y.iter().zip(&t).map(|(y, t)| 2.0 / n * (y - t)).collect();
    let mut gh = vec![0.0; rows * hidden];
    let mut gh_abs = vec![0.0; rows * hidden];
    for r in 0..rows {
        for j in 0..hidden {
            if z[r * hidden + j] > 0.0 {
                for o in 0..out {
                    let p = g[r * out + o] * w1[o * hidden + j];
                    gh[r * hidden + j] += p;
                    gh_abs[r * hidden + j] += p.abs();
                }
            }
        }
    }
    // One pass's error bound for every gradient, for a pass of unit roundoff u and loss scale s.
    let pass = |u: f64, eta: f64, s: f64| -> Vec<f64> {
        let dh: Vec<f64> = (0..rows * hidden)
            .map(|k| {
                if z[k] > 0.0 {
                    u * z[k].abs() + gamma(inputs) * z_abs[k]
                } else {
                    0.0
                }
            })
            .collect();
        let mut dg = vec![0.0; rows * out];
        for r in 0..rows {
            for o in 0..out {
                let k = r * out + o;
                let from_h: f64 = (0..hidden)
                    .map(|j| dh[r * hidden + j] * w1[o * hidden + j].abs())
                    .sum();
                let dy = from_h + gamma(hidden) * y_abs[k] + 2.0 * u * y[k].abs() + 2.0 * eta;
                dg[k] = 2.0 / n * (dy + v * (y[k] - t[k]).abs()) + u * g[k].abs() + eta / s;
            }
        }
        let mut dgh = vec![0.0; rows * hidden];
        for r in 0..rows {
            for j in 0..hidden {
                let k = r * hidden + j;
                if z[k] > 0.0 {
                    let from_g: f64 = (0..out)
                        .map(|o| dg[r * out + o] * w1[o * hidden + j].abs())
                        .sum();
                    dgh[k] = from_g + gamma(out) * gh_abs[k] + u * gh[k].abs() + eta / s;
                }
            }
        }
        let mut bound = Vec::new();
        // Layer 0: dW0 [hidden×inputs], then db0 [hidden].
        for j in 0..hidden {
            for i in 0..inputs {
                bound.push(
                    (0..rows)
                        .map(|r| {
                            let (k, xi) = (r * hidden + j, x[r * inputs + i].abs());
                            dgh[k] * xi + gamma(rows) * gh[k].abs() * xi
                        })
                        .sum(),
                );
            }
        }
        for j in 0..hidden {
            bound.push(
                (0..rows)
                    .map(|r| dgh[r * hidden + j] + gamma(rows) * gh[r * hidden + j].abs())
                    .sum(),
            );
        }
        // Layer 1: dW1 [out×hidden], then db1 [out].
        for o in 0..out {
            for j in 0..hidden {
                bound.push(
                    (0..rows)
                        .map(|r| {
                            let (gk, hk) = (r * out + o, r * hidden + j);
                            dg[gk] * h[hk]
                                + g[gk].abs() * dh[hk]
                                + gamma(rows) * (g[gk] * h[hk]).abs()
                        })
                        .sum(),
                );
            }
        }
        for o in 0..out {
            bound.push(
                (0..rows)
                    .map(|r| dg[r * out + o] + gamma(rows) * g[r * out + o].abs())
                    .sum(),
            );
        }
        bound
    };
    let eta = T::DTYPE.min_positive_normal() * T::DTYPE.unit_roundoff();
    let half = pass(T::DTYPE.unit_roundoff(), eta, scale);
    let single = pass(v, DType::F32.min_positive_normal() * v, 1.0);
    Ok(half
        .iter()
        .zip(&single)
        .map(|(a, b)| 1.1 * (a + b))
        .collect())
}

fn half_step_follows_f32<T: Float>() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let mut rng = rng();
    let model = exact_model::<T>(&dev, &mut rng)?;
    let x = inputs_keeping_every_relu::<T>(&model, &mut rng, 32)?;
    let t = rounded::<T>(&rng.nonzero_vec(32 * 16, 0.1, 1.0));
    let want = step_in::<f32>(
        &dev,
        &model,
        &x,
        &t,
        32,
        &mut GradScaler::with_settings(1.0, 2.0, 0.5, 2000),
    )?;
    let mut scaler = GradScaler::new();
    let scale = f64::from(scaler.scale);
    let Step {
        stepped,
        grads: got,
        before,
        after,
    } = step_in::<T>(&dev, &model, &x, &t, 32, &mut scaler)?;
    assert!(stepped, "{}: no overflow at 2^16 here", T::DTYPE);
    // Same weights, inputs and ReLU masks: what differs is the rounding of each activation and
    // activation gradient to T, each gradient within the bound its own terms give.
    let bound = step_gradient_bound::<T>(&model, &x, &t, 32, scale)?;
    let mut worst = 0f64;
    for (i, ((g, w), b)) in got.iter().zip(&want.grads).zip(&bound).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= *b,
            "{} gradient {i}, unscaled: {g} against f32's {w}: error {err:e} is above its rounding \
             bound {b:e}",
            T::DTYPE
        );
        worst = worst.max(err / b);
    }
    assert_eq!(
        got.len(),
        bound.len(),
        "{}: every gradient compared",
        T::DTYPE
    );
    println!("{}: worst gradient error / its bound: {worst:.3}", T::DTYPE);
    // Momentum's first step is w − lr·g, with g the unscaled gradient.
    let expected: Vec<f32> = before
        .iter()
        .zip(&got)
        .map(|(w, g)| -0.1 * (*g as f32) + w)
        .collect();
    assert_eq!(after, expected, "{}: the optimizer stepped once", T::DTYPE);
    assert_eq!(scaler.growth_tracker, 1, "update() ran");
    Ok(())
}

#[test]
fn mixed_step_in_f16_or_bf16_follows_the_f32_step() -> anyhow::Result<()> {
    seeded(|| {
        half_step_follows_f32::<f16>()?;
        half_step_follows_f32::<bf16>()
    })
}

#[test]
fn mixed_step_skips_overflowing_steps_until_the_scale_fits() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = exact_model::<f16>(&dev, &mut rng)?;
        let x = rounded::<f16>(&rng.nonzero_vec(32 * 64, 0.1, 1.0));
        let t = rounded::<f16>(&rng.nonzero_vec(32 * 16, 0.1, 1.0));
        let mut model16 = copy_of(&dev, &model)?;
        let mut grads = model16.zero_grads()?;
        let mut optimizer = Momentum::new(&model16, 0.1, 0.9)?;
        let batch = DeviceBatch::<f16>::from_host(&dev, &x, &t, 32)?;
        let start = model16.parameters_to_vec()?;
        let mut scaler = GradScaler::with_settings(2f32.powi(40), 2.0, 0.5, 2000);
        let mut skipped = 0;
        loop {
            let outcome = mixed_precision_step(
                &mut model16,
                &mut grads,
                &mut optimizer,
                &mut scaler,
                &batch,
            )?;
            if outcome.stepped {
                break;
            }
            skipped += 1;
            assert_eq!(
                model16.parameters_to_vec()?,
                start,
                "a skipped step changes no weight"
            );
            assert!(
                flat(&optimizer.velocity)?.iter().all(|&v| v == 0.0),
                "a skipped step leaves the optimizer's state alone"
            );
            assert_eq!(
                scaler.scale,
                2f32.powi(40 - skipped),
                "halved at each overflow"
            );
            assert!(skipped < 40, "the scale never came down to where f16 fits");
        }
        assert!(skipped >= 10, "2^40 overflowed f16 only {skipped} times");
        assert_ne!(
            model16.parameters_to_vec()?,
            start,
            "the first clean step moved the weights"
        );
        assert_eq!(scaler.scale, 2f32.powi(40 - skipped));
        assert_eq!(scaler.growth_tracker, 1);

        // bf16 has f32's range: the same scale does not overflow it.
        let x = rounded::<bf16>(&x);
        let t = rounded::<bf16>(&t);
        let mut scaler = GradScaler::with_settings(2f32.powi(40), 2.0, 0.5, 2000);
        assert!(
            step_in::<bf16>(&dev, &model, &x, &t, 32, &mut scaler)?.stepped,
            "bf16 at 2^40"
        );
        Ok(())
    })
}

/// A 64 → 256 layer with zero weights and biases, and targets of magnitude about 1e-4: the output
/// is 0, so every loss gradient is 2·(0 − t)/8192 ≈ 2.7e-8, below half of f16's smallest step.
fn small_gradient_case<T: Float>(
    dev: &Device,
    rng: &mut XorShift,
) -> anyhow::Result<(Mlp, Vec<f32>, Vec<f32>)> {
    let model = model_from(dev, &[(64, 256, vec![0.0; 256 * 64], vec![0.0; 256])])?;
    let x = rounded::<T>(&rng.nonzero_vec(32 * 64, 0.1, 1.0));
    let t = rounded::<T>(&rng.nonzero_vec(32 * 256, 1.0e-4, 1.15e-4));
    Ok((model, x, t))
}

#[test]
fn loss_scaling_keeps_f16_gradients_that_underflow_without_it() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let (model, x, t) = small_gradient_case::<f16>(&dev, &mut rng)?;
        let unscaled = || GradScaler::with_settings(1.0, 2.0, 0.5, 2000);
        let want = step_in::<f32>(&dev, &model, &x, &t, 32, &mut unscaled())?.grads;
        // (A sum of 32 terms can cancel to exactly 0 now and then, even in f32.)
        let f32_zeros = want.iter().filter(|g| **g == 0.0).count();
        assert!(f32_zeros < want.len() / 100, "f32 keeps the gradients");
        let lost = step_in::<f16>(&dev, &model, &x, &t, 32, &mut unscaled())?;
        assert!(
            lost.stepped,
            "zeros are finite: the step runs, and learns nothing"
        );
        assert!(
            lost.grads.iter().all(|g| *g == 0.0),
            "without scaling, every f16 loss gradient rounds to 0"
        );
        let kept = step_in::<f16>(&dev, &model, &x, &t, 32, &mut GradScaler::new())?.grads;
        assert_close(
            "f16 gradients scaled by 2^16, then unscaled",
            &kept,
            &want,
            4.0 * DType::F16.unit_roundoff(),
        );
        Ok(())
    })
}

#[test]
fn bf16_keeps_small_gradients_without_loss_scaling() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let (model, x, t) = small_gradient_case::<bf16>(&dev, &mut rng)?;
        let unscaled = || GradScaler::with_settings(1.0, 2.0, 0.5, 2000);
        let want = step_in::<f32>(&dev, &model, &x, &t, 32, &mut unscaled())?.grads;
        let got = step_in::<bf16>(&dev, &model, &x, &t, 32, &mut unscaled())?.grads;
        assert_close(
            "bf16 gradients without scaling",
            &got,
            &want,
            4.0 * DType::BF16.unit_roundoff(),
        );
        Ok(())
    })
}

// ---- predict, then measure ----

/// Runs the prediction's scenario with activations of type `T` and a batch of `rows` examples, and
/// reads what the allocator counts.
fn measure<T: Float>(dev: &Device, rows: usize) -> anyhow::Result<MixedMemory> {
    let mut rng = rng();
    let base = dev.memory_allocated();
    let model = Mlp::new(dev, &PREDICT_SIZES, &mut rng)?;
    let master_weights = dev.memory_allocated() - base;
    let grads = model.zero_grads()?;
    let gradients = dev.memory_allocated() - base - master_weights;
    let optimizer = Momentum::new(&model, 0.1, 0.9)?;
    let optimizer_state = dev.memory_allocated() - base - master_weights - gradients;
    let [inputs, _, outputs] = PREDICT_SIZES;
    let x = rng.nonzero_vec(rows * inputs, 0.1, 1.0);
    let t = rng.nonzero_vec(rows * outputs, 0.1, 1.0);
    let before_batch = dev.memory_allocated();
    let batch = DeviceBatch::<T>::from_host(dev, &x, &t, rows)?;
    let start = dev.memory_allocated();
    let (y, saved) = model.forward(&batch.x, rows)?;
    let kept = dev.memory_allocated() - start;
    let cast_weights: u64 = saved
        .layers
        .iter()
        .filter_map(|l| l.weight.as_ref())
        .map(|w| w.block_bytes() as u64)
        .sum();
    drop((y, saved, grads, optimizer));
    Ok(MixedMemory {
        master_weights,
        gradients,
        optimizer_state,
        batch_data: start - before_batch,
        cast_weights,
        activations: kept - cast_weights,
    })
}

/// The f32 parameters: 256×128 and 64×256 weights, 256 biases, and 64 biases in a 512 B block.
const PARAMETER_BLOCKS: u64 = 131_072 + 1_024 + 65_536 + 512;

/// The prediction's type for gpumem's `dtype`.
fn predicted_type(dtype: DType) -> ch06_predict::DType {
    match dtype {
        DType::F32 => ch06_predict::DType::F32,
        DType::F16 => ch06_predict::DType::F16,
        DType::BF16 => ch06_predict::DType::BF16,
    }
}

/// Your prediction (made before `m` was measured) beside the measurement, every number at once.
fn compare(dtype: DType, rows: usize, p: &MixedMemory, m: &MixedMemory) {
    Prediction::new(format!("your prediction for {dtype:?} and {rows} rows"))
        .bytes("master_weights", p.master_weights, m.master_weights)
        .rule("master weights and biases stay f32, each block rounded up to 512 bytes")
        .bytes("gradients", p.gradients, m.gradients)
        .rule("one f32 gradient per parameter")
        .bytes("optimizer_state", p.optimizer_state, m.optimizer_state)
        .rule("momentum keeps one f32 velocity per parameter")
        .bytes("batch_data", p.batch_data, m.batch_data)
        .rule("the batch is stored in the activations' type")
        .bytes("cast_weights", p.cast_weights, m.cast_weights)
        .rule("autocast keeps a copy of each weight (not the biases) in a lower precision only")
        .bytes("activations", p.activations, m.activations)
        .rule("activations are stored in the activations' type")
        .check();
}

/// The page's batch, then two batch sizes drawn on this run: a prediction copied from the page
/// passes the first case at most.
fn batch_sizes() -> Vec<usize> {
    let mut draw = gpumem::testing::Draw::from_env();
    vec![PREDICT_ROWS, draw.size(1, 1024), draw.size(1, 1024)]
}

/// Predicts, then measures, for every batch size of [`batch_sizes`].
fn predict_then_measure<T: Float>(dev: &Device, dtype: DType) -> anyhow::Result<()> {
    for rows in batch_sizes() {
        gpumem::testing::reset(dev);
        let predicted = predict_memory(predicted_type(dtype), rows);
        let measured = measure::<T>(dev, rows)?;
        compare(dtype, rows, &predicted, &measured);
    }
    Ok(())
}

#[test]
fn prediction_f32_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let measured = measure::<f32>(&dev, PREDICT_ROWS)?;
        assert_eq!(
            measured,
            MixedMemory {
                master_weights: PARAMETER_BLOCKS,
                gradients: PARAMETER_BLOCKS,
                optimizer_state: PARAMETER_BLOCKS,
                batch_data: 32_768 + 16_384,
                cast_weights: 0,
                activations: 65_536 + 16_384,
            },
            "the allocator's numbers"
        );
        predict_then_measure::<f32>(&dev, DType::F32)
    })
}

#[test]
fn prediction_f16_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let measured = measure::<f16>(&dev, PREDICT_ROWS)?;
        assert_eq!(
            measured,
            MixedMemory {
                master_weights: PARAMETER_BLOCKS,
                gradients: PARAMETER_BLOCKS,
                optimizer_state: PARAMETER_BLOCKS,
                batch_data: 16_384 + 8_192,
                cast_weights: 65_536 + 32_768,
                activations: 32_768 + 8_192,
            },
            "the allocator's numbers"
        );
        predict_then_measure::<f16>(&dev, DType::F16)
    })
}

#[test]
fn prediction_bf16_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        assert_eq!(
            measure::<bf16>(&dev, PREDICT_ROWS)?,
            measure::<f16>(&dev, PREDICT_ROWS)?,
            "bf16 and f16 take the same bytes"
        );
        predict_then_measure::<bf16>(&dev, DType::BF16)
    })
}
