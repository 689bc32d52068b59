//! Graded tests for chapter 12: what a transformer layer keeps.

use ch12_predict::{Shape, Term, paper_terms, predict_saved};
use ch12_transformer_activations::{
    bf16_layer, layer_forward, layer_input, longest_sequence, measure_saved, plan_of, torch_on_cuda,
};
use gpumem::Device;
use gpumem::autograd::{AttentionBackend, GptLayer, LayerPlan};
use gpumem::bf16;
use gpumem::testing::Prediction;
use gpumem::testing::{rng, seeded};

/// `s·b·h·(34 + 5·a·s/h)`, in integers.
fn formula(sh: Shape) -> u64 {
    34 * sh.s * sh.b * sh.h + 5 * sh.a * sh.s * sh.s * sh.b
}

fn shape(s: u64, b: u64, h: u64, a: u64) -> Shape {
    Shape { s, b, h, a }
}

/// The four plans of the chapter.
fn plans() -> [(&'static str, LayerPlan); 4] {
    [
        ("the paper's layer", LayerPlan::paper()),
        ("torch's layer", LayerPlan::torch()),
        (
            "attention core checkpointed",
            LayerPlan {
                checkpoint_core: true,
                ..LayerPlan::torch()
            },
        ),
        (
            "memory-efficient attention",
            LayerPlan {
                backend: AttentionBackend::MemoryEfficient,
                ..LayerPlan::torch()
            },
        ),
    ]
}

/// The test's own measurement, with gpumem's reference forward.
fn reference_bytes(dev: &Device, layer: &GptLayer<bf16>, sh: Shape, plan: &LayerPlan) -> u64 {
    let x = layer_input(dev, sh, &mut rng()).unwrap();
    let before = dev.memory_allocated();
    let out = layer.forward(&x, plan).unwrap();
    let measured = dev.memory_allocated() - before;
    drop(out);
    measured
}

fn layer_of(dev: &Device, sh: Shape) -> GptLayer<bf16> {
    bf16_layer(dev, sh.h as usize, sh.a as usize, &mut rng()).unwrap()
}

// ---- the paper's terms ----

#[test]
fn paper_terms_add_up_to_the_formula() {
    for sh in [
        shape(32, 2, 64, 4),
        shape(2048, 4, 4096, 32),
        shape(7, 3, 10, 5),
    ] {
        let total: u64 = paper_terms(sh).iter().map(|t| t.bytes).sum();
        assert_eq!(total, formula(sh), "{sh}: the terms add up to {total}");
    }
}

#[test]
fn paper_terms_are_the_fifteen_saved_tensors_in_order() {
    let sh = shape(32, 2, 64, 4);
    let (sbh, ass) = (4096, 8192);
    let want = [
        ("LayerNorm 1 input", 2 * sbh),
        ("QKV input", 2 * sbh),
        ("Q", 2 * sbh),
        ("K", 2 * sbh),
        ("softmax output", 2 * ass),
        ("attention dropout mask", ass),
        ("attention dropout output", 2 * ass),
        ("V", 2 * sbh),
        ("projection input", 2 * sbh),
        ("projection dropout mask", sbh),
        ("LayerNorm 2 input", 2 * sbh),
        ("fc1 input", 2 * sbh),
        ("GELU input", 8 * sbh),
        ("fc2 input", 8 * sbh),
        ("MLP dropout mask", sbh),
    ]
    .map(|(name, bytes)| Term { name, bytes });
    assert_eq!(paper_terms(sh), want);
}

// ---- the forward pass ----

#[test]
fn layer_forward_computes_gpumems_reference_bit_for_bit() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let sh = shape(16, 2, 32, 4);
        let layer = layer_of(&dev, sh);
        let x = layer_input(&dev, sh, &mut rng()).unwrap();
        for (what, plan) in plans() {
            let before = dev.memory_allocated();
            let want = layer.forward(&x, &plan).unwrap();
            let want_kept = dev.memory_allocated() - before;
            let got = layer_forward(&layer, &x, &plan).unwrap();
            let got_kept = dev.memory_allocated() - before - want_kept;
            assert_eq!(
                got_kept, want_kept,
                "{what}: the bytes the layer keeps for backward (the plan's checkpoint_core, stats \
                 and backend each change them)"
            );
            assert_eq!(got.shape(), want.shape(), "{what}: shape");
            assert_eq!(
                got.graph_nodes(),
                want.graph_nodes(),
                "{what}: the graph's nodes"
            );
            assert!(
                got.to_vec().unwrap() == want.to_vec().unwrap(),
                "{what}: the values differ"
            );
        }
    })
}

#[test]
fn layer_forward_backpropagates_to_every_parameter_and_frees_what_it_kept() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let sh = shape(8, 2, 16, 2);
        let layer = layer_of(&dev, sh);
        let x = layer_input(&dev, sh, &mut rng()).unwrap();
        let before = dev.memory_allocated();
        for (what, plan) in plans() {
            let loss = layer_forward(&layer, &x, &plan).unwrap().sum().unwrap();
            loss.backward().unwrap();
            drop(loss);
            for p in layer.parameters().iter().chain([&x]) {
                assert!(
                    p.grad().is_some(),
                    "{what}: a parameter or the input has no gradient"
                );
                p.clear_grad();
            }
            assert_eq!(dev.memory_allocated(), before, "{what}: blocks left behind");
        }
    })
}

// ---- measure ----

#[test]
fn measure_saved_reports_the_allocators_bytes() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let sh = shape(24, 2, 32, 4);
        let layer = layer_of(&dev, sh);
        for (what, plan) in plans() {
            let want = reference_bytes(&dev, &layer, sh, &plan);
            let x = layer_input(&dev, sh, &mut rng()).unwrap();
            let before = dev.memory_allocated();
            let got = measure_saved(&layer, &x, &plan).unwrap();
            assert_eq!(got, want, "{what}");
            assert_eq!(
                dev.memory_allocated(),
                before,
                "{what}: measure_saved keeps nothing"
            );
        }
    })
}

#[test]
fn the_layer_built_as_the_paper_counts_measures_the_formula_exactly() {
    seeded(|| {
        let dev = gpumem::testing::device();
        for sh in [shape(32, 2, 64, 4), shape(64, 1, 64, 2)] {
            let layer = layer_of(&dev, sh);
            let x = layer_input(&dev, sh, &mut rng()).unwrap();
            let measured = measure_saved(&layer, &x, &LayerPlan::paper()).unwrap();
            assert_eq!(measured, formula(sh), "{sh}");
        }
    })
}

// ---- predict ----

/// The rule every prediction is checked against.
const SAVED_RULE: &str = "the paper's terms, each its own 512-byte block; the s × s terms gone when \
     the core is checkpointed or fused; a fused core's f32 logsumexp; kept LayerNorm statistics";

fn check_predictions(sh: Shape) {
    // The page's shape, then one drawn on this run: a copied number passes one case at most.
    let mut draw = gpumem::testing::Draw::from_env();
    let a = draw.pick(&[1, 2, 4]);
    let drawn = shape(
        draw.range(1, 80),
        draw.range(1, 2),
        a * draw.pick(&[8, 10, 16]),
        a,
    );
    compare_predictions(&[sh, drawn], SAVED_RULE);
}

/// Compares `predict_saved` with the allocator for each plan at each of `shapes`.
fn compare_predictions(shapes: &[Shape], rule: &str) {
    let dev = gpumem::testing::device();
    for &sh in shapes {
        let predicted: Vec<u64> = plans()
            .iter()
            .map(|(_, plan)| predict_saved(sh, &plan_of(plan)))
            .collect();
        let layer = layer_of(&dev, sh);
        let mut prediction = Prediction::new(format!("your predictions for {sh}"));
        for ((what, plan), predicted) in plans().into_iter().zip(predicted) {
            let measured = reference_bytes(&dev, &layer, sh, &plan);
            prediction = prediction.bytes(what, predicted, measured).rule(rule);
        }
        prediction.check();
    }
}

#[test]
fn predict_saved_matches_the_allocator_on_whole_blocks() {
    seeded(|| {
        check_predictions(shape(32, 2, 64, 4));
    })
}

#[test]
fn predict_saved_matches_the_allocator_where_blocks_round_up() {
    seeded(|| {
        // s·b = 24 rows: 96-byte statistics and 1920-byte activations, each in a rounded block.
        check_predictions(shape(24, 1, 40, 4));
    })
}

#[test]
fn predict_saved_matches_the_allocator_where_padding_and_statistics_cross_a_block() {
    seeded(|| {
        // At b = 3 and a = 4 each logsumexp position is 48 bytes, and s from 65 to 85 pads up to
        // 96: at least 11 positions (528 bytes) more, so the padded logsumexp takes another block.
        // s·b from 195 to 255 rows make each f32 statistic 780 to 1020 bytes, two blocks, where
        // 2-byte statistics, or s values without b, fit one.
        let mut draw = gpumem::testing::Draw::from_env();
        let sh = shape(64 + draw.range(1, 21), 3, 4 * draw.pick(&[8, 10, 16]), 4);
        compare_predictions(
            &[sh],
            "the memory-efficient core pads each head's logsumexp to a multiple of 32 positions, \
             4 bytes each; each LayerNorm keeps an f32 mean and rstd for each of the s·b rows",
        );
    })
}

// ---- the longest sequence ----

/// 4 layers of h = 64, a = 4, b = 1 in 1 MiB.
const BUDGET: u64 = 1 << 20;
const LAYERS: u64 = 4;

#[test]
fn longest_sequence_fits_and_one_more_does_not() {
    seeded(|| {
        let dev = gpumem::testing::device();
        let sh = shape(0, 1, 64, 4);
        let layer = layer_of(&dev, sh);
        let mut found = Vec::new();
        for (what, plan) in plans().into_iter().skip(1) {
            let s = longest_sequence(BUDGET, LAYERS, sh, &plan);
            assert!(s > 0, "{what}: s = 0");
            let at = |s| LAYERS * reference_bytes(&dev, &layer, Shape { s, ..sh }, &plan);
            let (fits, over) = (at(s), at(s + 1));
            assert!(
                fits <= BUDGET,
                "{what}: s = {s} keeps {fits} B, above {BUDGET}"
            );
            assert!(
                over > BUDGET,
                "{what}: s = {} keeps {over} B and still fits",
                s + 1
            );
            found.push(s);
        }
        assert!(
            found[1] > found[0] && found[2] > found[0],
            "removing the s² term must fit longer sequences: {found:?}"
        );
    })
}

// ---- torch 2.15 ----

/// torch 2.15's saved bytes of the layer of `conformance/transformer_layer.py` on the CPU in
/// bf16 (`conformance/goldens/transformer_layer.json`, fact `saved_bytes`).
const TORCH_CPU: [(Shape, u64); 3] = [
    (
        Shape {
            s: 128,
            b: 2,
            h: 128,
            a: 4,
        },
        1_968_128,
    ),
    (
        Shape {
            s: 256,
            b: 2,
            h: 128,
            a: 4,
        },
        5_509_120,
    ),
    (
        Shape {
            s: 512,
            b: 1,
            h: 128,
            a: 8,
        },
        14_946_304,
    ),
];

#[test]
fn torch_on_cuda_accounts_for_every_byte_of_torchs_layer() {
    for (sh, cpu) in TORCH_CPU {
        let t = torch_on_cuda(sh, cpu);
        let Shape { s, b, h, a } = sh;
        assert_eq!(t.cpu, cpu, "{sh}: cpu");
        assert_eq!(
            t.mask_correction,
            a * s * s * b + 2 * s * b * h,
            "{sh}: mask correction"
        );
        assert_eq!(t.stats_correction, 8 * s * b, "{sh}: statistics correction");
        assert_eq!(
            t.cuda,
            cpu - t.mask_correction + t.stats_correction,
            "{sh}: cuda"
        );
        assert_eq!(t.over_paper, 16 * s * b, "{sh}: over the paper's formula");
        assert_eq!(
            t.cuda,
            formula(sh) + t.over_paper,
            "{sh}: every byte accounted for"
        );
    }
}

#[test]
fn torch_on_cuda_is_what_gpumems_layer_measures() {
    seeded(|| {
        let dev = gpumem::testing::device();
        for (sh, cpu) in TORCH_CPU.into_iter().take(2) {
            let layer = layer_of(&dev, sh);
            let measured = reference_bytes(&dev, &layer, sh, &LayerPlan::torch());
            assert_eq!(torch_on_cuda(sh, cpu).cuda, measured, "{sh}");
        }
    })
}
