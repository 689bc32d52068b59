//! Chapter 8's autograd against torch 2.15.0's (`conformance/goldens/autograd.json`): for every op
//! and loss, the node names (`AccumulateGrad` and `TBackward0` included) and what is saved for
//! backward (bytes, dtype, which operand, one entry per storage); the grad modes; `retain_graph`;
//! and chapter 8's MLP with ReLU and with GELU.

mod conformance_support;

use conformance_support::Conformance;
use gpumem::Device;
use gpumem::autograd::{self, Activation, Mlp, Tensor};
use gpumem::ops::XorShift;
use gpumem::testing::device;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The golden's inputs: `(k mod 17 − 8) / 8` for k = start, start + 1, … (exact in f32).
pub fn values(dev: &Device, shape: &[usize], start: usize) -> Tensor {
    let n = shape.iter().product::<usize>();
    let v: Vec<f32> = (0..n)
        .map(|k| (((start + k) % 17) as f32 - 8.0) / 8.0)
        .collect();
    Tensor::from_slice(dev, &v, shape).expect("a tensor of the golden's values")
}

fn sorted(mut names: Vec<&'static str>) -> Value {
    names.sort_unstable();
    json!(names)
}

/// What `graph_saved` reports, as the golden writes it, naming the known operands.
fn saved(out: &Tensor, operands: &[(&str, u64)], parameters: &[u64]) -> Value {
    let names: HashMap<u64, &str> = operands.iter().map(|&(n, p)| (p, n)).collect();
    Value::Array(
        out.graph_saved()
            .into_iter()
            .filter(|s| !parameters.contains(&s.ptr))
            .map(|s| {
                json!({"operand": names.get(&s.ptr).copied().unwrap_or("new"),
                       "bytes": s.bytes, "dtype": s.dtype})
            })
            .collect(),
    )
}

type Build = fn(&Device, &Tensor, &Tensor) -> (Tensor, Vec<(&'static str, u64)>);

fn ops() -> Vec<(&'static str, Build)> {
    fn classes(dev: &Device) -> gpumem::Buffer<i64> {
        autograd::class_targets(dev, &[1, 0, 7, 3], 8).expect("targets")
    }
    vec![
        ("add", |_, x, y| (x.add(y).unwrap(), vec![])),
        ("mul", |_, x, y| (x.mul(y).unwrap(), vec![])),
        ("mul_scalar", |_, x, _| (x.mul_scalar(2.0).unwrap(), vec![])),
        ("matmul", |dev, x, _| {
            let yt = values(dev, &[8, 4], 3).requires_grad_(true).unwrap();
            (x.matmul(&yt).unwrap(), vec![])
        }),
        ("relu", |_, x, _| (x.relu().unwrap(), vec![])),
        ("gelu_tanh", |_, x, _| (x.gelu().unwrap(), vec![])),
        ("sum", |_, x, _| (x.sum().unwrap(), vec![])),
        ("mean", |_, x, _| (x.mean().unwrap(), vec![])),
        ("clone", |_, x, _| (x.copy().unwrap(), vec![])),
        ("mse_loss", |dev, x, _| {
            let t = values(dev, &[4, 8], 5);
            let ptr = t.data().ptr();
            (autograd::mse_loss(x, &t).unwrap(), vec![("target", ptr)])
        }),
        ("log_softmax", |_, x, _| {
            (autograd::log_softmax(x).unwrap(), vec![])
        }),
        ("nll_loss", |dev, x, _| {
            let c = classes(dev);
            let ptr = c.ptr();
            (autograd::nll_loss(x, &c).unwrap(), vec![("targets", ptr)])
        }),
        ("cross_entropy", |dev, x, _| {
            let c = classes(dev);
            let ptr = c.ptr();
            (
                autograd::cross_entropy(x, &c).unwrap(),
                vec![("targets", ptr)],
            )
        }),
        ("add_ (on a clone)", |_, x, y| {
            (x.copy().unwrap().add_(y).unwrap(), vec![])
        }),
        ("mul_ (on a clone)", |_, x, y| {
            (x.copy().unwrap().mul_(y).unwrap(), vec![])
        }),
        ("mul_ scalar (on a clone)", |_, x, _| {
            (x.copy().unwrap().mul_scalar_(2.0).unwrap(), vec![])
        }),
        ("relu_ (on a clone)", |_, x, _| {
            (x.copy().unwrap().relu_().unwrap(), vec![])
        }),
    ]
}

#[test]
fn autograd_matches_torch_2_15() {
    let dev = device();
    let mut c = Conformance::load("autograd");
    for (name, build) in ops() {
        let scenario = format!("op {name}");
        let x = values(&dev, &[4, 8], 0).requires_grad_(true).unwrap();
        let y = values(&dev, &[4, 8], 3).requires_grad_(true).unwrap();
        let (out, named) = build(&dev, &x, &y);
        let mut operands = vec![
            ("x", x.data().ptr()),
            ("y", y.data().ptr()),
            ("result", out.data().ptr()),
        ];
        operands.extend(named);
        c.check(&scenario, "grad_fn", out.grad_fn_name());
        c.check(&scenario, "graph_nodes", sorted(out.graph_nodes()));
        c.check(&scenario, "saved", saved(&out, &operands, &[]));
    }
    let linears: [(&str, bool, bool, Option<bool>); 3] = [
        (
            "linear (x, weight, bias require grad)",
            true,
            true,
            Some(true),
        ),
        (
            "linear (weight and bias require grad)",
            false,
            true,
            Some(true),
        ),
        ("linear (x requires grad, no bias)", true, false, None),
    ];
    for (name, need_x, need_w, need_b) in linears {
        let x = values(&dev, &[4, 8], 0).requires_grad_(need_x).unwrap();
        let w = values(&dev, &[3, 8], 2).requires_grad_(need_w).unwrap();
        let b = need_b.map(|r| values(&dev, &[3], 9).requires_grad_(r).unwrap());
        let out = autograd::linear(&x, &w, b.as_ref()).unwrap();
        let operands = [
            ("x", x.data().ptr()),
            ("weight", w.data().ptr()),
            ("result", out.data().ptr()),
        ];
        c.check(name, "grad_fn", out.grad_fn_name());
        c.check(name, "graph_nodes", sorted(out.graph_nodes()));
        c.check(name, "saved", saved(&out, &operands, &[]));
    }
    for (name, rx, ry) in [
        ("mul (only x requires grad)", true, false),
        ("mul (only y requires grad)", false, true),
        ("matmul (only x requires grad)", true, false),
    ] {
        let matmul = name.starts_with("matmul");
        let x = values(&dev, &[4, 8], 0).requires_grad_(rx).unwrap();
        let y = values(&dev, if matmul { &[8, 4] } else { &[4, 8] }, 3)
            .requires_grad_(ry)
            .unwrap();
        let out = if matmul { x.matmul(&y) } else { x.mul(&y) }.unwrap();
        let operands = [
            ("x", x.data().ptr()),
            ("y", y.data().ptr()),
            ("result", out.data().ptr()),
        ];
        c.check(name, "graph_nodes", sorted(out.graph_nodes()));
        c.check(name, "saved", saved(&out, &operands, &[]));
    }

    // Grad modes.
    let x = values(&dev, &[4, 8], 0).requires_grad_(true).unwrap();
    for mode in ["grad", "no_grad", "inference_mode"] {
        let out = {
            let _no_grad = (mode == "no_grad").then(autograd::no_grad);
            let _inference = (mode == "inference_mode").then(autograd::inference_mode);
            x.mul_scalar(2.0).unwrap().relu().unwrap()
        };
        let scenario = format!("relu(x * 2) under {mode}");
        c.check(&scenario, "requires_grad", out.requires_grad());
        c.check(&scenario, "grad_fn", out.grad_fn_name());
        c.check(&scenario, "is_inference", out.is_inference());
        let bytes: usize = out.graph_saved().iter().map(|s| s.bytes).sum();
        c.check(&scenario, "saved_bytes", bytes);
    }

    // retain_graph.
    let scenario = "backward twice, retain_graph=True first";
    let x = values(&dev, &[4, 8], 0).requires_grad_(true).unwrap();
    let loss = x.mul(&x).unwrap().sum().unwrap();
    loss.backward_with(true).unwrap();
    let first = x.grad().unwrap().to_vec().unwrap();
    loss.backward().unwrap();
    let second = x.grad().unwrap().to_vec().unwrap();
    let doubled = first.iter().zip(&second).all(|(a, b)| 2.0 * a == *b);
    c.check(scenario, "second backward adds", doubled);
    c.check(
        scenario,
        "third backward",
        loss.backward().err().map(|e| e.to_string()),
    );

    // Chapter 8's model.
    for (activation, act) in [("relu", Activation::Relu), ("gelu", Activation::Gelu)] {
        let scenario = format!("MLP 512-1024-1024-1024-10 {activation} batch 64 cross_entropy");
        let mut rng = XorShift::new(8);
        let model: Mlp = Mlp::new(&dev, &[512, 1024, 1024, 1024, 10], act, &mut rng).unwrap();
        let params: Vec<u64> = model.parameters().iter().map(|p| p.data().ptr()).collect();
        let batch = Tensor::uniform(&dev, &[64, 512], 0.0, 1.0, &mut rng).unwrap();
        let classes: Vec<usize> = (0..64).map(|i| i % 10).collect();
        let targets = autograd::class_targets(&dev, &classes, 10).unwrap();
        let loss = autograd::cross_entropy(&model.forward(&batch).unwrap(), &targets).unwrap();
        let kept = saved(&loss, &[], &params);
        let kept = kept.as_array().unwrap();
        c.check(&scenario, "graph_nodes", sorted(loss.graph_nodes()));
        c.check(&scenario, "saved tensors excluding parameters", kept.len());
        let bytes: u64 = kept.iter().map(|s| s["bytes"].as_u64().unwrap()).sum();
        c.check(&scenario, "saved bytes excluding parameters", bytes);
        let saved_params = loss
            .graph_saved()
            .iter()
            .filter(|s| params.contains(&s.ptr))
            .count();
        c.check(&scenario, "saved parameters", saved_params);
        let out = {
            let _no_grad = autograd::no_grad();
            model.forward(&batch).unwrap()
        };
        let scenario = format!("{scenario} under no_grad");
        let bytes: usize = out.graph_saved().iter().map(|s| s.bytes).sum();
        c.check(&scenario, "saved bytes", bytes);
        c.check(&scenario, "requires_grad", out.requires_grad());
    }
    c.finish();
}
