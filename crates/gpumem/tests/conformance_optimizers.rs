//! gpumem's optimizers against torch 2.15.0's (`conformance/goldens/optimizers.json`): the state
//! after the first step and its bytes, the step counter, the parameter values after three steps,
//! the defaults, `zero_grad`, and a failure while the first step creates Adam's state.

mod conformance_support;

use conformance_support::Conformance;
use gpumem::Device;
use gpumem::autograd::Tensor;
use gpumem::optim::{Adam, AdamOptions, Implementation, Optimizer, Sgd, SgdOptions};
use gpumem::testing::device;
use serde_json::{Value, json};

fn golden_values(shape: &[usize], start: usize, scale: f32) -> Vec<f32> {
    let n = shape.iter().product::<usize>();
    (0..n)
        .map(|k| (((start + k) % 17) as f32 - 8.0) / 8.0 * scale)
        .collect()
}

/// The golden's two parameters, `[3, 4]` and `[4]`.
fn params(dev: &Device, shapes: [&[usize]; 2]) -> Vec<Tensor> {
    [(shapes[0], 0), (shapes[1], 7)]
        .iter()
        .map(|(shape, start)| {
            Tensor::from_slice(dev, &golden_values(shape, *start, 1.0), shape)
                .and_then(|t| t.requires_grad_(true))
                .unwrap()
        })
        .collect()
}

/// Gives each parameter the golden's gradient: backward of `sum(p · g)` is exactly `g`.
fn set_grads(dev: &Device, params: &[Tensor]) {
    for (p, start) in params.iter().zip([11, 2]) {
        let g = Tensor::from_slice(dev, &golden_values(p.shape(), start, 0.25), p.shape()).unwrap();
        p.clear_grad();
        p.mul(&g).unwrap().sum().unwrap().backward().unwrap();
    }
}

/// An f32 as the f64 its shortest decimal names (torch's defaults are Python floats).
fn decimal(v: f32) -> f64 {
    v.to_string().parse().unwrap()
}

fn make(name: &str, params: Vec<Tensor>) -> Box<dyn Optimizer<f32>> {
    let implementation = if name.ends_with("for-each") {
        Implementation::ForEach
    } else {
        Implementation::ForLoop
    };
    let sgd = |momentum, dampening, nesterov, weight_decay| -> Box<dyn Optimizer<f32>> {
        Box::new(
            Sgd::new(
                params.clone(),
                SgdOptions {
                    lr: 0.1,
                    momentum,
                    dampening,
                    nesterov,
                    weight_decay,
                    implementation,
                },
            )
            .unwrap(),
        )
    };
    let base = name.rsplit_once(' ').unwrap().0;
    match base {
        "SGD lr=0.1" => sgd(0.0, 0.0, false, 0.0),
        "SGD lr=0.1 momentum=0.9" => sgd(0.9, 0.0, false, 0.0),
        "SGD lr=0.1 momentum=0.9 dampening=0.5" => sgd(0.9, 0.5, false, 0.0),
        "SGD lr=0.1 momentum=0.9 nesterov" => sgd(0.9, 0.0, true, 0.0),
        "SGD lr=0.1 momentum=0.9 weight_decay=0.01" => sgd(0.9, 0.0, false, 0.01),
        "Adam lr=0.1" | "Adam lr=0.1 weight_decay=0.01" => {
            let weight_decay = if base.contains("weight_decay") {
                0.01
            } else {
                0.0
            };
            let o = AdamOptions {
                lr: 0.1,
                weight_decay,
                implementation,
                ..AdamOptions::default()
            };
            Box::new(Adam::new(params, o).unwrap())
        }
        "AdamW lr=0.1" => {
            let o = AdamOptions {
                lr: 0.1,
                implementation,
                ..AdamOptions::adamw()
            };
            Box::new(Adam::adamw(params, o).unwrap())
        }
        other => panic!("no gpumem optimizer for {other}"),
    }
}

#[test]
fn optimizers_match_torch_2_15() {
    let dev = device();
    let mut c = Conformance::load("optimizers");
    for impl_name in ["for-loop", "for-each"] {
        for base in [
            "SGD lr=0.1",
            "SGD lr=0.1 momentum=0.9",
            "SGD lr=0.1 momentum=0.9 dampening=0.5",
            "SGD lr=0.1 momentum=0.9 nesterov",
            "SGD lr=0.1 momentum=0.9 weight_decay=0.01",
            "Adam lr=0.1",
            "Adam lr=0.1 weight_decay=0.01",
            "AdamW lr=0.1",
        ] {
            let name = format!("{base} {impl_name}");
            let ps = params(&dev, [&[3, 4], &[4]]);
            let is_adam = base.starts_with("Adam");
            let mut state = Vec::new();
            let mut steps = Vec::new();
            // Adam's state is read through its own type; SGD's through the momentum buffers.
            if is_adam {
                let o = AdamOptions {
                    lr: 0.1,
                    implementation: if impl_name == "for-each" {
                        Implementation::ForEach
                    } else {
                        Implementation::ForLoop
                    },
                    weight_decay: if base.contains("weight_decay") {
                        0.01
                    } else {
                        0.0
                    },
                    ..AdamOptions::default()
                };
                let mut adam = if base.starts_with("AdamW") {
                    Adam::adamw(
                        ps.clone(),
                        AdamOptions {
                            weight_decay: 0.01,
                            ..o
                        },
                    )
                } else {
                    Adam::new(ps.clone(), o)
                }
                .unwrap();
                set_grads(&dev, &ps);
                adam.step().unwrap();
                for (i, p) in ps.iter().enumerate() {
                    if adam.moments(i).is_some() {
                        for key in ["exp_avg", "exp_avg_sq"] {
                            state.push(json!({"param": i, "key": key, "bytes": p.numel() * 4,
                                              "dtype": "torch.float32"}));
                        }
                        // gpumem's step counter is a host number, where torch keeps a CPU tensor.
                        steps.push(json!({"param": i, "device": "cpu",
                                          "value": adam.step_count(i) as f64}));
                    }
                }
                for _ in 0..2 {
                    set_grads(&dev, &ps);
                    adam.step().unwrap();
                }
            } else {
                let mut opt = make(&name, ps.clone());
                set_grads(&dev, &ps);
                opt.step().unwrap();
                let bytes = opt.state_bytes();
                if bytes > 0 {
                    for (i, p) in ps.iter().enumerate() {
                        state.push(json!({"param": i, "key": "momentum_buffer",
                                          "bytes": p.numel() * 4, "dtype": "torch.float32"}));
                    }
                }
                for _ in 0..2 {
                    set_grads(&dev, &ps);
                    opt.step().unwrap();
                }
            }
            c.not_modelled(
                &name,
                "first step: parameter writes and the state existing at each",
            );
            c.check(&name, "state tensors after the first step", state);
            if is_adam {
                c.check(&name, "step counter after the first step", steps);
            }
            let values: Vec<f32> = ps.iter().flat_map(|p| p.to_vec().unwrap()).collect();
            c.check(&name, "parameter values after 3 steps", json!(values));
        }
    }
    let a = AdamOptions::default();
    c.check(
        "torch.optim.Adam defaults",
        "lr, betas, eps, weight_decay",
        json!([
            decimal(a.lr),
            [decimal(a.betas.0), decimal(a.betas.1)],
            decimal(a.eps),
            decimal(a.weight_decay)
        ]),
    );
    let a = AdamOptions::adamw();
    c.check(
        "torch.optim.AdamW defaults",
        "lr, betas, eps, weight_decay",
        json!([
            decimal(a.lr),
            [decimal(a.betas.0), decimal(a.betas.1)],
            decimal(a.eps),
            decimal(a.weight_decay)
        ]),
    );
    let s = SgdOptions::default();
    c.check(
        "torch.optim.SGD defaults",
        "lr, momentum, dampening, weight_decay, nesterov",
        json!([
            decimal(s.lr),
            decimal(s.momentum),
            decimal(s.dampening),
            decimal(s.weight_decay),
            s.nesterov
        ]),
    );
    for set_to_none in [true, false] {
        let ps = params(&dev, [&[3, 4], &[4]]);
        let opt = Sgd::new(
            ps.clone(),
            SgdOptions {
                lr: 0.1,
                ..SgdOptions::default()
            },
        )
        .unwrap();
        set_grads(&dev, &ps);
        opt.zero_grad(set_to_none).unwrap();
        let grads: Vec<Value> = ps
            .iter()
            .map(|p| p.grad().map_or(Value::Null, |g| json!(g.to_vec().unwrap())))
            .collect();
        c.check(
            &format!(
                "zero_grad(set_to_none={})",
                if set_to_none { "True" } else { "False" }
            ),
            "grads",
            grads,
        );
    }
    c.not_modelled("foreach=None (the default)", "devices that get for-each");
    c.not_modelled("foreach=None (the default)", "cpu tensors get for-each");

    // An out-of-memory on the last state tensor of the first step: parameters big enough that
    // each state tensor is its own 16 MiB segment (above 10 MiB, so not carved from a 20 MiB one), and a cap that leaves room for three of them.
    for (name, adamw) in [("Adam", false), ("AdamW", true)] {
        let scenario = format!("{name} for-loop, the last state tensor fails to allocate");
        let ps = params(&dev, [&[2048, 2048], &[2048, 2048]]);
        set_grads(&dev, &ps);
        let before: Vec<Vec<f32>> = ps.iter().map(|p| p.to_vec().unwrap()).collect();
        let o = AdamOptions {
            lr: 0.1,
            implementation: Implementation::ForLoop,
            ..if adamw {
                AdamOptions::adamw()
            } else {
                AdamOptions::default()
            }
        };
        let mut opt = if adamw {
            Adam::adamw(ps.clone(), o)
        } else {
            Adam::new(ps.clone(), o)
        }
        .unwrap();
        dev.empty_cache();
        let (_, total) = dev.mem_get_info().unwrap();
        let allowed = dev.memory_reserved() + 3 * (16 << 20) + (1 << 20);
        dev.set_per_process_memory_fraction(allowed as f64 / total as f64)
            .unwrap();
        let failed = opt.step().is_err();
        dev.clear_per_process_memory_fraction();
        c.check(&scenario, "step fails", failed);
        let after: Vec<Vec<f32>> = ps.iter().map(|p| p.to_vec().unwrap()).collect();
        c.check(&scenario, "parameters unchanged", before == after);
    }

    // The first for-loop step's peak above the parameters and gradients: the state, then one
    // parameter's root and quotient while the previous parameter's denominator is still held.
    for (name, weight_decay, adamw) in [
        ("Adam lr=0.1", 0.0, false),
        ("Adam lr=0.1 weight_decay=0.01", 0.01, false),
        ("AdamW lr=0.1", 0.01, true),
    ] {
        let scenario = format!("{name} for-loop, 8 parameters");
        let ps = eight_params(&dev);
        let o = AdamOptions {
            lr: 0.1,
            weight_decay,
            implementation: Implementation::ForLoop,
            ..AdamOptions::default()
        };
        let mut opt = if adamw {
            Adam::adamw(ps.clone(), o)
        } else {
            Adam::new(ps.clone(), o)
        }
        .unwrap();
        let before = dev.memory_allocated();
        dev.reset_peak_memory_stats();
        opt.step().unwrap();
        c.check(
            &scenario,
            "first step: peak of the new blocks (512-byte units), the step counters left out",
            dev.max_memory_allocated() - before,
        );
        c.not_modelled(
            &scenario,
            "first step: peak of the new blocks (512-byte units), with the step counters a CPU run allocates",
        );
    }
    c.finish();
}

/// The golden's eight parameters, `[3, 4]` and `[4]` four times, with their gradients.
fn eight_params(dev: &Device) -> Vec<Tensor> {
    let mut ps = Vec::new();
    for k in 0..4 {
        for (shape, start) in [(&[3, 4][..], 4 * k), (&[4][..], 4 * k + 7)] {
            let p = Tensor::from_slice(dev, &golden_values(shape, start, 1.0), shape)
                .and_then(|t| t.requires_grad_(true))
                .unwrap();
            let g =
                Tensor::from_slice(dev, &golden_values(shape, start + 11, 0.25), shape).unwrap();
            p.mul(&g).unwrap().sum().unwrap().backward().unwrap();
            ps.push(p);
        }
    }
    ps
}
