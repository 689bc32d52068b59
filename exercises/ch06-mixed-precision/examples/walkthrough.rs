//! Chapter 6 walkthrough: f16 and bf16 on the device (range and precision), a loss gradient that
//! f16 flushes to zero unless it is scaled, the scales at which f16 overflows, and what mixed
//! precision does to memory. Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu)
//! and works unsolved: it calls none of the exercise functions.
//!
//! `cargo run -p ch06-mixed-precision --example walkthrough`

use anyhow::Context;
use ch06_mixed_precision::{DeviceBatch, Momentum};
use gpumem::ops::{self, Float, Linear, Mlp, XorShift};
use gpumem::testing::relative_error;
use gpumem::{Device, bf16, f16};

/// `values` stored as `T` on the device and read back (the walkthrough's own round trip).
fn stored_as<T: Float>(dev: &Device, values: &[f32]) -> anyhow::Result<Vec<f32>> {
    let x = dev.from_slice(values)?;
    let back = ops::cast::<T, f32>(&ops::cast::<f32, T>(&x)?)?;
    Ok(back.to_vec()?)
}

/// `v` rounded to `T` and back.
fn rounded<T: Float>(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&a| T::from_f32(a).to_f32()).collect()
}

/// A one-layer model 64 → 256 with zero weights and biases: its output is exactly 0.
fn zero_layer(dev: &Device) -> anyhow::Result<Mlp> {
    Ok(Mlp {
        layers: vec![Linear::from_host(
            dev,
            &[0.0; 256 * 64],
            &[0.0; 256],
            64,
            256,
        )?],
    })
}

/// The weight gradient of `model` for a batch in `T`, backward from the loss gradient times
/// `scale`, then unscaled; and whether it held inf or NaN.
fn weight_gradient<T: Float>(
    dev: &Device,
    model: &Mlp,
    x: &[f32],
    t: &[f32],
    rows: usize,
    scale: f32,
) -> anyhow::Result<(Vec<f32>, bool)> {
    let batch = DeviceBatch::<T>::from_host(dev, x, t, rows)?;
    let mut grads = model.zero_grads()?;
    let (y, saved) = model.forward(&batch.x, rows)?;
    let grad_y = ops::mse_loss_backward(&y, &batch.t, scale)?;
    model.backward(saved, &grad_y, &mut grads)?;
    let found = grads.unscale_and_check(1.0 / scale)?;
    Ok((grads.layers[0].weight.to_vec()?, found))
}

/// The values as f64, for [`relative_error`].
fn widen(values: &[f32]) -> Vec<f64> {
    values.iter().copied().map(f64::from).collect()
}

/// Bytes in KiB with one decimal.
fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// The memory of a training setup with activations in `T`: prints one line per batch size. With
/// `snapshot`, writes the allocator's snapshot there just after forward (for the pictures).
fn memory_table<T: Float>(
    dev: &Device,
    sizes: &[usize],
    rows: usize,
    snapshot: Option<&gpumem::SnapshotRequest>,
) -> anyhow::Result<()> {
    let mut rng = XorShift::new(6);
    let base = dev.memory_allocated();
    let model = Mlp::new(dev, sizes, &mut rng)?;
    let master = dev.memory_allocated() - base;
    let mut grads = model.zero_grads()?;
    let optimizer = Momentum::new(&model, 0.1, 0.9)?;
    let x = rng.nonzero_vec(rows * sizes[0], 0.1, 1.0);
    let t = rng.nonzero_vec(rows * sizes[sizes.len() - 1], 0.1, 1.0);
    let before_batch = dev.memory_allocated();
    let batch = DeviceBatch::<T>::from_host(dev, &x, &t, rows)?;
    let start = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let (y, saved) = model.forward(&batch.x, rows)?;
    let kept = dev.memory_allocated() - start;
    if let Some(snapshot) = snapshot {
        snapshot.write(dev)?;
    }
    let cast: u64 = saved
        .layers
        .iter()
        .filter_map(|l| l.weight.as_ref())
        .map(|w| w.block_bytes() as u64)
        .sum();
    let grad_y = ops::mse_loss_backward(&y, &batch.t, 1.0)?;
    model.backward(saved, &grad_y, &mut grads)?;
    drop((y, grad_y));
    let peak = dev.max_memory_allocated() - base;
    println!(
        "  {:<4} {rows:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>11}  {:>11}",
        T::DTYPE.name(),
        kib(master),
        kib(grads.block_bytes() as u64),
        kib(optimizer.velocity.block_bytes() as u64),
        kib(start - before_batch),
        kib(cast),
        kib(kept - cast),
        kib(peak),
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");

    dev.record_annotation("1. Range and precision");
    println!("\n== Range and precision: f32 values stored as f16 and bf16 on the device ==");
    let values = [70000.0f32, 65504.0, 1.001, 0.1, 1e-4, 1e-8];
    let as_f16 = stored_as::<f16>(&dev, &values)?;
    let as_bf16 = stored_as::<bf16>(&dev, &values)?;
    println!("  {:>12}  {:>14}  {:>14}", "f32", "as f16", "as bf16");
    for i in 0..values.len() {
        println!(
            "  {:>12e}  {:>14e}  {:>14e}",
            values[i], as_f16[i], as_bf16[i]
        );
    }

    dev.record_annotation("2. A loss gradient below f16's range");
    println!("\n== A loss gradient below f16's range ==");
    println!("  a 64 -> 256 layer with zero weights, 32 rows, targets of about 1e-4:");
    println!("  every loss gradient is 2 * (0 - t) / 8192, about 2.6e-8");
    let mut rng = XorShift::new(7);
    let model = zero_layer(&dev)?;
    let x = rng.nonzero_vec(32 * 64, 0.1, 1.0);
    let t = rng.nonzero_vec(32 * 256, 1.0e-4, 1.15e-4);
    let (x16, t16) = (rounded::<f16>(&x), rounded::<f16>(&t));
    let (want16, _) = weight_gradient::<f32>(&dev, &model, &x16, &t16, 32, 1.0)?;
    let (xb, tb) = (rounded::<bf16>(&x), rounded::<bf16>(&t));
    let (want_b, _) = weight_gradient::<f32>(&dev, &model, &xb, &tb, 32, 1.0)?;
    for (label, scale, bf) in [
        ("f16,  no scaling", 1.0f32, false),
        ("f16,  scale 2^16", 65536.0, false),
        ("bf16, no scaling", 1.0, true),
    ] {
        let (got, want) = if bf {
            (
                weight_gradient::<bf16>(&dev, &model, &xb, &tb, 32, scale)?.0,
                &want_b,
            )
        } else {
            (
                weight_gradient::<f16>(&dev, &model, &x16, &t16, 32, scale)?.0,
                &want16,
            )
        };
        let zeros = got.iter().filter(|g| **g == 0.0).count();
        println!(
            "  {label}: {zeros:>5} of {} weight gradients are 0; error against f32 {:.1e}",
            got.len(),
            relative_error(&widen(&got), &widen(want))
        );
    }

    dev.record_annotation("3. Loss scales that overflow f16");
    println!("\n== Loss scales that overflow f16 (a 64 -> 128 -> 16 model, 32 rows) ==");
    let mut rng = XorShift::new(8);
    let model = Mlp::new(&dev, &[64, 128, 16], &mut rng)?;
    let x = rng.nonzero_vec(32 * 64, 0.1, 1.0);
    let t = rng.nonzero_vec(32 * 16, 0.1, 1.0);
    for power in [16, 20, 22, 23, 24, 28, 40] {
        let scale = 2f32.powi(power);
        let (_, f16_inf) = weight_gradient::<f16>(&dev, &model, &x, &t, 32, scale)?;
        let (_, bf16_inf) = weight_gradient::<bf16>(&dev, &model, &x, &t, 32, scale)?;
        println!(
            "  scale 2^{power}: f16 gradients {}, bf16 gradients {}",
            if f16_inf { "hold inf/NaN" } else { "finite" },
            if bf16_inf { "hold inf/NaN" } else { "finite" }
        );
    }

    println!(
        "\n== Memory: f32 master weights, gradients, momentum; activations in f32/f16/bf16 =="
    );
    // The chapter's pictures are of this section alone: the allocator's history starts here.
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);
    dev.record_annotation("4. Memory: weights, gradients, momentum, activations");
    let sizes = [256, 256, 256, 32];
    println!("  model {sizes:?}");
    println!(
        "  type  rows  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>11}",
        "weights", "gradients", "momentum", "batch", "cast copy", "activations", "step peak"
    );
    for rows in [32, 1024] {
        // The chapter's pictures end in the bf16 step of 1024 rows, just after forward.
        let pictures = (rows == 1024).then_some(&snapshot);
        memory_table::<f32>(&dev, &sizes, rows, None)?;
        memory_table::<f16>(&dev, &sizes, rows, None)?;
        memory_table::<bf16>(&dev, &sizes, rows, pictures)?;
    }
    println!("  (step peak: everything above, and forward and backward, from an empty device)");
    Ok(())
}
