//! Chapter 8 walkthrough: what a forward pass keeps for backward, layer by layer; inference with
//! and without `no_grad`; a running loss that keeps every step's graph; `retain_graph`; and the
//! source's `no_grad` example measured on the device. Runs on `GPUMEM_DEVICE` (default: cuda:0 if
//! there is one, else cpu) and works unsolved: it uses only the chapter's given code and gpumem.
//!
//! `cargo run -p ch08-autograd-memory --example walkthrough`

use anyhow::Context;
use ch08_autograd_memory::Batch;
use gpumem::Device;
use gpumem::autograd::{self, Activation, Mlp, Tensor};
use gpumem::ops::XorShift;

/// The walkthrough's model: 512 inputs, three hidden layers of 1024, 10 outputs.
const SIZES: [usize; 5] = [512, 1024, 1024, 1024, 10];
/// Examples in a batch.
const ROWS: usize = 64;

/// Bytes in KiB with one decimal.
fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// Memory above `start` after one forward pass, while the output is held.
fn forward_kept(dev: &Device, model: &Mlp, x: &Tensor, start: u64) -> anyhow::Result<u64> {
    let out = model.forward(x)?;
    let kept = dev.memory_allocated() - start;
    drop(out);
    Ok(kept)
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);
    let mut rng = XorShift::new(8);

    dev.record_annotation("1. What one forward pass keeps");
    println!("\n== What one forward pass keeps: model {SIZES:?}, batch of {ROWS} ==");
    println!(
        "  activation  mode            kept above model+batch  saved incl. weights, batch  nodes"
    );
    for activation in [Activation::Relu, Activation::Gelu] {
        let model = Mlp::<f32>::new(&dev, &SIZES, activation, &mut rng)?;
        let batch = Batch::random(&dev, &mut rng, ROWS, SIZES[0], SIZES[4])?;
        let start = dev.memory_allocated();
        let out = model.forward(&batch.x)?;
        let with_grad = dev.memory_allocated() - start;
        let saved = out.graph_saved_bytes() as u64;
        let nodes = out.graph_nodes().len();
        drop(out);
        let without = {
            let _no_grad = autograd::no_grad();
            forward_kept(&dev, &model, &batch.x, start)?
        };
        let inference = {
            let _inference = autograd::inference_mode();
            forward_kept(&dev, &model, &batch.x, start)?
        };
        let label = format!("{activation:?}");
        println!(
            "  {label:<10}  grad            {:>22}  {:>26}  {nodes:>5}",
            kib(with_grad),
            kib(saved)
        );
        println!(
            "  {label:<10}  no_grad         {:>22}  {:>26}  {:>5}",
            kib(without),
            "-",
            0
        );
        println!(
            "  {label:<10}  inference_mode  {:>22}  {:>26}  {:>5}",
            kib(inference),
            "-",
            0
        );
    }
    println!(
        "  (one hidden activation is {ROWS} × 1024 f32 = {}; the batch, {}, is saved by the first \
         layer but is there anyway)",
        kib((ROWS * 1024 * 4) as u64),
        kib((ROWS * 512 * 4) as u64)
    );

    dev.record_annotation("2. A validation loop without no_grad");
    println!(
        "\n== A validation loop without no_grad: total_loss += loss, then total += loss.item() =="
    );
    let model = Mlp::<f32>::new(&dev, &SIZES, Activation::Relu, &mut rng)?;
    let data: Vec<Batch> = (0..4)
        .map(|_| Batch::random(&dev, &mut rng, ROWS, SIZES[0], SIZES[4]))
        .collect::<gpumem::Result<_>>()?;
    let start = dev.memory_allocated();
    let mut total = Tensor::<f32>::zeros(&dev, &[])?;
    for (step, batch) in data.iter().enumerate() {
        let loss = batch.loss(&model)?;
        total = total.add(&loss)?;
        println!(
            "  step {step}: tensor total, memory above the start {:>10}",
            kib(dev.memory_allocated() - start)
        );
    }
    println!(
        "  the total's graph has {} nodes",
        total.graph_nodes().len()
    );
    // The chapter's pictures end here: four steps of a growing graph.
    snapshot.write(&dev)?;
    drop(total);
    let start = dev.memory_allocated();
    let mut sum = 0.0f32;
    for (step, batch) in data.iter().enumerate() {
        sum += batch.loss(&model)?.item()?;
        println!(
            "  step {step}: number total, memory above the start {:>10}",
            kib(dev.memory_allocated() - start)
        );
    }
    println!("  mean loss {:.6}", sum / data.len() as f32);

    dev.record_annotation("3. Two losses, one graph");
    println!("\n== Two losses, one graph: retain_graph ==");
    let out = model.forward(&data[0].x)?;
    let first = autograd::mse_loss(&out, &data[0].t)?;
    let second = autograd::mse_loss(&out, &data[1].t)?;
    let before = out.graph_saved_bytes();
    first.backward()?;
    println!(
        "  saved by the graph: {} before the first backward, {} after it",
        kib(before as u64),
        kib(out.graph_saved_bytes() as u64)
    );
    match second.backward() {
        Ok(()) => println!("  the second backward ran"),
        Err(e) => println!("  the second backward: {e}"),
    }
    drop((out, first, second));
    model.zero_grad();

    dev.record_annotation("4. The source's no_grad example");
    println!("\n== The source's no_grad example, on the device ==");
    let n = 2000;
    let x = Tensor::<f32>::uniform(&dev, &[n, n], -1.0, 1.0, &mut rng)?.requires_grad_(true)?;
    println!(
        "  x: [{n}, {n}] f32 on {dev}, a block of {}",
        kib(x.data().block_bytes() as u64)
    );
    for (mode, grad) in [("grad", true), ("no_grad", false)] {
        let _mode = if grad {
            autograd::enable_grad()
        } else {
            autograd::no_grad()
        };
        let before = dev.memory_allocated();
        let y = x.mul_scalar(2.0)?;
        let after_times_two = dev.memory_allocated() - before;
        let z = y.gelu()?;
        drop(y);
        let after_gelu = dev.memory_allocated() - before;
        println!(
            "  {mode:<8} y = x * 2 keeps {:>12}; z = gelu(x * 2) keeps {:>12}",
            kib(after_times_two),
            kib(after_gelu)
        );
        drop(z);
    }
    Ok(())
}
