//! Graded tests for chapter 9: gradient checkpointing.

use ch09_checkpointing::{
    Batch, ROWS, SourceModel, StepCost, WIDTH, checkpointed_loss, deep_mlp, measure_step,
    segment_ranges,
};
use ch09_predict::{CostPrediction, predict_cost};
use gpumem::Device;
use gpumem::autograd::{self, Mlp, Tensor, checkpoint_sequential, mse_loss};
use gpumem::testing::Prediction;
use gpumem::testing::{rng, seeded};

/// One hidden activation: 256 × 64 f32 (64 KiB).
const ACTIVATION: u64 = (ROWS * WIDTH * 4) as u64;
/// The output (256 × 8 f32, which mse_loss saves) and the loss (one f32 in a 512 B block).
const OUTPUT_AND_LOSS: u64 = 8192 + 512;

fn model_and_batch(dev: &Device, depth: usize) -> anyhow::Result<(Mlp, Batch)> {
    let mut rng = rng();
    let model = deep_mlp(dev, depth, &mut rng)?;
    let batch = Batch::random(dev, &mut rng)?;
    Ok((model, batch))
}

/// Every parameter's gradient, in order.
fn grads(params: &[Tensor]) -> anyhow::Result<Vec<f32>> {
    let mut out = Vec::new();
    for p in params {
        let g = p
            .grad()
            .ok_or_else(|| anyhow::anyhow!("a parameter has no gradient"))?;
        out.extend(g.to_vec()?);
    }
    Ok(out)
}

/// The test's own measurement of one step of `checkpoint_sequential` (the chapter's scenario).
fn measure(dev: &Device, model: &Mlp, batch: &Batch, segments: usize) -> anyhow::Result<StepCost> {
    model.zero_grad();
    let start = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let linears = autograd::forward_ops("linear");
    let out = checkpoint_sequential(&model.as_layers(), segments, &batch.x)?;
    let loss = mse_loss(&out, &batch.t)?;
    drop(out);
    let after_forward = dev.memory_allocated() - start;
    loss.backward()?;
    Ok(StepCost {
        after_forward,
        peak: dev.max_memory_allocated() - start,
        linear_forwards: autograd::forward_ops("linear") - linears,
    })
}

// ---- torch's segment rule ----

#[test]
fn segment_ranges_follow_torchs_rule() -> anyhow::Result<()> {
    assert_eq!(segment_ranges(8, 1)?, vec![0..8], "one segment");
    assert_eq!(
        segment_ranges(8, 3)?,
        vec![0..2, 2..4, 4..8],
        "8 layers in 3"
    );
    assert_eq!(
        segment_ranges(10, 3)?,
        vec![0..3, 3..6, 6..10],
        "10 layers in 3"
    );
    assert_eq!(
        segment_ranges(16, 4)?,
        vec![0..4, 4..8, 8..12, 12..16],
        "16 layers in 4"
    );
    let each: Vec<_> = (0..5).map(|i| i..i + 1).collect();
    assert_eq!(segment_ranges(5, 5)?, each, "one layer per segment");
    Ok(())
}

#[test]
fn segment_ranges_predict_the_recomputation_checkpoint_sequential_does() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        for (depth, segments) in [(8, 3), (10, 4), (9, 9), (7, 1)] {
            let (model, batch) = model_and_batch(&dev, depth)?;
            let cost = measure(&dev, &model, &batch, segments)?;
            let ranges = segment_ranges(depth, segments)?;
            let checkpointed: usize = ranges[..ranges.len() - 1].iter().map(|r| r.len()).sum();
            assert_eq!(
                cost.linear_forwards,
                (depth + checkpointed) as u64,
                "{depth} layers in {segments} segments: every layer ran once, and the layers of \
             the checkpointed segments (all but the last of {ranges:?}) once more"
            );
            let covered: usize = ranges.iter().map(|r| r.len()).sum();
            assert_eq!(covered, depth, "the ranges cover every layer once");
        }
        Ok(())
    })
}

#[test]
fn segment_ranges_reject_zero_and_too_many_segments() {
    let zero = segment_ranges(8, 0).expect_err("0 segments").to_string();
    assert!(zero.contains("segments"), "{zero}");
    let many = segment_ranges(8, 9)
        .expect_err("9 segments for 8 layers")
        .to_string();
    assert!(
        many.contains('9') && many.contains('8'),
        "the error names both numbers: {many}"
    );
}

// ---- the checkpointed loss ----

#[test]
fn checkpointed_loss_gives_the_same_loss_and_gradients_for_every_segment_count()
-> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let (model, batch) = model_and_batch(&dev, 8)?;
        let plain_loss = mse_loss(&model.forward(&batch.x)?, &batch.t)?;
        let plain_value = plain_loss.item()?;
        plain_loss.backward()?;
        let plain = grads(&model.parameters())?;
        let start = dev.memory_allocated();
        for segments in [1, 2, 4, 8] {
            model.zero_grad();
            let loss = checkpointed_loss(&model, &batch, segments)?;
            assert_eq!(loss.item()?, plain_value, "{segments} segments: the loss");
            loss.backward()?;
            drop(loss);
            assert_eq!(
                grads(&model.parameters())?,
                plain,
                "{segments} segments: the same gradients, bit for bit"
            );
            let gradients: u64 = model
                .parameters()
                .iter()
                .filter_map(|p| p.grad())
                .map(|g| g.data().block_bytes() as u64)
                .sum();
            model.zero_grad();
            assert!(gradients > 0);
            assert_eq!(
                dev.memory_allocated(),
                start - gradients,
                "{segments} segments: after backward and zero_grad, nothing is left but the model \
             and the batch"
            );
        }
        Ok(())
    })
}

#[test]
fn checkpointed_loss_in_four_segments_keeps_six_activations_of_fifteen() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let (model, batch) = model_and_batch(&dev, 16)?;
        let start = dev.memory_allocated();
        let plain = checkpointed_loss(&model, &batch, 1)?;
        let kept_plain = dev.memory_allocated() - start;
        let mut plain_nodes = plain.graph_nodes();
        drop(plain);
        assert_eq!(kept_plain, 15 * ACTIVATION + OUTPUT_AND_LOSS, "one segment");
        let loss = checkpointed_loss(&model, &batch, 4)?;
        let kept = dev.memory_allocated() - start;
        // Three segment boundaries, and the three hidden activations of the last segment.
        assert_eq!(kept, 6 * ACTIVATION + OUTPUT_AND_LOSS, "four segments");
        // torch 2.15's use_reentrant=False keeps every node inside a checkpointed segment (what they
        // save is a placeholder): the graph has the same nodes as the plain one.
        let mut nodes = loss.graph_nodes();
        nodes.sort_unstable();
        plain_nodes.sort_unstable();
        assert_eq!(nodes, plain_nodes, "the same nodes as without checkpoints");
        Ok(())
    })
}

// ---- measuring a step ----

#[test]
fn measure_step_reports_the_allocators_numbers() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let (model, batch) = model_and_batch(&dev, 16)?;
        // The same sizes in the same order give the same blocks on any device.
        for (segments, want) in [
            (
                1,
                StepCost {
                    after_forward: 15 * ACTIVATION + OUTPUT_AND_LOSS,
                    peak: 1_117_184,
                    linear_forwards: 16,
                },
            ),
            (
                4,
                StepCost {
                    after_forward: 6 * ACTIVATION + OUTPUT_AND_LOSS,
                    peak: 664_576,
                    linear_forwards: 28,
                },
            ),
            (
                16,
                StepCost {
                    after_forward: 15 * ACTIVATION + OUTPUT_AND_LOSS,
                    peak: 1_199_616,
                    linear_forwards: 31,
                },
            ),
        ] {
            let got = measure_step(&model, &batch, segments)?;
            assert_eq!(
                got,
                measure(&dev, &model, &batch, segments)?,
                "{segments} segments"
            );
            assert_eq!(got, want, "{segments} segments");
        }
        Ok(())
    })
}

#[test]
fn measure_step_leaves_the_gradients_and_repeats_exactly() -> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let (model, batch) = model_and_batch(&dev, 9)?;
        let start = dev.memory_allocated();
        let first = measure_step(&model, &batch, 3)?;
        let gradients: u64 = model
            .parameters()
            .iter()
            .map(|p| p.grad().map_or(0, |g| g.data().block_bytes() as u64))
            .sum();
        assert_eq!(
            gradients,
            model
                .parameters()
                .iter()
                .map(|p| p.data().block_bytes() as u64)
                .sum::<u64>(),
            "every parameter has a gradient"
        );
        assert_eq!(
            dev.memory_allocated() - start,
            gradients,
            "after the step only the gradients are left"
        );
        // A second step on a device whose peak is already higher, with old gradients to drop.
        let second = measure_step(&model, &batch, 3)?;
        assert_eq!(second, first, "the same step measures the same");
        Ok(())
    })
}

// ---- predict, then measure ----

fn check_prediction(depth: usize, segments: usize, want: CostPrediction) -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let measured_cost = |depth, segments| -> anyhow::Result<CostPrediction> {
        gpumem::testing::reset(&dev);
        let (model, batch) = model_and_batch(&dev, depth)?;
        let cost = measure(&dev, &model, &batch, segments)?;
        Ok(CostPrediction {
            after_forward: cost.after_forward,
            linear_forwards: cost.linear_forwards,
        })
    };
    assert_eq!(
        measured_cost(depth, segments)?,
        want,
        "the allocator's numbers"
    );
    // The page's case, then two drawn on this run: a copied number passes one case at most.
    let mut draw = gpumem::testing::Draw::from_env();
    let mut cases = vec![(depth, segments)];
    for _ in 0..2 {
        let depth = draw.size(2, 20);
        cases.push((depth, draw.size(1, depth)));
    }
    for (depth, segments) in cases {
        let predicted = predict_cost(depth, segments);
        let measured = measured_cost(depth, segments)?;
        Prediction::new(format!(
            "your prediction for {depth} layers in {segments} segments"
        ))
        .bytes(
            "after_forward",
            predicted.after_forward,
            measured.after_forward,
        )
        .rule("kept: each checkpointed segment's output, the last segment's hidden activations, the output and loss")
        .count(
            "linear_forwards",
            predicted.linear_forwards,
            measured.linear_forwards,
        )
        .rule("every layer runs once, and each checkpointed layer once more in backward")
        .check();
    }
    Ok(())
}

#[test]
fn prediction_for_16_layers_in_1_segment_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_prediction(
            16,
            1,
            CostPrediction {
                after_forward: 991_744,
                linear_forwards: 16,
            },
        )
    })
}

#[test]
fn prediction_for_16_layers_in_4_segments_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_prediction(
            16,
            4,
            CostPrediction {
                after_forward: 401_920,
                linear_forwards: 28,
            },
        )
    })
}

#[test]
fn prediction_for_10_layers_in_3_segments_matches_the_allocator() -> anyhow::Result<()> {
    seeded(|| {
        check_prediction(
            10,
            3,
            CostPrediction {
                after_forward: 336_384,
                linear_forwards: 16,
            },
        )
    })
}

// ---- the source's example ----

#[test]
fn forward_checkpointed_gives_the_plain_gradients_where_late_binding_does_not() -> anyhow::Result<()>
{
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let model = SourceModel::new(&dev, 6, &mut rng)?;
        let x = Tensor::uniform(&dev, &[32, WIDTH], -1.0, 1.0, &mut rng)?;
        let t = Tensor::uniform(&dev, &[32, WIDTH], -1.0, 1.0, &mut rng)?;
        // The output's values, every parameter's gradient (zeros where there is none), and how
        // many parameters got one.
        let step = |out: Tensor| -> anyhow::Result<(Vec<f32>, Vec<f32>, usize)> {
            let values = out.to_vec()?;
            mse_loss(&out, &t)?.backward()?;
            let mut g = Vec::new();
            let mut with_grad = 0;
            for p in model.parameters() {
                match p.grad() {
                    Some(grad) => {
                        g.extend(grad.to_vec()?);
                        with_grad += 1;
                    }
                    None => g.extend(vec![0.0; p.numel()]),
                }
                p.clear_grad();
            }
            Ok((values, g, with_grad))
        };
        let (plain_out, plain, _) = step(model.forward(&x)?)?;
        let (out, got, with_grad) = step(model.forward_checkpointed(&x)?)?;
        assert_eq!(out, plain_out, "the forward pass");
        assert_eq!(with_grad, 12, "every weight and bias has a gradient");
        assert_eq!(got, plain, "the gradients, bit for bit");
        // The bug, for comparison: the forward is right; every recomputation runs the last layer, so
        // backward reaches only its weight and bias.
        let (late_out, late, late_with_grad) = step(model.forward_late_binding(&x)?)?;
        assert_eq!(late_out, plain_out);
        assert_eq!(late_with_grad, 2);
        assert_ne!(late, plain);
        Ok(())
    })
}

#[test]
fn forward_checkpointed_keeps_what_the_plain_forward_keeps_and_recomputes_every_layer()
-> anyhow::Result<()> {
    seeded(|| {
        let dev = gpumem::testing::device();
        let mut rng = rng();
        let depth = 10;
        let model = SourceModel::new(&dev, depth, &mut rng)?;
        let x = Tensor::uniform(&dev, &[ROWS, WIDTH], -1.0, 1.0, &mut rng)?;
        let start = dev.memory_allocated();
        let plain = model.forward(&x)?;
        let kept_plain = dev.memory_allocated() - start;
        let mut plain_nodes = plain.graph_nodes();
        drop(plain);
        assert_eq!(
            kept_plain,
            depth as u64 * ACTIVATION,
            "plain: each ReLU output (the last is the result)"
        );
        let linears = autograd::forward_ops("linear");
        let out = model.forward_checkpointed(&x)?;
        assert_eq!(
            dev.memory_allocated() - start,
            kept_plain,
            "one layer per checkpoint keeps each layer's input: what the plain forward keeps"
        );
        let mut nodes = out.graph_nodes();
        nodes.sort_unstable();
        plain_nodes.sort_unstable();
        assert_eq!(
            nodes, plain_nodes,
            "torch 2.15's use_reentrant=False keeps the nodes inside each checkpoint"
        );
        out.sum()?.backward()?;
        assert_eq!(
            autograd::forward_ops("linear") - linears,
            2 * depth as u64,
            "every layer ran twice: once forward, once recomputed in backward"
        );
        for (i, layer) in model.layers.iter().enumerate() {
            assert!(layer.weight.grad().is_some(), "layer {i} has a gradient");
        }
        Ok(())
    })
}
