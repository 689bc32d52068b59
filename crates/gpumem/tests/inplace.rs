//! In-place ops and the version counter: a backward that needs a value written over since it was
//! saved fails with torch's message; in-place writes that autograd does not need give the same
//! gradients as the out-of-place ops and allocate nothing; torch's rules for leaves; an optimizer
//! step between a forward and its backward is caught.

use gpumem::autograd::{self, Activation, Mlp, Tensor, linear, mse_loss, no_grad};
use gpumem::ops::XorShift;
use gpumem::optim::{Optimizer, Sgd, SgdOptions};
use gpumem::testing::{assert_close, device};

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_f32_vec().unwrap().iter().map(|&v| v as f64).collect()
}

/// torch's name for an f32 tensor on `dev`'s kind of device: `torch.FloatTensor` on the CPU,
/// `torch.cuda.FloatTensor` on CUDA (as gpumem names it there; seen on an H100, 2026-11-27).
fn float_tensor(dev: &gpumem::Device) -> &'static str {
    if dev.is_cuda() {
        "torch.cuda.FloatTensor"
    } else {
        "torch.FloatTensor"
    }
}

#[test]
fn backward_after_writing_over_a_saved_tensor_fails_with_torchs_message() {
    let dev = device();
    let mut rng = XorShift::new(1);
    let x = Tensor::<f32>::uniform(&dev, &[4, 8], -1.0, 1.0, &mut rng).unwrap();
    let w = Tensor::uniform(&dev, &[4, 8], -1.0, 1.0, &mut rng)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    // MulBackward0 saves x for w's gradient.
    let loss = x.mul(&w).unwrap().sum().unwrap();
    assert_eq!(x.version(), 0);
    let x = x.mul_scalar_(2.0).unwrap();
    assert_eq!(x.version(), 1);
    let e = loss.backward().unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "one of the variables needed for gradient computation has been modified by an \
             inplace operation: [{} [4, 8]] is at version 1; expected version 0 \
             instead. Hint: enable anomaly detection to find the operation that failed to \
             compute its gradient, with torch.autograd.set_detect_anomaly(True, \
             check_nan=False).",
            float_tensor(&dev)
        )),
        "{e}"
    );
    assert!(w.grad().is_none(), "no gradient was accumulated");
}

#[test]
fn relu_in_place_on_relus_own_output_is_caught() {
    let dev = device();
    let mut rng = XorShift::new(2);
    let x = Tensor::<f32>::uniform(&dev, &[3, 5], -1.0, 1.0, &mut rng)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let h = x.mul_scalar(3.0).unwrap().relu().unwrap(); // ReluBackward0 saves h
    let h = h.add_(&Tensor::zeros(&dev, &[3, 5]).unwrap()).unwrap();
    let e = h.sum().unwrap().backward().unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "[{} [3, 5]], which is output 0 of Relu, is at version 1; expected version 0",
            float_tensor(&dev)
        )),
        "{e}"
    );
}

#[test]
fn relu_in_place_after_a_linear_layer_gives_the_same_gradients_and_allocates_nothing() {
    let dev = device();
    let mut grads = Vec::new();
    for in_place in [false, true] {
        let mut rng = XorShift::new(3);
        let model = Mlp::<f32>::new(&dev, &[16, 32, 4], Activation::Relu, &mut rng).unwrap();
        let x = Tensor::uniform(&dev, &[8, 16], -1.0, 1.0, &mut rng).unwrap();
        let t = Tensor::uniform(&dev, &[8, 4], -1.0, 1.0, &mut rng).unwrap();
        let (l0, l1) = (&model.layers[0], &model.layers[1]);
        let z = linear(&x, &l0.weight, Some(&l0.bias)).unwrap();
        let before = dev.memory_allocated();
        // AddmmBackward0 saved x and the weight, not z: z may be overwritten.
        let h = if in_place {
            z.relu_().unwrap()
        } else {
            z.relu().unwrap()
        };
        let added = dev.memory_allocated() - before;
        assert_eq!(
            added,
            if in_place { 0 } else { 1024 },
            "in place {in_place}"
        );
        assert_eq!(h.grad_fn_name(), Some("ReluBackward0"));
        let loss = mse_loss(&linear(&h, &l1.weight, Some(&l1.bias)).unwrap(), &t).unwrap();
        loss.backward().unwrap();
        grads.push(f64s(&l0.weight.grad().unwrap()));
    }
    assert!(grads[0].iter().any(|&g| g != 0.0));
    assert_close("first layer's weight gradient", &grads[1], &grads[0], 0.0);
}

#[test]
fn a_leaf_that_requires_grad_is_written_in_place_only_under_no_grad() {
    let dev = device();
    let w = Tensor::<f32>::from_f32(&dev, &[1.0, -2.0], &[2])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let e = w.clone().mul_scalar_(2.0).unwrap_err().to_string();
    assert!(
        e.contains("a leaf Variable that requires grad is being used in an in-place operation."),
        "{e}"
    );
    assert_eq!(w.version(), 0, "the refused write changed nothing");
    let w = {
        let _g = no_grad();
        w.mul_scalar_(2.0).unwrap()
    };
    assert_eq!(w.to_f32_vec().unwrap(), vec![2.0, -4.0]);
    assert_eq!(w.version(), 1);
    assert!(w.is_leaf() && w.requires_grad());
}

#[test]
fn mul_in_place_matches_mul_and_copies_the_old_values_only_when_needed() {
    let dev = device();
    let mut rng = XorShift::new(4);
    let a0 = rng.uniform_vec(256, 0.5, 2.0);
    let b0 = rng.uniform_vec(256, 0.5, 2.0);
    let mut results = Vec::new();
    for in_place in [false, true] {
        let a = Tensor::from_f32(&dev, &a0, &[256])
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let b = Tensor::from_f32(&dev, &b0, &[256])
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let h = a.mul_scalar(1.5).unwrap(); // a non-leaf to write into
        let before = dev.memory_allocated();
        let y = if in_place {
            h.mul_(&b).unwrap()
        } else {
            h.mul(&b).unwrap()
        };
        // Out of place: the product (1 KiB). In place: the copy of h's old values that b's
        // gradient needs, the same 1 KiB.
        assert_eq!(dev.memory_allocated() - before, 1024);
        y.sum().unwrap().backward().unwrap();
        results.push((f64s(&y), f64s(&a.grad().unwrap()), f64s(&b.grad().unwrap())));
    }
    assert_close("values", &results[1].0, &results[0].0, 0.0);
    assert_close("a's gradient", &results[1].1, &results[0].1, 0.0);
    assert_close("b's gradient", &results[1].2, &results[0].2, 0.0);
}

#[test]
fn copy_is_torchs_clone_a_new_block_and_gradients_pass_through() {
    let dev = device();
    let x = Tensor::<f32>::from_f32(&dev, &[1.0, 2.0, 3.0], &[3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let before = dev.memory_allocated();
    let y = x.copy().unwrap();
    assert_eq!(dev.memory_allocated() - before, 512);
    assert!(!y.data().shares_memory_with(x.data()));
    assert_eq!(y.grad_fn_name(), Some("CloneBackward0"));
    let y = y.mul_scalar_(2.0).unwrap();
    assert_eq!(
        x.version(),
        0,
        "writing into the copy leaves the original alone"
    );
    y.sum().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_f32_vec().unwrap(), vec![2.0; 3]);
    assert!(autograd::forward_ops("copy") > 0);
}

#[test]
fn an_optimizer_step_between_forward_and_backward_is_caught() {
    let dev = device();
    let mut rng = XorShift::new(6);
    let model = Mlp::<f32>::new(&dev, &[8, 16, 2], Activation::Relu, &mut rng).unwrap();
    let x = Tensor::<f32>::uniform(&dev, &[4, 8], -1.0, 1.0, &mut rng).unwrap();
    let t = Tensor::uniform(&dev, &[4, 2], -1.0, 1.0, &mut rng).unwrap();
    let loss = mse_loss(&model.forward(&x).unwrap(), &t).unwrap();
    loss.backward_with(true).unwrap();
    let mut sgd = Sgd::new(model.parameters(), SgdOptions::default()).unwrap();
    sgd.step().unwrap();
    // The second layer's AddmmBackward0 saved its weight [2, 16], which the step changed; a leaf,
    // so torch's message names no op.
    let e = loss.backward().unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "[{} [2, 16]] is at version 1; expected version 0",
            float_tensor(&dev)
        )),
        "{e}"
    );
}

#[test]
fn in_place_ops_refuse_other_shapes_and_leave_the_tensor_alone() {
    let dev = device();
    let x = Tensor::<f32>::from_f32(&dev, &[1.0, 2.0, 3.0], &[3]).unwrap();
    let y = Tensor::<f32>::from_f32(&dev, &[1.0, 2.0], &[2]).unwrap();
    let e = x.clone().add_(&y).unwrap_err().to_string();
    assert!(e.contains("shapes [3] and [2] differ"), "{e}");
    let e = x.clone().mul_(&y).unwrap_err().to_string();
    assert!(e.contains("shapes [3] and [2] differ"), "{e}");
    assert_eq!(x.version(), 0);
    assert_eq!(x.to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0]);
}
