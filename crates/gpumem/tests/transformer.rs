//! A transformer layer's ops: gradients against central finite differences in f32, the three
//! attention backends agreeing (dropout included), the bytes each op saves pinned to the
//! allocator's numbers, and a GPT layer built as Korthikanti et al. count it measuring exactly
//! their `s·b·h·(34 + 5·a·s/h)`.

use gpumem::autograd::{
    Attention, AttentionBackend, GptLayer, LayerNormStats, LayerPlan, Tensor, lse_len, no_grad,
    sdpa,
};
use gpumem::ops::{Float, XorShift};
use gpumem::testing::{assert_close, device};
use gpumem::{Device, bf16};

type Case = fn(&[Tensor<f32>]) -> gpumem::Result<Tensor<f32>>;

/// `Σ out · r` for fixed random weights `r`: a loss whose gradient reaches every output element.
fn weighted_sum(out: &Tensor<f32>) -> gpumem::Result<Tensor<f32>> {
    let mut rng = XorShift::new(99);
    let r = Tensor::from_f32(
        out.device(),
        &rng.uniform_vec(out.numel(), -1.0, 1.0),
        out.shape(),
    )?;
    out.mul(&r)?.sum()
}

fn leaves(dev: &Device, data: &[(Vec<f32>, Vec<usize>)]) -> Vec<Tensor<f32>> {
    data.iter()
        .map(|(v, s)| {
            Tensor::from_f32(dev, v, s)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        })
        .collect()
}

fn loss_at(case: Case, dev: &Device, data: &[(Vec<f32>, Vec<usize>)]) -> f64 {
    let _g = no_grad();
    case(&leaves(dev, data)).unwrap().item().unwrap() as f64
}

/// Autograd's gradients of `case` against central differences, input by input.
fn gradcheck(name: &str, case: Case, shapes: &[&[usize]]) {
    let dev = device();
    let mut rng = XorShift::new(0x5eed ^ name.len() as u64);
    let data: Vec<(Vec<f32>, Vec<usize>)> = shapes
        .iter()
        .map(|s| (rng.uniform_vec(s.iter().product(), -1.0, 1.0), s.to_vec()))
        .collect();
    let inputs = leaves(&dev, &data);
    case(&inputs).unwrap().backward().unwrap();
    let eps = 1e-2f32;
    for (i, input) in inputs.iter().enumerate() {
        let got: Vec<f64> = input
            .grad()
            .unwrap_or_else(|| panic!("{name}: input {i} has no gradient"))
            .to_f32_vec()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        let want: Vec<f64> = (0..data[i].0.len())
            .map(|j| {
                let (mut plus, mut minus) = (data.clone(), data.clone());
                plus[i].0[j] += eps;
                minus[i].0[j] -= eps;
                (loss_at(case, &dev, &plus) - loss_at(case, &dev, &minus)) / (2.0 * eps as f64)
            })
            .collect();
        assert_close(&format!("{name} d/input{i}"), &got, &want, 1e-2);
    }
}

fn attention(backend: AttentionBackend, p: f32) -> Attention {
    Attention {
        causal: true,
        p,
        seed: 7,
        backend,
    }
}

#[test]
fn layer_op_gradients_match_finite_differences() {
    gradcheck(
        "bmm with a transposed operand, scale, causal mask, softmax",
        |x| {
            let s = x[0]
                .bmm(&x[1], true)?
                .mul_scalar(0.5)?
                .causal_mask()?
                .softmax()?;
            weighted_sum(&s)
        },
        &[&[2, 4, 3], &[2, 4, 3]],
    );
    gradcheck(
        "bmm",
        |x| weighted_sum(&x[0].bmm(&x[1], false)?),
        &[&[2, 3, 4], &[2, 4, 5]],
    );
    gradcheck(
        "dropout",
        |x| weighted_sum(&x[0].dropout(0.3, 11)?),
        &[&[2, 3, 8]],
    );
    for stats in [LayerNormStats::Keep, LayerNormStats::Recompute] {
        let case: Case = match stats {
            LayerNormStats::Keep => {
                |x| weighted_sum(&x[0].layer_norm(&x[1], &x[2], 1e-5, LayerNormStats::Keep)?)
            }
            LayerNormStats::Recompute => {
                |x| weighted_sum(&x[0].layer_norm(&x[1], &x[2], 1e-5, LayerNormStats::Recompute)?)
            }
        };
        gradcheck(
            &format!("layer_norm {stats:?}"),
            case,
            &[&[2, 3, 6], &[6], &[6]],
        );
    }
    gradcheck(
        "heads and merge_heads",
        |x| weighted_sum(&x[0].heads(2, 1, 3)?.mul_scalar(2.0)?.merge_heads(2)?),
        &[&[2, 3, 12]],
    );
}

#[test]
fn every_attention_backend_has_the_gradients_of_finite_differences() {
    gradcheck(
        "sdpa math",
        |x| {
            weighted_sum(&sdpa(
                &x[0],
                &x[1],
                &x[2],
                2,
                attention(AttentionBackend::Math, 0.25),
            )?)
        },
        &[&[4, 5, 3], &[4, 5, 3], &[4, 5, 3]],
    );
    gradcheck(
        "sdpa memory-efficient",
        |x| {
            let options = attention(AttentionBackend::MemoryEfficient, 0.25);
            weighted_sum(&sdpa(&x[0], &x[1], &x[2], 2, options)?)
        },
        &[&[4, 5, 3], &[4, 5, 3], &[4, 5, 3]],
    );
    gradcheck(
        "sdpa flash",
        |x| {
            weighted_sum(&sdpa(
                &x[0],
                &x[1],
                &x[2],
                1,
                attention(AttentionBackend::Flash, 0.0),
            )?)
        },
        &[&[2, 5, 3], &[2, 5, 3], &[2, 5, 3]],
    );
}

#[test]
fn the_backends_agree_with_dropout_on() {
    let dev = device();
    let mut rng = XorShift::new(3);
    let shape = [6, 8, 4];
    let data: Vec<Vec<f32>> = (0..3)
        .map(|_| rng.uniform_vec(6 * 8 * 4, -1.0, 1.0))
        .collect();
    let run = |backend| {
        let x = leaves(
            &dev,
            &data
                .iter()
                .map(|v| (v.clone(), shape.to_vec()))
                .collect::<Vec<_>>(),
        );
        let out = sdpa(&x[0], &x[1], &x[2], 2, attention(backend, 0.2)).unwrap();
        assert_eq!(out.shape(), [2, 8, 12]);
        weighted_sum(&out).unwrap().backward().unwrap();
        let mut values: Vec<f64> = out
            .to_f32_vec()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        for t in &x {
            values.extend(
                t.grad()
                    .unwrap()
                    .to_f32_vec()
                    .unwrap()
                    .into_iter()
                    .map(f64::from),
            );
        }
        values
    };
    let math = run(AttentionBackend::Math);
    for backend in [AttentionBackend::Flash, AttentionBackend::MemoryEfficient] {
        assert_close(
            &format!("{backend:?} against math"),
            &run(backend),
            &math,
            1e-5,
        );
    }
}

/// Bytes `op` leaves allocated above its input (held before and after), with the output held.
fn added_by<T: Float>(dev: &Device, op: impl FnOnce() -> Tensor<T>) -> (u64, Tensor<T>) {
    let before = dev.memory_allocated();
    let out = op();
    (dev.memory_allocated() - before, out)
}

fn bf16_leaf(dev: &Device, shape: &[usize]) -> Tensor<bf16> {
    let mut rng = XorShift::new(5);
    Tensor::uniform(dev, shape, -1.0, 1.0, &mut rng)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

#[test]
fn each_op_saves_what_torch_saves_on_cuda_to_the_byte() {
    let dev = device();
    // Dropout of 2·8·64 bf16 elements: a 2 KiB output and a 1 KiB mask of one byte per element.
    let x = bf16_leaf(&dev, &[2, 8, 64]);
    let (added, out) = added_by(&dev, || x.dropout(0.1, 1).unwrap());
    assert_eq!(added, 2048 + 1024);
    assert_eq!(out.graph_saved_bytes(), 1024);
    assert_eq!(out.grad_fn_name(), Some("NativeDropoutBackward0"));
    drop(out);
    // LayerNorm keeps f32 mean and rstd of its 16 rows: 64 bytes each, in a 512-byte block each.
    let (w, b) = (bf16_leaf(&dev, &[64]), bf16_leaf(&dev, &[64]));
    let (added, out) = added_by(&dev, || {
        x.layer_norm(&w, &b, 1e-5, LayerNormStats::Keep).unwrap()
    });
    assert_eq!(added, 2048 + 2 * 512);
    // Saved: the input (2 KiB), weight and bias (512 B blocks) and the two statistics.
    assert_eq!(out.graph_saved_bytes(), 2048 + 512 + 512 + 2 * 512);
    drop(out);
    let (added, _out) = added_by(&dev, || {
        x.layer_norm(&w, &b, 1e-5, LayerNormStats::Recompute)
            .unwrap()
    });
    assert_eq!(added, 2048);
    // A reshape is a view: no new block.
    let (added, view) = added_by(&dev, || x.reshape(&[16, 64]).unwrap());
    assert_eq!((added, view.data().ptr()), (0, x.data().ptr()));
}

#[test]
fn fused_attention_keeps_its_logsumexp_and_no_square_matrix() {
    let dev = device();
    // b = 2, a = 4, s = 40, d = 16: 8 heads of [40, 16] bf16 (10 KiB each tensor).
    let (q, k, v) = (
        bf16_leaf(&dev, &[8, 40, 16]),
        bf16_leaf(&dev, &[8, 40, 16]),
        bf16_leaf(&dev, &[8, 40, 16]),
    );
    let rows = 2 * 40 * 64 * 2;
    for (backend, lse) in [
        (AttentionBackend::Flash, 8 * 40 * 4),
        (AttentionBackend::MemoryEfficient, 8 * 64 * 4),
    ] {
        assert_eq!(8 * lse_len(backend, 40) * 4, lse);
        let (added, out) = added_by(&dev, || {
            sdpa(&q, &k, &v, 2, attention(backend, 0.1)).unwrap()
        });
        let lse_block = (lse as u64).div_ceil(512) * 512;
        assert_eq!(added, rows + lse_block, "{backend:?}");
        // q, k, v, the output and the logsumexp.
        assert_eq!(out.graph_saved_bytes() as u64, 3 * 10240 + rows + lse_block);
    }
    // The math backend keeps the softmax and dropout outputs (8·40·40 bf16, 25 KiB each) and the
    // 1-byte mask (12.5 KiB), with the merged output: q, k and v it shares.
    let (added, _out) = added_by(&dev, || {
        sdpa(&q, &k, &v, 2, attention(AttentionBackend::Math, 0.1)).unwrap()
    });
    assert_eq!(added, 2 * 25600 + 12800 + rows);
}

/// `s·b·h·(34 + 5·a·s/h)`: Korthikanti et al.'s bytes of one layer's activations.
fn paper(s: u64, b: u64, h: u64, a: u64) -> u64 {
    s * b * h * 34 + 5 * a * s * s * b
}

/// What one layer's forward leaves allocated above its input, with its output held (the output is
/// the next layer's input, as the input was this layer's: the difference is the bytes saved).
fn layer_bytes(s: usize, b: usize, h: usize, a: usize, plan: &LayerPlan) -> u64 {
    let dev = device();
    let mut rng = XorShift::new(1);
    let master = GptLayer::<f32>::new(&dev, h, a, &mut rng).unwrap();
    let layer: GptLayer<bf16> = master.cast().unwrap();
    let x = bf16_leaf(&dev, &[b, s, h]);
    let (added, out) = added_by(&dev, || layer.forward(&x, plan).unwrap());
    // What the graph saved, minus the input it shares, plus the output it does not save.
    let saved = out.graph_saved_bytes() as u64;
    // The parameters the graph saves: the four linear weights and the LayerNorms' weights and
    // biases (a linear's bias is not needed for its backward).
    let saved_params = [
        &layer.qkv.weight,
        &layer.proj.weight,
        &layer.fc1.weight,
        &layer.fc2.weight,
        &layer.ln1.0,
        &layer.ln1.1,
        &layer.ln2.0,
        &layer.ln2.1,
    ];
    let params: u64 = saved_params
        .iter()
        .map(|p| p.data().block_bytes() as u64)
        .sum();
    let io = x.data().block_bytes() as u64;
    assert_eq!(
        added,
        saved - params - io + io,
        "the graph's blocks are the measured ones"
    );
    added
}

#[test]
fn a_layer_built_as_the_paper_counts_measures_the_papers_formula_exactly() {
    for (s, b, h, a) in [(32, 2, 64, 4), (64, 1, 64, 2), (16, 4, 128, 8)] {
        let measured = layer_bytes(s, b, h, a, &LayerPlan::paper());
        let (s, b, h, a) = (s as u64, b as u64, h as u64, a as u64);
        assert_eq!(measured, paper(s, b, h, a), "s={s} b={b} h={h} a={a}");
    }
}

#[test]
fn layer_norm_statistics_and_the_fused_backends_change_the_formula_as_predicted() {
    let (s, b, h, a) = (32u64, 2u64, 64u64, 4u64);
    let (su, bu, hu, au) = (32, 2, 64, 4);
    // torch keeps 2 × (mean, rstd) of s·b f32 values: 256 B each, in 512 B blocks.
    let torch = layer_bytes(su, bu, hu, au, &LayerPlan::torch());
    assert_eq!(torch, paper(s, b, h, a) + 4 * 512);
    // Selective recomputation: the attention core checkpointed keeps q, k and v only: 34·s·b·h.
    let selective = LayerPlan {
        checkpoint_core: true,
        ..LayerPlan::paper()
    };
    assert_eq!(layer_bytes(su, bu, hu, au, &selective), 34 * s * b * h);
    // Fused attention: 34·s·b·h and a f32 logsumexp of b·a rows of s (flash) or ⌈s/32⌉·32.
    for backend in [AttentionBackend::Flash, AttentionBackend::MemoryEfficient] {
        let plan = LayerPlan {
            backend,
            ..LayerPlan::paper()
        };
        let lse = (b * a * lse_len(backend, su) as u64 * 4).div_ceil(512) * 512;
        assert_eq!(
            layer_bytes(su, bu, hu, au, &plan),
            34 * s * b * h + lse,
            "{backend:?}"
        );
    }
}

#[test]
fn the_layer_backpropagates_to_every_parameter_and_frees_what_it_saved() {
    let dev = device();
    let mut rng = XorShift::new(2);
    let layer = GptLayer::<f32>::new(&dev, 16, 2, &mut rng).unwrap();
    let x = Tensor::<f32>::uniform(&dev, &[2, 8, 16], -1.0, 1.0, &mut rng).unwrap();
    let before = dev.memory_allocated();
    for plan in [
        LayerPlan::torch(),
        LayerPlan {
            checkpoint_core: true,
            ..LayerPlan::paper()
        },
    ] {
        let loss = weighted_sum(&layer.forward(&x, &plan).unwrap()).unwrap();
        loss.backward().unwrap();
        drop(loss);
        for p in layer.parameters() {
            assert!(p.grad().is_some(), "a parameter has no gradient");
            p.clear_grad();
        }
        assert_eq!(
            dev.memory_allocated(),
            before,
            "{plan:?} left blocks behind"
        );
    }
}

#[test]
fn the_whole_layer_has_the_gradients_of_finite_differences_on_every_path() {
    fn run(x: &[Tensor<f32>], plan: LayerPlan) -> gpumem::Result<Tensor<f32>> {
        let mut rng = XorShift::new(4);
        let layer = GptLayer::<f32>::new(x[0].device(), 8, 2, &mut rng)?;
        weighted_sum(&layer.forward(&x[0], &plan)?)
    }
    gradcheck(
        "layer, torch's way",
        |x| run(x, LayerPlan::torch()),
        &[&[2, 4, 8]],
    );
    gradcheck(
        "layer, attention core checkpointed",
        |x| {
            let plan = LayerPlan {
                checkpoint_core: true,
                ..LayerPlan::paper()
            };
            run(x, plan)
        },
        &[&[2, 4, 8]],
    );
    gradcheck(
        "layer, memory-efficient attention",
        |x| {
            let plan = LayerPlan {
                backend: AttentionBackend::MemoryEfficient,
                ..LayerPlan::paper()
            };
            run(x, plan)
        },
        &[&[2, 4, 8]],
    );
}
