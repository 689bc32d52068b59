//! The autograd: gradients against central finite differences (f32, and f16/bf16 against f32
//! differences), the bytes each op saves pinned to the allocator's numbers, backward freeing
//! what was saved, retain_graph, no_grad and inference mode, the leak of a loss kept with its
//! graph, and checkpointing (same gradients, less memory, counted recomputation).

use gpumem::autograd::{
    self, Activation, Layer, Mlp, Tensor, checkpoint, checkpoint_sequential, class_targets,
    cross_entropy, linear, log_softmax, mse_loss, nll_loss, no_grad,
};
use gpumem::ops::{self, Float, XorShift};
use gpumem::testing::{assert_close, device};
use gpumem::{Device, bf16, f16};

type Case<T> = fn(&[Tensor<T>], &Device) -> gpumem::Result<Tensor<T>>;

/// Values with magnitudes in [0.5, 2) and random signs: no ReLU kink within a step of them.
fn values(rng: &mut XorShift, n: usize) -> Vec<f32> {
    rng.nonzero_vec(n, 0.5, 2.0)
}

fn leaves<T: Float>(dev: &Device, data: &[(Vec<f32>, Vec<usize>)]) -> Vec<Tensor<T>> {
    data.iter()
        .map(|(v, s)| {
            Tensor::<T>::from_f32(dev, v, s)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        })
        .collect()
}

/// The loss of `case` at `data`, evaluated in f32 without a graph.
fn loss_at(case: Case<f32>, dev: &Device, data: &[(Vec<f32>, Vec<usize>)]) -> f64 {
    let _g = no_grad();
    let inputs = leaves::<f32>(dev, data);
    case(&inputs, dev).unwrap().item().unwrap() as f64
}

/// Compares the gradients autograd gives in `T` with central differences of the f32 loss.
fn gradcheck<T: Float>(
    name: &str,
    case: Case<T>,
    case_f32: Case<f32>,
    shapes: &[Vec<usize>],
    tol: f64,
) {
    let dev = device();
    let mut rng = XorShift::new(0x5eed ^ name.len() as u64);
    let mut data: Vec<(Vec<f32>, Vec<usize>)> = shapes
        .iter()
        .map(|s| (values(&mut rng, s.iter().product()), s.clone()))
        .collect();
    // Inputs exactly representable in T, so that T and f32 see the same point.
    for (v, _) in &mut data {
        v.iter_mut().for_each(|x| *x = T::from_f32(*x).to_f32());
    }
    let inputs = leaves::<T>(&dev, &data);
    case(&inputs, &dev).unwrap().backward().unwrap();
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
        let mut want = Vec::with_capacity(got.len());
        for j in 0..data[i].0.len() {
            let mut plus = data.clone();
            plus[i].0[j] += eps;
            let mut minus = data.clone();
            minus[i].0[j] -= eps;
            let d = loss_at(case_f32, &dev, &plus) - loss_at(case_f32, &dev, &minus);
            want.push(d / (2.0 * eps as f64));
        }
        assert_close(
            &format!("{name} d/input{i} ({})", T::DTYPE),
            &got,
            &want,
            tol,
        );
    }
}

fn case_linear<T: Float>(x: &[Tensor<T>], _: &Device) -> gpumem::Result<Tensor<T>> {
    linear(&x[0], &x[1], Some(&x[2]))?.relu()?.sum()
}
fn case_matmul<T: Float>(x: &[Tensor<T>], _: &Device) -> gpumem::Result<Tensor<T>> {
    x[0].matmul(&x[1])?.gelu()?.mean()
}
fn case_add_mul<T: Float>(x: &[Tensor<T>], _: &Device) -> gpumem::Result<Tensor<T>> {
    x[0].add(&x[1])?.mul(&x[1])?.mul_scalar(-1.5)?.sum()
}
fn case_mse<T: Float>(x: &[Tensor<T>], _: &Device) -> gpumem::Result<Tensor<T>> {
    mse_loss(&x[0].relu()?, &x[1])
}
fn case_cross_entropy<T: Float>(x: &[Tensor<T>], dev: &Device) -> gpumem::Result<Tensor<T>> {
    let targets = class_targets(dev, &[2, 0, 4, 1], 5)?;
    cross_entropy(&x[0].mul_scalar(0.5)?, &targets)
}

fn shapes(list: &[&[usize]]) -> Vec<Vec<usize>> {
    list.iter().map(|s| s.to_vec()).collect()
}

#[test]
fn f32_gradients_match_finite_differences_for_every_op() {
    let tol = 1e-2;
    let lin = shapes(&[&[3, 4], &[5, 4], &[5]]);
    gradcheck::<f32>("linear+relu+sum", case_linear, case_linear, &lin, tol);
    let mm = shapes(&[&[3, 4], &[4, 2]]);
    gradcheck::<f32>("matmul+gelu+mean", case_matmul, case_matmul, &mm, tol);
    let ew = shapes(&[&[2, 3], &[2, 3]]);
    gradcheck::<f32>("add+mul+mul_scalar", case_add_mul, case_add_mul, &ew, tol);
    gradcheck::<f32>("mse_loss", case_mse, case_mse, &ew, tol);
    let ce = shapes(&[&[4, 5]]);
    gradcheck::<f32>(
        "cross_entropy",
        case_cross_entropy,
        case_cross_entropy,
        &ce,
        tol,
    );
}

#[test]
fn half_precision_gradients_match_f32_finite_differences() {
    let lin = shapes(&[&[3, 4], &[5, 4], &[5]]);
    let mm = shapes(&[&[3, 4], &[4, 2]]);
    let ew = shapes(&[&[2, 3], &[2, 3]]);
    let ce = shapes(&[&[4, 5]]);
    gradcheck::<f16>("linear f16", case_linear, case_linear, &lin, 2e-2);
    gradcheck::<f16>("matmul f16", case_matmul, case_matmul, &mm, 2e-2);
    gradcheck::<f16>("add_mul f16", case_add_mul, case_add_mul, &ew, 2e-2);
    gradcheck::<f16>("mse f16", case_mse, case_mse, &ew, 2e-2);
    gradcheck::<f16>("ce f16", case_cross_entropy, case_cross_entropy, &ce, 2e-2);
    gradcheck::<bf16>("linear bf16", case_linear, case_linear, &lin, 6e-2);
    gradcheck::<bf16>("ce bf16", case_cross_entropy, case_cross_entropy, &ce, 6e-2);
}

/// Runs `op` on fresh hidden inputs and returns the bytes still allocated once the caller's
/// handles on the inputs are dropped (the output's block plus whatever the node saved), the output,
/// and the leaves behind the inputs (kept alive by the test, and by the graph where it records).
fn kept_after(
    dev: &Device,
    input_shapes: &[(&[usize], bool)],
    op: impl FnOnce(&[Tensor]) -> Tensor,
) -> (u64, Tensor, Vec<Tensor>) {
    let mut rng = XorShift::new(7);
    let leaves: Vec<Tensor> = input_shapes
        .iter()
        .map(|(s, r)| {
            Tensor::<f32>::from_f32(dev, &values(&mut rng, s.iter().product()), s)
                .unwrap()
                .requires_grad_(*r)
                .unwrap()
        })
        .collect();
    let inputs: Vec<Tensor> = leaves.iter().map(|l| l.mul_scalar(1.0).unwrap()).collect();
    let input_bytes: u64 = inputs.iter().map(|t| t.data().block_bytes() as u64).sum();
    let before = dev.memory_allocated() - input_bytes;
    let out = op(&inputs);
    drop(inputs);
    (dev.memory_allocated() - before, out, leaves)
}

/// (what, inputs (shape, requires grad), bytes kept, the op).
type OpCase = (
    &'static str,
    Vec<(&'static [usize], bool)>,
    u64,
    Box<dyn FnOnce(&[Tensor]) -> Tensor>,
);

const M: &[usize] = &[16, 64]; // 4096 B of f32: one block of exactly its size

#[test]
fn each_op_saves_what_torch_saves_in_exact_bytes() {
    let dev = device();
    let block = 4096u64;
    let scalar = 512u64; // a one-element result: the smallest block
    let cases: Vec<OpCase> = vec![
        (
            "add saves nothing",
            vec![(M, true), (M, true)],
            block,
            Box::new(|x| x[0].add(&x[1]).unwrap()),
        ),
        (
            "mul saves both",
            vec![(M, true), (M, true)],
            3 * block,
            Box::new(|x| x[0].mul(&x[1]).unwrap()),
        ),
        (
            "mul saves only the operand the other needs",
            vec![(M, true), (M, false)],
            2 * block,
            Box::new(|x| x[0].mul(&x[1]).unwrap()),
        ),
        (
            "mul_scalar saves nothing",
            vec![(M, true)],
            block,
            Box::new(|x| x[0].mul_scalar(2.0).unwrap()),
        ),
        (
            "relu saves its output",
            vec![(M, true)],
            block,
            Box::new(|x| x[0].relu().unwrap()),
        ),
        (
            "gelu saves its input",
            vec![(M, true)],
            2 * block,
            Box::new(|x| x[0].gelu().unwrap()),
        ),
        (
            "sum saves nothing",
            vec![(M, true)],
            scalar,
            Box::new(|x| x[0].sum().unwrap()),
        ),
        (
            "mean saves nothing",
            vec![(M, true)],
            scalar,
            Box::new(|x| x[0].mean().unwrap()),
        ),
        (
            "mse saves prediction and target",
            vec![(M, true), (M, false)],
            scalar + 2 * block,
            Box::new(|x| mse_loss(&x[0], &x[1]).unwrap()),
        ),
        (
            "matmul saves both",
            vec![(&[16, 64], true), (&[64, 16], true)],
            1024 + 2 * block,
            Box::new(|x| x[0].matmul(&x[1]).unwrap()),
        ),
        (
            "log_softmax saves its output",
            vec![(M, true)],
            block,
            Box::new(|x| log_softmax(&x[0]).unwrap()),
        ),
    ];
    for (what, shapes, want, op) in cases {
        let (kept, out, leaves) = kept_after(&dev, &shapes, op);
        assert_eq!(kept, want, "{what}");
        drop((out, leaves));
    }
    // Nothing saved survives its output.
    assert_eq!(dev.memory_allocated(), 0);
}

#[test]
fn linear_saves_its_input_and_cross_entropy_its_log_probabilities() {
    let dev = device();
    let mut rng = XorShift::new(3);
    let w = Tensor::<f32>::uniform(&dev, &[32, 64], -0.1, 0.1, &mut rng)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let b = Tensor::<f32>::zeros(&dev, &[32])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    // [16, 64] input, [16, 32] output (2048 B): the input is kept for the weight's gradient.
    let (kept, y, _leaves) = kept_after(&dev, &[(M, false)], |x| {
        linear(&x[0], &w, Some(&b)).unwrap()
    });
    assert_eq!(kept, 2048 + 4096);
    assert_eq!(y.grad_fn_name(), Some("AddmmBackward0"));
    drop(y);
    let targets = class_targets(&dev, &[1; 16], 64).unwrap(); // 16 i64: one 512 B block
    let (kept, loss, _leaves) = kept_after(&dev, &[(M, true)], |x| {
        cross_entropy(&x[0], &targets).unwrap()
    });
    // The loss (512), log_softmax's output (4096, saved by both nodes) and total_weight (512);
    // the logits themselves are freed: log_softmax saves its result, not its input.
    assert_eq!(kept, 512 + 4096 + 512);
    assert_eq!(
        loss.graph_nodes(),
        [
            "NllLossBackward0",
            "LogSoftmaxBackward0",
            "MulBackward0",
            "AccumulateGrad"
        ]
    );
    assert_eq!(loss.graph_saved_bytes(), 4096 + 512 + 512);
}

/// A 4-layer ReLU MLP of width 256 on a batch of 32: every hidden activation is 32 KiB.
fn mlp(dev: &Device, activation: Activation) -> (Mlp, Tensor, Tensor) {
    let mut rng = XorShift::new(11);
    let model = Mlp::new(dev, &[64, 256, 256, 256, 8], activation, &mut rng).unwrap();
    let x = Tensor::uniform(dev, &[32, 64], -1.0, 1.0, &mut rng).unwrap();
    let t = Tensor::uniform(dev, &[32, 8], -1.0, 1.0, &mut rng).unwrap();
    (model, x, t)
}

const HIDDEN: u64 = 32 * 256 * 4;

#[test]
fn a_forward_keeps_one_activation_per_relu_layer_and_two_per_gelu_layer() {
    let dev = device();
    for (activation, per_layer) in [(Activation::Relu, 1), (Activation::Gelu, 2)] {
        let (model, x, _) = mlp(&dev, activation);
        let base = dev.memory_allocated();
        let out = {
            let _g = no_grad();
            model.forward(&x).unwrap()
        };
        let inference = dev.memory_allocated() - base;
        assert_eq!(inference, 1024, "no_grad keeps only the [32, 8] output");
        assert!(!out.requires_grad());
        drop(out);
        let out = model.forward(&x).unwrap();
        let training = dev.memory_allocated() - base;
        assert_eq!(
            training - inference,
            3 * per_layer * HIDDEN,
            "{activation:?}"
        );
        drop(out);
        assert_eq!(
            dev.memory_allocated(),
            base,
            "dropping the output frees the graph"
        );
    }
}

#[test]
fn backward_frees_saved_tensors_unless_retain_graph() {
    let dev = device();
    let (model, x, t) = mlp(&dev, Activation::Relu);
    let params: u64 = model
        .parameters()
        .iter()
        .map(|p| p.data().block_bytes() as u64)
        .sum();
    let base = dev.memory_allocated();
    let loss = mse_loss(&model.forward(&x).unwrap(), &t).unwrap();
    let out_and_loss = 1024 + 512;
    assert_eq!(dev.memory_allocated() - base, out_and_loss + 3 * HIDDEN);
    loss.backward_with(true).unwrap();
    // retain_graph: the activations stay, the gradients arrive (one block per parameter).
    assert_eq!(
        dev.memory_allocated() - base,
        out_and_loss + 3 * HIDDEN + params
    );
    let first = model.layers[0].weight.grad().unwrap().to_vec().unwrap();
    loss.backward().unwrap();
    // The second backward added into .grad and freed every saved tensor, the output too (only
    // the mse node kept it): the loss's own block and the gradients stay.
    assert_eq!(dev.memory_allocated() - base, 512 + params);
    let second = model.layers[0].weight.grad().unwrap().to_vec().unwrap();
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(*b, a + a);
    }
    let err = loss.backward().unwrap_err().to_string();
    assert!(
        err.contains("Trying to backward through the graph a second time"),
        "{err}"
    );
}

#[test]
fn no_grad_and_inference_mode_save_nothing_and_inference_tensors_refuse_a_graph() {
    let dev = device();
    let (model, x, _) = mlp(&dev, Activation::Gelu);
    let base = dev.memory_allocated();
    let out = {
        let _g = autograd::inference_mode();
        assert!(!autograd::is_grad_enabled());
        model.forward(&x).unwrap()
    };
    assert!(autograd::is_grad_enabled(), "the guard restores grad mode");
    assert!(out.is_inference() && !out.requires_grad());
    assert_eq!(dev.memory_allocated() - base, 1024);
    assert_eq!(out.graph_saved_bytes(), 0);
    let w = Tensor::<f32>::zeros(&dev, &[4, 8])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let err = linear(&out, &w, None).unwrap_err().to_string();
    assert!(
        err.contains("Inference tensors cannot be saved for backward"),
        "{err}"
    );
}

#[test]
fn a_loss_accumulated_with_its_graph_grows_every_step_and_item_or_detach_does_not() {
    let dev = device();
    let (model, x, t) = mlp(&dev, Activation::Relu);
    // A training loop with no backward (an evaluation loop that forgot no_grad) keeps every step's
    // graph through the running total.
    // Each step's graph keeps its output (saved by mse) and activations; the loss's block and
    // the previous total are freed (the add saves neither).
    let step_graph = 1024 + 3 * HIDDEN;
    let mut total = Tensor::<f32>::zeros(&dev, &[]).unwrap();
    let mut previous = dev.memory_allocated();
    for step in 0..4 {
        let loss = mse_loss(&model.forward(&x).unwrap(), &t).unwrap();
        total = total.add(&loss).unwrap();
        drop(loss);
        let now = dev.memory_allocated();
        let grew = now - previous;
        assert_eq!(grew, step_graph, "step {step}");
        previous = now;
    }
    assert!(total.requires_grad());
    drop(total);
    // The fix: accumulate numbers (item) or tensors without a graph (detach).
    let base = dev.memory_allocated();
    let mut sum = 0.0f32;
    let mut detached = Tensor::<f32>::zeros(&dev, &[]).unwrap();
    for _ in 0..4 {
        let loss = mse_loss(&model.forward(&x).unwrap(), &t).unwrap();
        sum += loss.item().unwrap();
        detached = detached.add(&loss.detach()).unwrap();
        drop(loss);
        assert_eq!(
            dev.memory_allocated() - base,
            512,
            "only the running total stays"
        );
    }
    assert!(!detached.requires_grad());
    assert!((detached.item().unwrap() - sum).abs() <= 1e-5 * sum.abs());
}

#[test]
fn the_autograd_mlp_computes_what_the_hand_written_mlp_computes() {
    let dev = device();
    let sizes = [12, 32, 32, 4];
    let model = Mlp::<f32>::new(&dev, &sizes, Activation::Relu, &mut XorShift::new(5)).unwrap();
    let reference = ops::Mlp::new(&dev, &sizes, &mut XorShift::new(5)).unwrap();
    assert_eq!(
        model
            .parameters()
            .iter()
            .flat_map(|p| p.to_vec().unwrap())
            .collect::<Vec<_>>(),
        reference.parameters_to_vec().unwrap()
    );
    let mut rng = XorShift::new(9);
    let (xv, tv) = (values(&mut rng, 8 * 12), values(&mut rng, 8 * 4));
    let x = Tensor::from_slice(&dev, &xv, &[8, 12]).unwrap();
    let t = Tensor::from_slice(&dev, &tv, &[8, 4]).unwrap();
    let loss = mse_loss(&model.forward(&x).unwrap(), &t).unwrap();
    loss.backward().unwrap();
    let (xb, tb) = (dev.from_slice(&xv).unwrap(), dev.from_slice(&tv).unwrap());
    let (out, saved) = reference.forward(&xb, 8).unwrap();
    assert_eq!(loss.item().unwrap(), ops::mse_loss(&out, &tb).unwrap());
    let g = ops::mse_loss_backward(&out, &tb, 1.0).unwrap();
    let mut grads = reference.zero_grads().unwrap();
    reference.backward(saved, &g, &mut grads).unwrap();
    let ours: Vec<f64> = model
        .parameters()
        .iter()
        .flat_map(|p| p.grad().unwrap().to_vec().unwrap())
        .map(f64::from)
        .collect();
    let theirs: Vec<f64> = grads.to_vec().unwrap().into_iter().map(f64::from).collect();
    assert_close("gradients", &ours, &theirs, 1e-6);
}

#[test]
fn bad_requests_are_errors_with_torch_words() {
    let dev = device();
    let a = Tensor::<f32>::zeros(&dev, &[2, 3]).unwrap();
    let msg = |r: gpumem::Result<()>| r.unwrap_err().to_string();
    assert!(msg(a.backward()).contains("only for scalar outputs"));
    let s = a.sum().unwrap();
    assert!(msg(s.backward()).contains("does not require grad"));
    let r = a.requires_grad_(true).unwrap();
    let y = r.mul_scalar(2.0).unwrap();
    assert!(y.requires_grad_(false).is_err());
    assert!(r.item().unwrap_err().to_string().contains("6 elements"));
    let b = Tensor::<f32>::zeros(&dev, &[3, 2]).unwrap();
    assert!(r.add(&b).unwrap_err().to_string().contains("differ"));
    assert!(r.matmul(&r).is_err());
    assert!(
        class_targets(&dev, &[0, 5], 5)
            .unwrap_err()
            .to_string()
            .contains("out of bounds")
    );
    let logp = log_softmax(&b).unwrap();
    let short = class_targets(&dev, &[0], 2).unwrap();
    assert!(nll_loss(&logp, &short).is_err());
    assert!(Tensor::<f32>::from_slice(&dev, &[1.0; 5], &[2, 3]).is_err());
}

/// 8 ReLU layers of width 64 on a batch of 256: every hidden activation (64 KiB) outweighs a
/// layer's weight (16 KiB), as in training with long sequences.
fn deep(dev: &Device) -> (Mlp, Tensor, Tensor) {
    let mut rng = XorShift::new(21);
    let mut sizes = vec![32];
    sizes.extend([64; 7]);
    sizes.push(8);
    let model = Mlp::new(dev, &sizes, Activation::Relu, &mut rng).unwrap();
    let x = Tensor::uniform(dev, &[256, 32], -1.0, 1.0, &mut rng).unwrap();
    let t = Tensor::uniform(dev, &[256, 8], -1.0, 1.0, &mut rng).unwrap();
    (model, x, t)
}

/// Gradients, memory after forward, peak and linear forwards of one step with `segments`.
fn checkpointed_step(dev: &Device, segments: usize) -> (Vec<f32>, u64, u64, u64) {
    let (model, x, t) = deep(dev);
    let layers: Vec<Layer<f32>> = model.as_layers();
    let base = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let linears = autograd::forward_ops("linear");
    let out = checkpoint_sequential(&layers, segments, &x).unwrap();
    let loss = mse_loss(&out, &t).unwrap();
    drop(out);
    let after_forward = dev.memory_allocated() - base;
    loss.backward().unwrap();
    let peak = dev.max_memory_allocated() - base;
    let work = autograd::forward_ops("linear") - linears;
    let grads = model
        .parameters()
        .iter()
        .flat_map(|p| p.grad().unwrap().to_vec().unwrap())
        .collect();
    (grads, after_forward, peak, work)
}

#[test]
fn checkpoint_sequential_gives_the_same_gradients_with_less_memory_and_counted_recomputation() {
    let dev = device();
    let act = 256 * 64 * 4; // 64 KiB per hidden activation
    let out_and_loss = 8192 + 512;
    let (plain, plain_after, plain_peak, plain_work) = checkpointed_step(&dev, 1);
    // One segment checkpoints nothing (torch's rule): 7 activations, output and loss stay.
    assert_eq!(plain_after, 7 * act + out_and_loss);
    assert_eq!(plain_work, 8);
    // The peaks are the allocator's (deterministic: the same sizes in the same order on any
    // device); backward's peak comes when a segment is recomputed while the gradients of the
    // layers after it already exist.
    assert_eq!(plain_peak, 592_896);
    for (segments, kept_activations, recomputed, want_peak) in [
        (2, 1 + 3, 4, 529_408),
        (4, 3 + 1, 6, 495_616),
        // One layer per segment keeps every activation anyway, and the recomputation adds its
        // own: more than no checkpointing at all.
        (8, 7, 7, 675_328),
    ] {
        let (grads, after, peak, work) = checkpointed_step(&dev, segments);
        assert_eq!(
            grads, plain,
            "{segments} segments: the same gradients, bit for bit"
        );
        // Kept: each checkpointed segment's output (the next one's input) and the activations
        // of the last, uncheckpointed segment.
        assert_eq!(
            after,
            kept_activations * act + out_and_loss,
            "{segments} segments"
        );
        assert_eq!(work, 8 + recomputed, "{segments} segments: linear forwards");
        assert_eq!(peak, want_peak, "{segments} segments: peak");
    }
}

#[test]
fn checkpoint_reaches_parameters_when_no_input_requires_grad_and_is_plain_under_no_grad() {
    let dev = device();
    let (model, x, t) = deep(&dev);
    let layers = model.as_layers();
    let first = layers[0].clone();
    assert!(!x.requires_grad());
    let h = checkpoint(move |i: &[Tensor]| first(&i[0]), std::slice::from_ref(&x)).unwrap();
    // torch's use_reentrant=False output has the last inner node as its grad_fn.
    assert_eq!(h.grad_fn_name(), Some("ReluBackward0"));
    // Only the input is saved; the ReLU output that the layer would have saved is not.
    assert_eq!(h.graph_saved_bytes(), 256 * 32 * 4);
    let loss = mse_loss(
        &h.matmul(&Tensor::zeros(&dev, &[64, 8]).unwrap()).unwrap(),
        &t,
    )
    .unwrap();
    loss.backward().unwrap();
    assert!(model.layers[0].weight.grad().is_some());
    let _g = no_grad();
    let second = layers[1].clone();
    let y = checkpoint(move |i: &[Tensor]| second(&i[0]), &[h.detach()]).unwrap();
    assert!(y.grad_fn_name().is_none());
    assert!(checkpoint_sequential(&layers, 0, &x).is_err());
    assert!(checkpoint_sequential(&layers, 9, &x).is_err());
}

#[test]
fn checkpoint_passes_gradients_to_its_inputs_and_nests() {
    let dev = device();
    let mut rng = XorShift::new(4);
    let (model, _, _) = deep(&dev);
    let layers = model.as_layers();
    let x = Tensor::<f32>::uniform(&dev, &[8, 32], -1.0, 1.0, &mut rng)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let plain = |x: &Tensor| -> (Vec<f32>, Vec<f32>) {
        let loss = checkpoint_sequential(&layers, 1, x).unwrap().sum().unwrap();
        loss.backward().unwrap();
        let dx = x.grad().unwrap().to_vec().unwrap();
        let dw = model.layers[0].weight.grad().unwrap().to_vec().unwrap();
        x.clear_grad();
        model.zero_grad();
        (dx, dw)
    };
    let want = plain(&x);
    // Two segments of four layers, each itself checkpointed in two segments of two.
    let inner = |range: std::ops::Range<usize>| -> Layer<f32> {
        let segment: Vec<Layer<f32>> = layers[range].to_vec();
        std::rc::Rc::new(move |t: &Tensor| checkpoint_sequential(&segment, 2, t))
    };
    let outer: Vec<Layer<f32>> = vec![inner(0..4), inner(4..8)];
    let before = autograd::forward_ops("linear");
    let loss = checkpoint_sequential(&outer, 2, &x).unwrap().sum().unwrap();
    loss.backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec().unwrap(),
        want.0,
        "input gradient"
    );
    assert_eq!(
        model.layers[0].weight.grad().unwrap().to_vec().unwrap(),
        want.1,
        "first weight's gradient"
    );
    // Forward 8; the outer segment recomputed (4), within it the inner checkpoint's first two
    // layers again (2); the last segment's inner checkpoint recomputes its first two (2).
    assert_eq!(autograd::forward_ops("linear") - before, 8 + 4 + 2 + 2);
}
