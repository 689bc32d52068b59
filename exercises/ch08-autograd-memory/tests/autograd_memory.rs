//! Graded tests for chapter 8: what autograd keeps.

use ch08_autograd_memory::{
    Batch, LossLog, backward_twice, evaluate, kept_by_times_two, kept_by_times_two_then_gelu,
};
use ch08_predict::{ForwardMemory, PREDICT_SIZES, predict_forward_memory};
use gpumem::Device;
use gpumem::autograd::{self, Activation, Mlp, Tensor, mse_loss};
use gpumem::ops::XorShift;
use gpumem::testing::{Prediction, assert_close};
use gpumem::testing::{rng, seeded};

/// The model of the loop tests: 32 inputs, two hidden layers of 128, 4 outputs.
const SIZES: [usize; 4] = [32, 128, 128, 4];

fn model(dev: &Device, rng: &mut XorShift) -> anyhow::Result<Mlp> {
    Ok(Mlp::new(dev, &SIZES, Activation::Relu, rng)?)
}

fn batches(dev: &Device, rng: &mut XorShift, count: usize) -> anyhow::Result<Vec<Batch>> {
    (0..count)
        .map(|_| Ok(Batch::random(dev, rng, 16, SIZES[0], SIZES[3])?))
        .collect()
}

// ---- predict, then measure ----

/// Runs the prediction's scenario and reads what the allocator counts.
fn measure_forward(
    dev: &Device,
    rows: usize,
    activation: Activation,
) -> anyhow::Result<ForwardMemory> {
    let mut rng = rng();
    let model = Mlp::<f32>::new(dev, &PREDICT_SIZES, activation, &mut rng)?;
    let batch = Batch::random(dev, &mut rng, rows, PREDICT_SIZES[0], PREDICT_SIZES[3])?;
    let start = dev.memory_allocated();
    let out = model.forward(&batch.x)?;
    let with_grad = dev.memory_allocated() - start;
    drop(out);
    assert_eq!(
        dev.memory_allocated(),
        start,
        "dropping the output frees its graph"
    );
    let out = {
        let _no_grad = autograd::no_grad();
        model.forward(&batch.x)?
    };
    let without_grad = dev.memory_allocated() - start;
    drop(out);
    Ok(ForwardMemory {
        with_grad,
        without_grad,
    })
}

/// The prediction's activation for gpumem's.
fn predicted_activation(activation: Activation) -> ch08_predict::Activation {
    match activation {
        Activation::Relu => ch08_predict::Activation::Relu,
        Activation::Gelu => ch08_predict::Activation::Gelu,
    }
}

fn check_prediction(
    rows: usize,
    activation: Activation,
    want: ForwardMemory,
) -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    assert_eq!(
        measure_forward(&dev, rows, activation)?,
        want,
        "the allocator's numbers"
    );
    // The page's batch, then two drawn on this run: a copied number passes one case at most.
    let mut draw = gpumem::testing::Draw::from_env();
    for rows in [rows, draw.size(1, 1024), draw.size(1, 1024)] {
        gpumem::testing::reset(&dev);
        let predicted = predict_forward_memory(rows, predicted_activation(activation));
        let measured = measure_forward(&dev, rows, activation)?;
        Prediction::new(format!(
            "your prediction for {rows} rows and {activation:?}"
        ))
        .bytes("with_grad", predicted.with_grad, measured.with_grad)
        .rule("the output, and per hidden layer what its backward formula saves (each block rounded to 512 B)")
        .bytes(
            "without_grad",
            predicted.without_grad,
            measured.without_grad,
        )
        .rule("under no_grad() nothing is saved: the output only")
        .check();
    }
    Ok(())
}

#[test]
fn prediction_for_relu_and_48_rows_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_prediction(
            48,
            Activation::Relu,
            ForwardMemory {
                with_grad: 100_352,
                without_grad: 2_048,
            },
        )
    })
}

#[test]
fn prediction_for_gelu_and_48_rows_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_prediction(
            48,
            Activation::Gelu,
            ForwardMemory {
                with_grad: 198_656,
                without_grad: 2_048,
            },
        )
    })
}

#[test]
fn prediction_for_relu_and_3_rows_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_prediction(
            3,
            Activation::Relu,
            ForwardMemory {
                with_grad: 6_656,
                without_grad: 512,
            },
        )
    })
}

// ---- evaluate ----

#[test]
fn evaluate_returns_the_mean_loss_and_leaves_grad_mode_as_it_was() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = model(&dev, &mut rng)?;
        let data = batches(&dev, &mut rng, 3)?;
        let mut want = 0.0;
        for b in &data {
            want += b.loss(&model)?.item()? as f64 / 3.0;
        }
        let got = evaluate(&model, &data)? as f64;
        assert_close("mean loss", &[got], &[want], 1e-6);
        assert!(
            autograd::is_grad_enabled(),
            "grad mode is on again after evaluate"
        );
        assert!(
            model.parameters().iter().all(|p| p.grad().is_none()),
            "no backward ran"
        );
        Ok(())
    })
}

#[test]
fn evaluate_peaks_at_one_batch_without_a_graph() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        // Deep enough that a graph keeps more than a forward pass holds at its busiest moment: with
        // two hidden layers the two peaks are the same, and a missing no_grad() would go unseen.
        let deep = [32, 128, 128, 128, 128, 4];
        let model = Mlp::<f32>::new(&dev, &deep, Activation::Relu, &mut rng)?;
        let data = (0..4)
            .map(|_| Batch::random(&dev, &mut rng, 16, deep[0], deep[5]))
            .collect::<gpumem::Result<Vec<_>>>()?;
        let start = dev.memory_allocated();
        // One batch's loss with nothing saved: the peak evaluate must not exceed.
        dev.reset_peak_memory_stats();
        {
            let _no_grad = autograd::no_grad();
            data[0].loss(&model)?.item()?;
        }
        let one_batch = dev.max_memory_allocated() - start;
        // The same with the graph kept, for the message.
        dev.reset_peak_memory_stats();
        data[0].loss(&model)?.item()?;
        let with_graph = dev.max_memory_allocated() - start;
        dev.reset_peak_memory_stats();
        evaluate(&model, &data)?;
        let peak = dev.max_memory_allocated() - start;
        assert!(
            with_graph > one_batch,
            "the test's model keeps a graph worth seeing"
        );
        assert_eq!(
            peak, one_batch,
            "evaluate's peak above the model and data: {peak} B; one batch without a graph: \
             {one_batch} B, with its graph: {with_graph} B"
        );
        assert_eq!(dev.memory_allocated(), start);
        Ok(())
    })
}

// ---- the loss log ----

#[test]
fn loss_log_keeps_no_graph_while_the_loop_runs() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = model(&dev, &mut rng)?;
        let data = batches(&dev, &mut rng, 6)?;
        let start = dev.memory_allocated();
        let mut log = LossLog::default();
        for (step, batch) in data.iter().enumerate() {
            let loss = batch.loss(&model)?;
            log.record(&loss)?;
            drop(loss);
            assert_eq!(
                dev.memory_allocated() - start,
                0,
                "after recording step {step}'s loss and dropping it, the log holds device memory"
            );
        }
        Ok(())
    })
}

#[test]
fn loss_log_mean_is_the_mean_of_the_losses_and_backward_still_works() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = model(&dev, &mut rng)?;
        let data = batches(&dev, &mut rng, 4)?;
        let mut log = LossLog::default();
        let mut want = 0.0f64;
        for batch in &data {
            let loss = batch.loss(&model)?;
            log.record(&loss)?;
            want += loss.item()? as f64 / 4.0;
            loss.backward()?;
            model.sgd_step(0.01)?;
            model.zero_grad();
        }
        assert_close("mean loss", &[log.mean() as f64], &[want], 1e-6);
        Ok(())
    })
}

// ---- retain_graph ----

#[test]
fn backward_twice_gives_the_gradient_of_the_sum() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = model(&dev, &mut rng)?;
        let b = Batch::random(&dev, &mut rng, 16, SIZES[0], SIZES[3])?;
        let t2 = Tensor::uniform(&dev, &[16, SIZES[3]], -1.0, 1.0, &mut rng)?;
        let out = model.forward(&b.x)?;
        mse_loss(&out, &b.t)?
            .add(&mse_loss(&out, &t2)?)?
            .backward()?;
        let want: Vec<f64> = grads(&model)?;
        model.zero_grad();
        drop(out);
        backward_twice(&model, &b.x, &b.t, &t2)?;
        assert_close("gradients", &grads(&model)?, &want, 1e-5);
        Ok(())
    })
}

fn grads(model: &Mlp) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for p in model.parameters() {
        let g = p
            .grad()
            .ok_or_else(|| anyhow::anyhow!("a parameter has no gradient"))?;
        out.extend(g.to_vec()?.into_iter().map(f64::from));
    }
    Ok(out)
}

#[test]
fn backward_twice_frees_the_graph_with_the_second_backward() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = model(&dev, &mut rng)?;
        let b = Batch::random(&dev, &mut rng, 16, SIZES[0], SIZES[3])?;
        let t2 = Tensor::uniform(&dev, &[16, SIZES[3]], -1.0, 1.0, &mut rng)?;
        let start = dev.memory_allocated();
        let out = backward_twice(&model, &b.x, &b.t, &t2)?;
        assert_eq!(
            out.graph_saved_bytes(),
            0,
            "the output's graph still holds saved tensors"
        );
        let gradient_blocks: u64 = model
            .parameters()
            .iter()
            .map(|p| p.data().block_bytes() as u64)
            .sum();
        // Left: the gradients and the output's own block (16 × 4 f32: 512 B).
        assert_eq!(dev.memory_allocated() - start, gradient_blocks + 512);
        Ok(())
    })
}

// ---- the source's example, corrected ----

/// The block of an `[n, n]` f32 tensor: its bytes rounded up to a multiple of 512 (1000 × 1000:
/// 4,000,000 B, a block of 4,000,256; 100 × 100: 40,000 B, a block of 40,448).
fn block(n: usize) -> u64 {
    (n as u64 * n as u64 * 4).div_ceil(512).max(1) * 512
}

/// The page's size, then two drawn on this run: numbers copied from the page or a failure pass
/// one case at most.
fn example_sizes(page: usize) -> Vec<usize> {
    let mut draw = gpumem::testing::Draw::from_env();
    vec![page, draw.size(16, 1200), draw.size(16, 1200)]
}

/// `example(dev, n, use_no_grad)`, checked to have made `x` and `y` on the device (at least
/// two allocations): numbers worked out without running the example do not pass.
fn run_example(
    dev: &Device,
    example: fn(&Device, usize, bool) -> gpumem::Result<u64>,
    n: usize,
    use_no_grad: bool,
) -> anyhow::Result<u64> {
    gpumem::testing::reset(dev);
    let count = || {
        dev.memory_stats()
            .get("allocation.all.allocated")
            .unwrap_or(0)
    };
    let before = count();
    let kept = example(dev, n, use_no_grad)?;
    let made = count() - before;
    assert!(
        made >= 2,
        "n = {n}, use_no_grad = {use_no_grad}: {made} allocation(s) on the device; running the \
         example makes at least two (x, then y): measure it, do not work it out"
    );
    Ok(kept)
}

#[test]
fn times_two_keeps_only_its_result_with_or_without_no_grad() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    seeded(|| {
        for n in example_sizes(1000) {
            let b = block(n);
            let with_grad = run_example(&dev, kept_by_times_two, n, false)?;
            assert!(
                with_grad == b,
                "n = {n}, with grad: {with_grad}, expected {b}"
            );
            let no_grad = run_example(&dev, kept_by_times_two, n, true)?;
            assert!(
                no_grad == b,
                "n = {n}, under no_grad: {no_grad}, expected {b}"
            );
        }
        Ok(())
    })
}

#[test]
fn times_two_then_gelu_keeps_the_product_only_with_grad() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    seeded(|| {
        for n in example_sizes(100) {
            let b = block(n);
            let no_grad = run_example(&dev, kept_by_times_two_then_gelu, n, true)?;
            assert!(
                no_grad == b,
                "n = {n}, under no_grad: {no_grad}, expected {b}"
            );
            let with_grad = run_example(&dev, kept_by_times_two_then_gelu, n, false)?;
            assert!(
                with_grad == 2 * b,
                "n = {n}, with grad (the result and gelu's saved input): {with_grad}, expected {}",
                2 * b
            );
        }
        Ok(())
    })
}
