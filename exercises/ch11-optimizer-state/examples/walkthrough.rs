//! Chapter 11 walkthrough: one training step taken apart (weights, gradients, optimizer state,
//! saved activations, temporaries) for SGD, SGD with momentum and Adam; where the step peaks;
//! `zero_grad` with and without `set_to_none`; `relu`, `relu().clone()` and `relu_()`; and the
//! error an in-place write to a saved tensor gives. Runs on `GPUMEM_DEVICE` (default: cuda:0 if
//! there is one, else cpu) and works unsolved: it uses only the chapter's given code and gpumem.
//!
//! `cargo run -p ch11-optimizer-state --example walkthrough`

use anyhow::Context;
use ch11_optimizer_state::{Batch, Kind, optimizer};
use gpumem::Device;
use gpumem::autograd::{Activation, Mlp, Tensor, linear};
use gpumem::ops::XorShift;
use gpumem::optim::{Adam, AdamOptions, Implementation, Optimizer};

/// The walkthrough's model: 512 inputs, three hidden layers of 1024, 10 outputs.
const SIZES: [usize; 5] = [512, 1024, 1024, 1024, 10];
/// Examples in a batch.
const ROWS: usize = 64;

/// Bytes in KiB with one decimal.
fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// Makes an optimizer over a model's parameters.
type MakeOptimizer = Box<dyn Fn(Vec<Tensor>) -> anyhow::Result<Box<dyn Optimizer<f32>>>>;

/// One measured first training step.
struct StepParts {
    weights: u64,
    saved: u64,
    gradients: u64,
    state: u64,
    peaks: [u64; 3],
}

/// Runs the first training step of a fresh model with `optimizer`, measuring each part above the
/// memory before the model existed.
fn first_step(
    dev: &Device,
    rng: &mut XorShift,
    make: impl Fn(Vec<Tensor>) -> anyhow::Result<Box<dyn Optimizer<f32>>>,
) -> anyhow::Result<StepParts> {
    let base = dev.memory_allocated();
    let model = Mlp::<f32>::new(dev, &SIZES, Activation::Relu, rng)?;
    let weights = dev.memory_allocated() - base;
    let batch = Batch::random(dev, rng, ROWS, &SIZES)?;
    let mut optimizer = make(model.parameters())?;
    let start = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let loss = batch.loss(&model)?;
    let saved = dev.memory_allocated() - start;
    let forward = dev.max_memory_allocated() - start;
    dev.reset_peak_memory_stats();
    loss.backward()?;
    let backward = dev.max_memory_allocated() - start;
    drop(loss);
    let gradients = dev.memory_allocated() - start;
    dev.reset_peak_memory_stats();
    optimizer.step()?;
    let step = dev.max_memory_allocated() - start;
    let state = dev.memory_allocated() - start - gradients;
    optimizer.zero_grad(true)?;
    Ok(StepParts {
        weights,
        saved,
        gradients,
        state,
        peaks: [forward, backward, step],
    })
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);
    let mut rng = XorShift::new(11);

    dev.record_annotation("1. The first training step");
    println!("\n== The first training step: model {SIZES:?}, batch of {ROWS}, MSE ==");
    println!(
        "  optimizer            weights       saved      grads      state   peak fwd   peak bwd  peak step"
    );
    let rows: [(&str, MakeOptimizer); 4] = [
        ("SGD", Box::new(|p| Ok(optimizer(Kind::Sgd, p)?))),
        (
            "SGD momentum 0.9",
            Box::new(|p| Ok(optimizer(Kind::SgdMomentum, p)?)),
        ),
        (
            "Adam (for-each)",
            Box::new(|p| Ok(optimizer(Kind::Adam, p)?)),
        ),
        (
            "Adam (for-loop)",
            Box::new(|p| {
                let o = AdamOptions {
                    implementation: Implementation::ForLoop,
                    ..AdamOptions::default()
                };
                Ok(Box::new(Adam::new(p, o)?))
            }),
        ),
    ];
    for (label, make) in rows {
        let s = first_step(&dev, &mut rng, make)?;
        println!(
            "  {label:<17} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10}",
            kib(s.weights),
            kib(s.saved),
            kib(s.gradients),
            kib(s.state),
            kib(s.peaks[0]),
            kib(s.peaks[1]),
            kib(s.peaks[2]),
        );
    }
    println!(
        "  (saved: after the forward pass, the loss held; peaks above the model and the batch; \
         one hidden activation is {})",
        kib((ROWS * 1024 * 4) as u64)
    );

    dev.record_annotation("2. Between steps");
    println!("\n== Between steps: Adam, zero_grad(set_to_none) ==");
    let model = Mlp::<f32>::new(&dev, &SIZES, Activation::Relu, &mut rng)?;
    let batch = Batch::random(&dev, &mut rng, ROWS, &SIZES)?;
    let mut adam = optimizer(Kind::Adam, model.parameters())?;
    let start = dev.memory_allocated();
    for set_to_none in [true, true, false, false] {
        let loss = batch.loss(&model)?;
        loss.backward()?;
        let value = loss.item()?;
        drop(loss);
        adam.step()?;
        adam.zero_grad(set_to_none)?;
        println!(
            "  set_to_none={set_to_none:<5}  loss {value:.6}  between steps, above model and batch: {:>10}",
            kib(dev.memory_allocated() - start)
        );
    }
    // The chapter's pictures end here: five models' first steps, then four Adam steps.
    snapshot.write(&dev)?;
    drop((adam, model, batch));

    dev.record_annotation("3. relu, relu().clone() and relu_()");
    println!("\n== The source's relu, relu().clone() and relu_(), 1000 x 1000 f32 ==");
    for variant in ["relu(x)", "relu(x).clone()", "x.relu_()"] {
        let x = Tensor::<f32>::uniform(&dev, &[1000, 1000], -1.0, 1.0, &mut rng)?;
        let start = dev.memory_allocated();
        dev.reset_peak_memory_stats();
        let y = match variant {
            "relu(x)" => x.relu()?,
            "relu(x).clone()" => x.relu()?.copy()?,
            _ => x.relu_()?,
        };
        println!(
            "  {variant:<16} new blocks held {:>12}  peak {:>12}  version of y {}",
            kib(dev.memory_allocated() - start),
            kib(dev.max_memory_allocated() - start),
            y.version()
        );
    }

    dev.record_annotation("4. In place on a saved tensor");
    println!("\n== In place on a tensor autograd saved ==");
    let model = Mlp::<f32>::new(&dev, &[64, 32, 1], Activation::Relu, &mut rng)?;
    let x = Tensor::<f32>::uniform(&dev, &[8, 64], -1.0, 1.0, &mut rng)?;
    let l = &model.layers[0];
    // ReluBackward0 saves relu's output; writing over it breaks backward.
    let h = linear(&x, &l.weight, Some(&l.bias))?.relu()?;
    let h = h.mul_scalar_(2.0)?;
    match h.sum()?.backward() {
        Ok(()) => println!("  backward ran"),
        Err(e) => println!("  h = relu(linear(x)); h.mul_(2); backward: {e}"),
    }
    // relu_ right after linear is safe: AddmmBackward0 saved x and the weight, not its output.
    let h = linear(&x, &l.weight, Some(&l.bias))?.relu_()?;
    h.sum()?.backward()?;
    println!(
        "  h = linear(x).relu_(); backward: ran, weight gradient of {} elements",
        l.weight.grad().map_or(0, |g| g.numel())
    );
    Ok(())
}
