//! Graded tests for chapter 11: optimizer state, zero_grad and in-place operations.

use ch11_optimizer_state::{
    Batch, ReluMemory, Variant, forward_relu_in_place, optimizer, relu_memory, train_step,
};
use ch11_predict::{
    Kind, Phase, ROWS, SIZES, StepMemory, predict_state_bytes, predict_step_memory,
};
use gpumem::Device;
use gpumem::autograd::{Activation, Mlp, Tensor, no_grad};
use gpumem::testing::{Prediction, assert_close, device};
use gpumem::testing::{rng, seeded};

fn setup(dev: &Device, sizes: &[usize]) -> anyhow::Result<(Mlp, Batch)> {
    let mut rng = rng();
    let model = Mlp::new(dev, sizes, Activation::Relu, &mut rng)?;
    let batch = Batch::random(dev, &mut rng, ROWS, sizes)?;
    Ok((model, batch))
}

/// Bytes of the gradients' blocks of `model`.
fn gradient_bytes(model: &Mlp) -> u64 {
    model
        .parameters()
        .iter()
        .filter_map(Tensor::grad)
        .map(|g| g.data().block_bytes() as u64)
        .sum()
}

// ---- predict the state ----

/// The state the allocator counts after the first step, checked against the optimizer's own
/// count.
fn measure_state(kind: Kind, sizes: &[usize]) -> anyhow::Result<u64> {
    let dev = device();
    let (model, batch) = setup(&dev, sizes)?;
    let mut optimizer = optimizer(kind, model.parameters())?;
    let loss = batch.loss(&model)?;
    loss.backward()?;
    drop(loss);
    let before = dev.memory_allocated();
    optimizer.step()?;
    let state = dev.memory_allocated() - before;
    assert_eq!(optimizer.state_bytes(), state, "the optimizer's count");
    Ok(state)
}

fn check_state(kind: Kind, sizes: &[usize], want: u64) -> anyhow::Result<()> {
    assert_eq!(measure_state(kind, sizes)?, want, "the allocator's numbers");
    // The page's model, then two drawn on this run (2 to 4 layers, each at most 256 wide): a
    // copied number passes one case at most.
    let mut draw = gpumem::testing::Draw::from_env();
    let mut cases = vec![sizes.to_vec()];
    for _ in 0..2 {
        let layers = draw.size(2, 4);
        cases.push((0..=layers).map(|_| draw.size(1, 256)).collect());
    }
    for sizes in cases {
        let predicted = predict_state_bytes(kind, &sizes);
        let measured = measure_state(kind, &sizes)?;
        Prediction::new(format!(
            "your predict_state_bytes for {kind:?} over {sizes:?}"
        ))
        .bytes("optimizer state", predicted, measured)
        .rule(
            "per state entry, one f32 tensor per parameter, each its own block rounded up to 512 B",
        )
        .check();
    }
    Ok(())
}

#[test]
fn state_prediction_for_sgd_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| check_state(Kind::Sgd, &SIZES, 0))
}

#[test]
fn state_prediction_for_momentum_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| check_state(Kind::SgdMomentum, &SIZES, 406_016))
}

#[test]
fn state_prediction_for_adam_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| check_state(Kind::Adam, &SIZES, 812_032))
}

#[test]
fn state_prediction_for_adam_on_a_tiny_model_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| check_state(Kind::Adam, &[3, 5, 2], 8 * 512))
}

// ---- predict the step ----

/// The first training step on a model of `sizes`, phase by phase.
fn measure_step(kind: Kind, sizes: &[usize]) -> anyhow::Result<StepMemory> {
    let dev = device();
    let (model, batch) = setup(&dev, sizes)?;
    let mut optimizer = optimizer(kind, model.parameters())?;
    let start = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let loss = batch.loss(&model)?;
    let forward = dev.max_memory_allocated() - start;
    dev.reset_peak_memory_stats();
    loss.backward()?;
    let backward = dev.max_memory_allocated() - start;
    drop(loss);
    let before = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    optimizer.step()?;
    let step_peak = dev.max_memory_allocated() - start;
    let state = dev.memory_allocated() - before;
    let peaks = [
        (forward, Phase::Forward),
        (backward, Phase::Backward),
        (step_peak, Phase::Step),
    ];
    let peak_phase = peaks.iter().max_by_key(|(bytes, _)| *bytes).unwrap().1;
    println!("{kind:?} {sizes:?}: forward {forward}, backward {backward}, step {step_peak}");
    Ok(StepMemory {
        state,
        step_peak,
        peak_phase,
    })
}

/// Your prediction beside the measured step on a model of `sizes`.
fn compare_step(kind: Kind, sizes: &[usize], predicted: &StepMemory, measured: &StepMemory) {
    Prediction::new(format!(
        "your predict_step_memory for {kind:?} over {sizes:?}"
    ))
    .bytes("state", predicted.state, measured.state)
    .rule("SGD keeps nothing, momentum one buffer per parameter, Adam two")
    .bytes("step_peak", predicted.step_peak, measured.step_peak)
    .rule("the gradients, the state, and what a for-each step makes at once")
    .count("peak_phase", predicted.peak_phase, measured.peak_phase)
    .rule("the step peaks above backward only when it makes new buffers")
    .check();
}

/// The page's model, whose step must measure `want`, then two drawn on this run (2 or 3 layers,
/// the inputs and hidden widths from 128 to 256, at most 16 outputs): a copied number passes one
/// case at most.
fn check_step(kind: Kind, want: StepMemory) -> anyhow::Result<()> {
    // The prediction is made before anything runs.
    let predicted = predict_step_memory(kind, &SIZES);
    let measured = measure_step(kind, &SIZES)?;
    assert_eq!(measured, want, "the allocator's numbers");
    compare_step(kind, &SIZES, &predicted, &measured);
    let mut draw = gpumem::testing::Draw::from_env();
    for _ in 0..2 {
        let layers = draw.size(2, 3);
        let mut sizes: Vec<usize> = (0..layers).map(|_| draw.size(128, 256)).collect();
        sizes.push(draw.size(1, 16));
        let predicted = predict_step_memory(kind, &sizes);
        compare_step(kind, &sizes, &predicted, &measure_step(kind, &sizes)?);
    }
    Ok(())
}

#[test]
fn step_prediction_for_sgd_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_step(
            Kind::Sgd,
            StepMemory {
                state: 0,
                step_peak: 406_016,
                peak_phase: Phase::Backward,
            },
        )
    })
}

#[test]
fn step_prediction_for_momentum_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_step(
            Kind::SgdMomentum,
            StepMemory {
                state: 406_016,
                step_peak: 812_032,
                peak_phase: Phase::Step,
            },
        )
    })
}

#[test]
fn step_prediction_for_adam_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_step(
            Kind::Adam,
            StepMemory {
                state: 812_032,
                step_peak: 1_624_064,
                peak_phase: Phase::Step,
            },
        )
    })
}

// ---- train_step and zero_grad ----

/// Runs two train steps and checks what stays between steps.
fn check_train_step(kind: Kind, set_to_none: bool) -> anyhow::Result<()> {
    let dev = device();
    let (model, batch) = setup(&dev, &SIZES)?;
    let mut optimizer = optimizer(kind, model.parameters())?;
    let start = dev.memory_allocated();
    let before: Vec<f32> = model.parameters()[0].to_f32_vec()?;
    let want_loss = {
        let _g = no_grad();
        batch.loss(&model)?.item()?
    };
    let loss = train_step(&model, optimizer.as_mut(), &batch, set_to_none)?;
    assert_close(
        "the returned loss",
        &[loss as f64],
        &[want_loss as f64],
        1e-6,
    );
    assert_ne!(
        model.parameters()[0].to_f32_vec()?,
        before,
        "the step moved the weights"
    );
    let state = optimizer.state_bytes();
    let grads = gradient_bytes(&model);
    let between = dev.memory_allocated() - start;
    train_step(&model, optimizer.as_mut(), &batch, set_to_none)?;
    assert_eq!(
        dev.memory_allocated() - start,
        between,
        "a second step leaves the same memory: nothing of a step's graph stays"
    );
    if set_to_none {
        assert!(model.parameters().iter().all(|p| p.grad().is_none()));
        assert_eq!(
            between, state,
            "between steps: the weights and the state only"
        );
    } else {
        for p in model.parameters() {
            let g = p.grad().expect("set_to_none=False keeps the gradients");
            assert!(g.to_f32_vec()?.iter().all(|&v| v == 0.0), "zeroed");
        }
        assert_eq!(grads, predict_state_bytes(Kind::SgdMomentum, &SIZES));
        assert_eq!(
            between,
            state + grads,
            "the weights, the state and zeroed gradients"
        );
    }
    Ok(())
}

#[test]
fn train_step_with_set_to_none_frees_the_gradients() -> anyhow::Result<()> {
    seeded(|| check_train_step(Kind::Adam, true))
}

#[test]
fn train_step_without_set_to_none_keeps_zeroed_gradients() -> anyhow::Result<()> {
    seeded(|| check_train_step(Kind::SgdMomentum, false))
}

// ---- relu in place ----

#[test]
fn relu_in_place_gives_the_same_output_and_gradients() -> anyhow::Result<()> {
    seeded(|| {
        let dev = device();
        let (model, batch) = setup(&dev, &SIZES)?;
        let mut results = Vec::new();
        for in_place in [false, true] {
            let out = if in_place {
                forward_relu_in_place(&model, &batch.x)?
            } else {
                model.forward(&batch.x)?
            };
            let values: Vec<f64> = out.to_f32_vec()?.iter().map(|&v| v as f64).collect();
            gpumem::autograd::mse_loss(&out, &batch.t)?.backward()?;
            let grads: Vec<f64> = model
                .parameters()
                .iter()
                .flat_map(|p| p.grad().unwrap().to_f32_vec().unwrap())
                .map(|v| v as f64)
                .collect();
            model.zero_grad();
            results.push((values, grads));
        }
        assert_close("output", &results[1].0, &results[0].0, 0.0);
        assert_close("gradients", &results[1].1, &results[0].1, 0.0);
        Ok(())
    })
}

#[test]
fn relu_in_place_peaks_at_what_the_graph_keeps() -> anyhow::Result<()> {
    seeded(|| {
        let dev = device();
        let (model, batch) = setup(&dev, &SIZES)?;
        let start = dev.memory_allocated();
        let mut measured = Vec::new();
        for in_place in [false, true] {
            dev.reset_peak_memory_stats();
            let out = if in_place {
                forward_relu_in_place(&model, &batch.x)?
            } else {
                model.forward(&batch.x)?
            };
            measured.push((
                dev.memory_allocated() - start,
                dev.max_memory_allocated() - start,
            ));
            drop(out);
        }
        // (kept, peak). Kept: two hidden activations (65,536 B each) and the output (2,560 B), both
        // ways. Out of place, the peak is at the second layer: its input, its pre-activation and its
        // ReLU's result, three hidden blocks at once; in place, the pre-activation is the result.
        assert_eq!(measured, vec![(133_632, 196_608), (133_632, 133_632)]);
        Ok(())
    })
}

// ---- the source's example ----

/// The block of an `[n, n]` f32 tensor: its bytes rounded up to a multiple of 512. 1000 × 1000:
/// 4,000,000 bytes, a block of 4,000,256.
fn block(n: usize) -> u64 {
    (n as u64 * n as u64 * 4).div_ceil(512).max(1) * 512
}

/// The page's size (1000), then two drawn on this run: numbers copied from the page or a failure
/// pass one case at most. At most 1000: `earlier_peak` leaves a 16 MiB segment cached, and the
/// three blocks of `Variant::Clone` must leave more than 1 MiB of it, or the last one takes the
/// whole rest (a remainder of 1 MiB or less is never split off) and is no longer one block.
fn relu_sizes() -> Vec<usize> {
    let mut draw = gpumem::testing::Draw::from_env();
    vec![1000, draw.size(16, 1000), draw.size(16, 1000)]
}

/// A 16 MB peak from earlier work, gone before `relu_memory` runs: its own peak must not see it.
fn earlier_peak(dev: &Device) -> anyhow::Result<()> {
    drop(dev.alloc::<f32>(4_000_000)?);
    Ok(())
}

/// `relu_memory(dev, n, variant)`, checked to have made `x` and `y` on the device (at least
/// `allocations` blocks): numbers worked out without running the example do not pass.
fn run_relu(
    dev: &Device,
    n: usize,
    variant: Variant,
    allocations: u64,
) -> anyhow::Result<ReluMemory> {
    gpumem::testing::reset(dev);
    earlier_peak(dev)?;
    let count = || {
        dev.memory_stats()
            .get("allocation.all.allocated")
            .unwrap_or(0)
    };
    let before = count();
    let got = relu_memory(dev, n, variant)?;
    let made = count() - before;
    assert!(
        made >= allocations,
        "relu_memory(dev, {n}, {variant:?}) made {made} allocation(s) on the device; running the \
         example makes at least {allocations} (x, then y): measure it, do not work it out"
    );
    Ok(got)
}

#[test]
fn relu_out_of_place_keeps_one_block() -> anyhow::Result<()> {
    let dev = device();
    seeded(|| {
        for n in relu_sizes() {
            let got = run_relu(&dev, n, Variant::OutOfPlace, 2)?;
            let b = block(n);
            assert!(
                got == ReluMemory { kept: b, peak: b },
                "n = {n}: got {got:?}, expected kept {b} and peak {b}"
            );
        }
        Ok(())
    })
}

#[test]
fn relu_then_clone_doubles_the_peak() -> anyhow::Result<()> {
    let dev = device();
    seeded(|| {
        for n in relu_sizes() {
            let got = run_relu(&dev, n, Variant::Clone, 3)?;
            let b = block(n);
            assert!(
                got == ReluMemory {
                    kept: b,
                    peak: 2 * b
                },
                "n = {n}: got {got:?}, expected kept {b} and peak {}",
                2 * b
            );
        }
        Ok(())
    })
}

#[test]
fn relu_in_place_allocates_nothing() -> anyhow::Result<()> {
    let dev = device();
    seeded(|| {
        for n in relu_sizes() {
            let got = run_relu(&dev, n, Variant::InPlace, 1)?;
            assert!(
                got == ReluMemory { kept: 0, peak: 0 },
                "n = {n}: got {got:?}, expected kept 0 and peak 0"
            );
        }
        Ok(())
    })
}
