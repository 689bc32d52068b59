//! Graded tests for chapter 5: gradient accumulation.

use ch05_gradient_accumulation::{
    DeviceBatch, HostBatch, accumulate_gradients, forward_backward, micro_batch_rows,
    train_accumulated, upload_rows,
};
use ch05_predict::{PREDICT_SIZES, StepMemory, predict_step_memory};
use gpumem::Device;
use gpumem::ops::{Linear, Mlp, MlpGrads, XorShift};
use gpumem::testing::Prediction;
use gpumem::testing::assert_close;
use gpumem::testing::{rng, seeded};

/// The model of the accumulation tests: 64 inputs, 128 hidden units, 16 outputs.
const SIZES: [usize; 3] = [64, 128, 16];

/// Random examples for a model of `sizes`.
fn examples(rng: &mut XorShift, rows: usize, sizes: &[usize]) -> HostBatch {
    HostBatch::random(rng, rows, sizes[0], sizes[sizes.len() - 1])
}

/// The whole of `data` on the device, uploaded by the test itself.
fn on_device(dev: &Device, data: &HostBatch) -> anyhow::Result<DeviceBatch> {
    Ok(DeviceBatch {
        x: dev.from_slice(&data.x)?,
        t: dev.from_slice(&data.t)?,
        rows: data.rows(),
    })
}

/// Every gradient (weights and biases, layer by layer) as one f64 vector.
fn flat(grads: &MlpGrads) -> anyhow::Result<Vec<f64>> {
    Ok(grads.to_vec()?.into_iter().map(f64::from).collect())
}

/// Every parameter of `model` as one f64 vector.
fn parameters(model: &Mlp) -> anyhow::Result<Vec<f64>> {
    Ok(model
        .parameters_to_vec()?
        .into_iter()
        .map(f64::from)
        .collect())
}

/// The gradient of the mean loss over all of `data` in one pass, and that loss.
fn full_batch(dev: &Device, model: &Mlp, data: &HostBatch) -> anyhow::Result<(Vec<f64>, f32)> {
    let mut grads = model.zero_grads()?;
    let batch = on_device(dev, data)?;
    let loss = forward_backward(model, &mut grads, &batch, 1.0)?;
    Ok((flat(&grads)?, loss))
}

/// A second model with the same parameters.
fn copy_of(dev: &Device, model: &Mlp) -> anyhow::Result<Mlp> {
    let mut layers = Vec::new();
    for l in &model.layers {
        layers.push(Linear::from_host(
            dev,
            &l.weight.to_vec()?,
            &l.bias.to_vec()?,
            l.in_features,
            l.out_features,
        )?);
    }
    Ok(Mlp { layers })
}

// ---- micro_batch_rows and upload_rows ----

#[test]
fn micro_batch_rows_splits_an_even_batch_into_equal_parts() {
    let _dev = gpumem::testing::device();
    assert_eq!(micro_batch_rows(64, 4), vec![0..16, 16..32, 32..48, 48..64]);
    assert_eq!(micro_batch_rows(8, 1), vec![0..8]);
    assert_eq!(
        micro_batch_rows(3, 3),
        vec![0..1, 1..2, 2..3],
        "one row each"
    );
}

#[test]
fn micro_batch_rows_gives_the_remainder_to_the_first_micro_batches() {
    let _dev = gpumem::testing::device();
    assert_eq!(micro_batch_rows(10, 4), vec![0..3, 3..6, 6..8, 8..10]);
    assert_eq!(micro_batch_rows(30, 4), vec![0..8, 8..16, 16..23, 23..30]);
}

#[test]
fn upload_rows_copies_only_the_micro_batch() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let data = examples(&mut rng(), 32, &SIZES);
        let micro = upload_rows(&dev, &data, 8..11)?;
        assert_eq!(micro.rows, 3);
        assert_eq!(micro.x.to_vec()?, data.x[8 * 64..11 * 64]);
        assert_eq!(micro.t.to_vec()?, data.t[8 * 16..11 * 16]);
        let copies = dev.transfer_stats().host_to_device;
        assert_eq!(
            (copies.copies, copies.bytes),
            (2, 3 * 64 * 4 + 3 * 16 * 4),
            "one copy of the 3 input rows, one of the 3 target rows"
        );
        assert_eq!(
            dev.memory_allocated(),
            1024 + 512,
            "768 B of inputs in a 1024 B block, 192 B of targets in a 512 B block"
        );
        Ok(())
    })
}

// ---- accumulate_gradients ----

#[test]
fn accumulated_gradient_equals_the_full_batch_gradient() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let data = examples(&mut rng, 32, &SIZES);
        let (want, _) = full_batch(&dev, &model, &data)?;
        let mut grads = model.zero_grads()?;
        accumulate_gradients(&dev, &model, &mut grads, &data, 4)?;
        assert_close(
            "4 micro-batches of 8 against one batch of 32",
            &flat(&grads)?,
            &want,
            1e-5,
        );
        Ok(())
    })
}

#[test]
fn accumulated_gradient_weights_unequal_micro_batches_by_their_rows() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let data = examples(&mut rng, 30, &SIZES);
        let (want, _) = full_batch(&dev, &model, &data)?;
        let mut grads = model.zero_grads()?;
        accumulate_gradients(&dev, &model, &mut grads, &data, 4)?;
        assert_close(
            "micro-batches of 8, 8, 7 and 7 rows against one batch of 30",
            &flat(&grads)?,
            &want,
            1e-5,
        );
        Ok(())
    })
}

#[test]
fn accumulate_gradients_starts_from_zero() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let data = examples(&mut rng, 16, &SIZES);
        let (want, _) = full_batch(&dev, &model, &data)?;
        let mut grads = model.zero_grads()?;
        // What an earlier batch left behind.
        for g in &mut grads.layers {
            g.weight.copy_from_slice(&vec![1.0; g.weight.len()])?;
            g.bias.copy_from_slice(&vec![1.0; g.bias.len()])?;
        }
        accumulate_gradients(&dev, &model, &mut grads, &data, 2)?;
        assert_close("after a dirty start", &flat(&grads)?, &want, 1e-5);
        accumulate_gradients(&dev, &model, &mut grads, &data, 2)?;
        assert_close("run twice", &flat(&grads)?, &want, 1e-5);
        Ok(())
    })
}

#[test]
fn accumulate_gradients_returns_the_full_batch_loss() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let data = examples(&mut rng, 30, &SIZES);
        let (_, want) = full_batch(&dev, &model, &data)?;
        let mut grads = model.zero_grads()?;
        let loss = accumulate_gradients(&dev, &model, &mut grads, &data, 4)?;
        assert_close("loss", &[loss as f64], &[want as f64], 1e-5);
        Ok(())
    })
}

#[test]
fn accumulation_lowers_the_peak_but_not_the_gradient_memory() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let mut grads = model.zero_grads()?;
        // f32 blocks of 128×64, 128 and 16×128 floats, and 16 floats (64 B) in a 512 B block.
        let gradient_bytes = 32_768 + 512 + 8_192 + 512;
        assert_eq!(grads.block_bytes(), gradient_bytes);
        let data = examples(&mut rng, 32, &SIZES);
        let start = dev.memory_allocated();
        let mut peaks = Vec::new();
        for k in [1, 4] {
            dev.reset_peak_memory_stats();
            accumulate_gradients(&dev, &model, &mut grads, &data, k)?;
            peaks.push(dev.max_memory_allocated() - start);
            assert_eq!(
                dev.memory_allocated(),
                start,
                "k = {k}: nothing but the gradients outlives the call"
            );
            assert_eq!(
                grads.block_bytes(),
                gradient_bytes,
                "k = {k}: still one gradient per parameter"
            );
        }
        // On top of the model and its gradients, one (micro-)batch of m rows at a time:
        // inputs m×64 and targets m×16, then in backward the ReLU output and the hidden gradient
        // before and after ReLU (m×128 each), the output and its gradient (m×16 each); all f32.
        let one_micro_batch =
            |m: u64| m * 64 * 4 + m * 16 * 4 + 3 * (m * 128 * 4) + 2 * (m * 16 * 4);
        assert_eq!(
            peaks,
            vec![one_micro_batch(32), one_micro_batch(8)],
            "peak above the model and gradients for k = 1 and k = 4 (a second gradient buffer, or \
         micro-batches kept on the device, show up here)"
        );
        assert_eq!(peaks, vec![63_488, 15_872]);
        Ok(())
    })
}

// ---- train_accumulated ----

#[test]
fn train_accumulated_steps_once_every_k_micro_batches() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let mut model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let loader: Vec<HostBatch> = (0..8).map(|_| examples(&mut rng, 8, &SIZES)).collect();
        let mut grads = model.zero_grads()?;
        assert_eq!(
            train_accumulated(&dev, &mut model, &mut grads, &loader, 4, 0.1)?,
            2
        );
        assert!(
            flat(&grads)?.iter().all(|&g| g == 0.0),
            "the gradients are zeroed after each step"
        );
        assert_eq!(
            train_accumulated(&dev, &mut model, &mut grads, &loader[..6], 2, 0.1)?,
            3
        );
        Ok(())
    })
}

#[test]
fn train_accumulated_matches_sgd_on_the_full_batches() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let mut model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let mut reference = copy_of(&dev, &model)?;
        let before = parameters(&model)?;
        let loader: Vec<HostBatch> = (0..8).map(|_| examples(&mut rng, 8, &SIZES)).collect();
        let lr = 0.5;
        // Leftovers of earlier work in the gradients: the loop must zero them first.
        let mut grads = model.zero_grads()?;
        accumulate_gradients(&dev, &model, &mut grads, &loader[0], 1)?;
        train_accumulated(&dev, &mut model, &mut grads, &loader, 4, lr)?;

        // The same two steps, each on one batch of 4 × 8 rows.
        let mut ref_grads = reference.zero_grads()?;
        for group in loader.chunks(4) {
            let batch = HostBatch {
                x: group.iter().flat_map(|b| b.x.iter().copied()).collect(),
                t: group.iter().flat_map(|b| b.t.iter().copied()).collect(),
                in_features: 64,
                out_features: 16,
            };
            ref_grads.zero()?;
            forward_backward(&reference, &mut ref_grads, &on_device(&dev, &batch)?, 1.0)?;
            reference.sgd_step(&ref_grads, lr)?;
        }
        let change = |after: Vec<f64>| -> Vec<f64> {
            after.iter().zip(&before).map(|(a, b)| a - b).collect()
        };
        assert_close(
            "the change of every parameter",
            &change(parameters(&model)?),
            &change(parameters(&reference)?),
            1e-4,
        );
        Ok(())
    })
}

#[test]
fn train_accumulated_keeps_one_micro_batch_on_the_device() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let mut model = Mlp::new(&dev, &SIZES, &mut rng)?;
        let mut grads = model.zero_grads()?;
        let loader: Vec<HostBatch> = (0..8).map(|_| examples(&mut rng, 8, &SIZES)).collect();
        let start = dev.memory_allocated();
        dev.reset_peak_memory_stats();
        train_accumulated(&dev, &mut model, &mut grads, &loader, 4, 0.1)?;
        assert_eq!(dev.memory_allocated(), start, "every micro-batch was freed");
        assert_eq!(
            dev.max_memory_allocated() - start,
            15_872,
            "one micro-batch of 8 rows and its step, as in accumulate_gradients with k = 4"
        );
        Ok(())
    })
}

// ---- predict, then measure ----

/// Runs the prediction's scenario on an empty device and reads what the allocator counts.
fn measure_step(dev: &Device, rows: usize) -> anyhow::Result<StepMemory> {
    let mut rng = rng();
    let base = dev.memory_allocated();
    let model = Mlp::new(dev, &PREDICT_SIZES, &mut rng)?;
    let parameters = dev.memory_allocated() - base;
    let mut grads = model.zero_grads()?;
    let gradients = dev.memory_allocated() - base - parameters;
    let data = examples(&mut rng, rows, &PREDICT_SIZES);
    let before_data = dev.memory_allocated();
    let batch = on_device(dev, &data)?;
    let start = dev.memory_allocated();
    let (y, saved) = model.forward(&batch.x, rows)?;
    let saved_activations = dev.memory_allocated() - start;
    drop((y, saved));
    dev.reset_peak_memory_stats();
    forward_backward(&model, &mut grads, &batch, 1.0)?;
    let step_peak = dev.max_memory_allocated() - start;
    assert_eq!(dev.memory_allocated(), start, "the step freed what it made");
    Ok(StepMemory {
        parameters,
        gradients,
        batch_data: start - before_data,
        saved_activations,
        step_peak,
    })
}

/// Your prediction for `rows` beside the measurement, every number at once.
fn compare(rows: usize, p: &StepMemory, m: &StepMemory) {
    Prediction::new(format!("your prediction for {rows} rows"))
        .bytes("parameters", p.parameters, m.parameters)
        .rule("one block per weight and bias, each rounded up to 512 bytes")
        .bytes("gradients", p.gradients, m.gradients)
        .rule("one f32 gradient per parameter, whatever the batch")
        .bytes("batch_data", p.batch_data, m.batch_data)
        .rule("the batch's inputs and targets grow with its rows")
        .bytes(
            "saved_activations",
            p.saved_activations,
            m.saved_activations,
        )
        .rule("forward keeps the ReLU output and the model's output for backward")
        .bytes("step_peak", p.step_peak, m.step_peak)
        .rule("the most backward holds at once: activations and their gradients together")
        .check();
}

/// Row counts drawn on this run (requests stay at most 1 MiB): a prediction copied from the page
/// passes the page's batches at most.
#[test]
fn prediction_for_drawn_batches_matches_the_allocator() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let mut draw = gpumem::testing::Draw::from_env();
        for _ in 0..3 {
            let rows = draw.size(1, 1024);
            gpumem::testing::reset(&dev);
            let predicted = predict_step_memory(rows);
            let measured = measure_step(&dev, rows)?;
            compare(rows, &predicted, &measured);
        }
        Ok(())
    })
}

#[test]
fn prediction_for_a_batch_of_64_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        // The prediction is made before anything runs.
        let predicted = predict_step_memory(64);
        let measured = measure_step(&dev, 64)?;
        assert_eq!(
            measured,
            StepMemory {
                parameters: 140_800,
                gradients: 140_800,
                batch_data: 34_816,
                saved_activations: 67_584,
                step_peak: 200_704,
            },
            "the allocator's numbers"
        );
        compare(64, &predicted, &measured);
        Ok(())
    })
}

#[test]
fn prediction_for_a_micro_batch_of_16_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        // The prediction is made before anything runs.
        let predicted = predict_step_memory(16);
        let measured = measure_step(&dev, 16)?;
        assert_eq!(
            measured,
            StepMemory {
                parameters: 140_800,
                gradients: 140_800,
                batch_data: 8_704,
                saved_activations: 16_896,
                step_peak: 50_176,
            },
            "the allocator's numbers"
        );
        compare(16, &predicted, &measured);
        Ok(())
    })
}

#[test]
fn prediction_for_a_single_row_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        // The prediction is made before anything runs.
        let predicted = predict_step_memory(1);
        let measured = measure_step(&dev, 1)?;
        assert_eq!(
            measured,
            StepMemory {
                parameters: 140_800,
                gradients: 140_800,
                batch_data: 1_024,
                saved_activations: 1_536,
                step_peak: 4_096,
            },
            "the allocator's numbers"
        );
        compare(1, &predicted, &measured);
        Ok(())
    })
}
