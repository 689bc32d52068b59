//! Chapter 9 walkthrough: one training step of a deep MLP with `checkpoint_sequential` in 1 to n
//! segments (memory kept by forward, the step's peak, the forward work); 1, √n and n segments
//! for several depths; and the source's checkpointing example, with its closures done right and
//! done as Python does them. Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu)
//! and works unsolved: it uses only the chapter's given code and gpumem.
//!
//! `cargo run -p ch09-checkpointing --example walkthrough`

use anyhow::Context;
use ch09_checkpointing::{Batch, ROWS, SourceModel, WIDTH, deep_mlp};
use gpumem::Device;
use gpumem::autograd::{self, Mlp, Tensor, checkpoint_sequential, mse_loss};
use gpumem::ops::XorShift;
use gpumem::testing::relative_error;

/// One hidden activation: 256 × 64 f32.
const ACTIVATION: u64 = (ROWS * WIDTH * 4) as u64;

/// Bytes in KiB with one decimal.
fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// Memory after forward (loss held), the step's peak, and linear forwards, above the start.
fn step(dev: &Device, model: &Mlp, batch: &Batch, segments: usize) -> anyhow::Result<[u64; 3]> {
    model.zero_grad();
    let start = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let linears = autograd::forward_ops("linear");
    let out = checkpoint_sequential(&model.as_layers(), segments, &batch.x)?;
    let loss = mse_loss(&out, &batch.t)?;
    drop(out);
    let after_forward = dev.memory_allocated() - start;
    loss.backward()?;
    let peak = dev.max_memory_allocated() - start;
    Ok([
        after_forward,
        peak,
        autograd::forward_ops("linear") - linears,
    ])
}

/// The gradients of every parameter (zeros for one without), then cleared.
fn take_grads(params: &[Tensor]) -> anyhow::Result<(Vec<f64>, usize)> {
    let mut values = Vec::new();
    let mut with_grad = 0;
    for p in params {
        match p.grad() {
            Some(g) => {
                with_grad += 1;
                values.extend(g.to_vec()?.into_iter().map(f64::from));
            }
            None => values.extend(std::iter::repeat_n(0.0, p.numel())),
        }
        p.clear_grad();
    }
    Ok((values, with_grad))
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");
    let mut rng = XorShift::new(9);

    let depth = 16;
    let model = deep_mlp(&dev, depth, &mut rng)?;
    let batch = Batch::random(&dev, &mut rng)?;
    let gradients: u64 = model
        .parameters()
        .iter()
        .map(|p| p.data().block_bytes() as u64)
        .sum();
    println!(
        "\n== One step of a {depth}-layer MLP (32 → 64 × 15 → 8), batch of {ROWS}, in s segments =="
    );
    println!(
        "  (one hidden activation is {}; the gradients take {} and are part of every peak)",
        kib(ACTIVATION),
        kib(gradients)
    );
    println!("   s  kept after forward  activations        peak  linear forwards  extra work");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);
    dev.record_annotation("1. One step in s segments");
    for segments in [1, 2, 4, 8, 16] {
        let [after, peak, work] = step(&dev, &model, &batch, segments)?;
        println!(
            "  {segments:>2}  {:>18}  {:>11}  {:>10}  {work:>15}  {:>9.0} %",
            kib(after),
            after / ACTIVATION,
            kib(peak),
            (work - depth as u64) as f64 / depth as f64 * 100.0
        );
    }
    // The chapter's pictures end here: five steps of the same model, 1 to 16 segments.
    snapshot.write(&dev)?;
    drop((model, batch));

    dev.record_annotation("2. 1, √n and n segments");
    println!("\n== 1, √n and n segments for MLPs of depth n ==");
    println!("   n   s  kept activations        peak  linear forwards");
    for depth in [4, 9, 16, 25, 36] {
        let model = deep_mlp(&dev, depth, &mut rng)?;
        let batch = Batch::random(&dev, &mut rng)?;
        let root = (depth as f64).sqrt().round() as usize;
        for segments in [1, root, depth] {
            let [after, peak, work] = step(&dev, &model, &batch, segments)?;
            println!(
                "  {depth:>2}  {segments:>2}  {:>16}  {:>10}  {work:>15}",
                after / ACTIVATION,
                kib(peak)
            );
        }
    }

    dev.record_annotation("3. The source's example");
    println!(
        "\n== The source's example: 10 layers of 64 → 64 with ReLU, each in its own checkpoint =="
    );
    let model = SourceModel::new(&dev, 10, &mut rng)?;
    let x = Tensor::uniform(&dev, &[ROWS, WIDTH], -1.0, 1.0, &mut rng)?;
    let t = Tensor::uniform(&dev, &[ROWS, WIDTH], -1.0, 1.0, &mut rng)?;
    let start = dev.memory_allocated();
    let plain = model.forward(&x)?;
    println!(
        "  plain forward keeps        {:>10}",
        kib(dev.memory_allocated() - start)
    );
    let values = plain.to_vec()?;
    mse_loss(&plain, &t)?.backward()?;
    drop(plain);
    let (want, _) = take_grads(&model.parameters())?;
    let linears = autograd::forward_ops("linear");
    let late = model.forward_late_binding(&x)?;
    println!(
        "  late-binding closures keep {:>10}; forward equals plain: {}",
        kib(dev.memory_allocated() - start),
        late.to_vec()? == values
    );
    mse_loss(&late, &t)?.backward()?;
    drop(late);
    let (got, layers_with_grad) = take_grads(&model.parameters())?;
    println!(
        "  backward: {} linear forwards in all, {} of 20 parameters got a gradient, relative \
         error against plain {:.2}",
        autograd::forward_ops("linear") - linears,
        layers_with_grad,
        relative_error(&got, &want)
    );
    println!(
        "  (forward_checkpointed, the chapter's exercise, gives the plain gradients with each \
         closure owning its layer)"
    );
    Ok(())
}
