//! Chapter 5 walkthrough: one batch in k micro-batches. The peak falls with the micro-batch, the
//! gradient memory does not move, and the accumulated gradient is the full batch's. Runs on
//! `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu) and works unsolved: it has its own
//! accumulation loop.
//!
//! `cargo run -p ch05-gradient-accumulation --example walkthrough`

use anyhow::Context;
use ch05_gradient_accumulation::{DeviceBatch, HostBatch, forward_backward};
use gpumem::Device;
use gpumem::ops::{Mlp, MlpGrads, XorShift};
use gpumem::testing::relative_error;

/// The walkthrough's model: 256 inputs, two hidden layers of 256, 16 outputs.
const SIZES: [usize; 4] = [256, 256, 256, 16];
/// Examples in the batch.
const BATCH: usize = 256;

/// Every gradient as one f64 vector.
fn flat(grads: &MlpGrads) -> anyhow::Result<Vec<f64>> {
    Ok(grads.to_vec()?.into_iter().map(f64::from).collect())
}

/// The walkthrough's own accumulation loop: `k` equal micro-batches, each uploaded, run and
/// dropped in turn, with the loss multiplied by `weight` (1/k divides it; 1 is the source's loop).
fn accumulate(
    dev: &Device,
    model: &Mlp,
    grads: &mut MlpGrads,
    data: &HostBatch,
    k: usize,
    weight: f32,
) -> anyhow::Result<()> {
    grads.zero()?;
    let m = BATCH / k;
    let (i, o) = (data.in_features, data.out_features);
    for s in 0..k {
        let micro = DeviceBatch {
            x: dev.from_slice(&data.x[s * m * i..(s + 1) * m * i])?,
            t: dev.from_slice(&data.t[s * m * o..(s + 1) * m * o])?,
            rows: m,
        };
        forward_backward(model, grads, &micro, weight)?;
    }
    Ok(())
}

/// Bytes in KiB with one decimal.
fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);

    let mut rng = XorShift::new(5);
    let model = Mlp::new(&dev, &SIZES, &mut rng)?;
    let parameters = dev.memory_allocated();
    let mut grads = model.zero_grads()?;
    let gradients = dev.memory_allocated() - parameters;
    let data = HostBatch::random(&mut rng, BATCH, SIZES[0], SIZES[3]);
    println!(
        "\nmodel {SIZES:?}: {} parameters; parameter blocks {}, gradient blocks {}",
        model.num_parameters(),
        kib(parameters),
        kib(gradients)
    );

    dev.record_annotation("1. One batch in k micro-batches");
    println!("\n== One batch of {BATCH} examples in k micro-batches ==");
    println!("   k  rows  peak above model+gradients  gradient blocks  error vs k = 1");
    let start = dev.memory_allocated();
    let mut full = Vec::new();
    for k in [1, 2, 4, 8, 16, 64, 256] {
        dev.reset_peak_memory_stats();
        accumulate(&dev, &model, &mut grads, &data, k, 1.0 / k as f32)?;
        let peak = dev.max_memory_allocated() - start;
        let g = flat(&grads)?;
        if k == 1 {
            full = g.clone();
        }
        println!(
            "{k:>4}  {:>4}  {:>26}  {:>15}  {:>14.1e}",
            BATCH / k,
            kib(peak),
            kib(grads.block_bytes() as u64),
            relative_error(&g, &full)
        );
        assert_eq!(dev.memory_allocated(), start);
        if k == 4 {
            // The chapter's pictures end here: one batch of 256, then 2 and 4 micro-batches.
            snapshot.write(&dev)?;
        }
    }

    dev.record_annotation("2. What a step holds");
    println!("\n== What a step holds, for a batch of 256 and for micro-batches of 64 ==");
    for rows in [BATCH, BATCH / 4] {
        let micro = DeviceBatch {
            x: dev.from_slice(&data.x[..rows * SIZES[0]])?,
            t: dev.from_slice(&data.t[..rows * SIZES[3]])?,
            rows,
        };
        let with_data = dev.memory_allocated();
        let (y, saved) = model.forward(&micro.x, rows)?;
        let kept = dev.memory_allocated() - with_data;
        drop((y, saved));
        dev.reset_peak_memory_stats();
        grads.zero()?;
        forward_backward(&model, &mut grads, &micro, 1.0)?;
        let peak = dev.max_memory_allocated() - with_data;
        println!(
            "  {rows:>3} rows: parameters {}, gradients {}, batch on the device {}, \
             kept by forward {}, step peak {}",
            kib(parameters),
            kib(gradients),
            kib(with_data - start),
            kib(kept),
            kib(peak)
        );
    }

    dev.record_annotation("3. The loss not divided by k");
    println!("\n== The source's loop: the loss not divided by k ==");
    for k in [2, 4, 8] {
        accumulate(&dev, &model, &mut grads, &data, k, 1.0)?;
        let g = flat(&grads)?;
        let ratio = g.iter().map(|v| v * v).sum::<f64>().sqrt()
            / full.iter().map(|v| v * v).sum::<f64>().sqrt();
        println!(
            "  k = {k}: the gradient is {ratio:.3} times the full batch's (error {:.1e})",
            relative_error(&g, &full)
        );
    }
    Ok(())
}
