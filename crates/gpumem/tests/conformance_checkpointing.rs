//! gpumem's checkpointing against torch 2.15.0's (`conformance/goldens/checkpointing.json`):
//! chapter 8's MLP through `checkpoint_sequential` with `use_reentrant` False and True, what the
//! graph keeps after the forward, its nodes, how many layers run in forward and again in
//! backward; and `checkpoint` when no input requires grad.

mod conformance_support;

use conformance_support::Conformance;
use gpumem::autograd::{self, Activation, Layer, Mlp, Reentrant, Tensor};
use gpumem::ops::XorShift;
use gpumem::testing::device;
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;

fn sorted(mut names: Vec<&'static str>) -> serde_json::Value {
    names.sort_unstable();
    json!(names)
}

#[test]
fn checkpointing_matches_torch_2_15() {
    let dev = device();
    let mut c = Conformance::load("checkpointing");
    for (activation, act) in [("relu", Activation::Relu), ("gelu", Activation::Gelu)] {
        for segments in [0, 1, 2, 4] {
            for reentrant in [false, true] {
                if segments == 0 && reentrant {
                    continue;
                }
                let label = if segments == 0 {
                    "no checkpoint".to_string()
                } else {
                    let batch = if reentrant {
                        " (the batch requires grad)"
                    } else {
                        ""
                    };
                    format!(
                        "checkpoint_sequential {segments} segments use_reentrant={}{batch}",
                        if reentrant { "True" } else { "False" }
                    )
                };
                let scenario = format!("MLP {activation} batch 64: {label}");
                let mut rng = XorShift::new(9);
                let model: Mlp =
                    Mlp::new(&dev, &[512, 1024, 1024, 1024, 10], act, &mut rng).unwrap();
                let params: Vec<u64> = model.parameters().iter().map(|p| p.data().ptr()).collect();
                let batch = Tensor::uniform(&dev, &[64, 512], 0.0, 1.0, &mut rng)
                    .unwrap()
                    .requires_grad_(reentrant)
                    .unwrap();
                let classes: Vec<usize> = (0..64).map(|i| i % 10).collect();
                let targets = autograd::class_targets(&dev, &classes, 10).unwrap();
                let runs = Rc::new(Cell::new(0u32));
                let layers: Vec<Layer<f32>> = model
                    .as_layers()
                    .into_iter()
                    .map(|layer| {
                        let runs = runs.clone();
                        Rc::new(move |x: &Tensor| {
                            runs.set(runs.get() + 1);
                            layer(x)
                        }) as Layer<f32>
                    })
                    .collect();
                let out = if segments == 0 {
                    layers.iter().try_fold(batch.clone(), |x, l| l(&x)).unwrap()
                } else {
                    let variant = if reentrant {
                        Reentrant::Yes
                    } else {
                        Reentrant::No
                    };
                    autograd::checkpoint_sequential_with(&layers, segments, &batch, variant)
                        .unwrap()
                };
                let loss = autograd::cross_entropy(&out, &targets).unwrap();
                drop(out);
                let excluded: Vec<u64> = params
                    .iter()
                    .copied()
                    .chain([batch.data().ptr(), targets.ptr()])
                    .collect();
                let kept: Vec<usize> = loss
                    .graph_saved()
                    .iter()
                    .filter(|s| !excluded.contains(&s.ptr))
                    .map(|s| s.bytes)
                    .collect();
                let forward = runs.get();
                c.check(
                    &scenario,
                    "kept bytes excluding parameters, the batch and the loss",
                    kept.iter().sum::<usize>(),
                );
                c.check(&scenario, "kept tensors", kept.len());
                c.check(&scenario, "graph_nodes", sorted(loss.graph_nodes()));
                c.check(&scenario, "layer runs in forward", forward);
                loss.backward().unwrap();
                c.check(&scenario, "layer runs in backward", runs.get() - forward);
                // gpumem prints no warnings; torch prints none in these runs either.
                c.check(&scenario, "warnings", json!([]));
            }
        }
    }
    c.not_modelled("checkpoint without use_reentrant", "warnings");
    c.not_modelled(
        "checkpoint without use_reentrant",
        "grad_fn (the variant chosen)",
    );
    for (reentrant, variant) in [("False", Reentrant::No), ("True", Reentrant::Yes)] {
        let scenario = format!("checkpoint use_reentrant={reentrant}, no input requires grad");
        let w = Tensor::from_slice(&dev, &[0.5f32; 24], &[3, 8])
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let x = Tensor::from_slice(&dev, &[0.25f32; 32], &[4, 8]).unwrap();
        let weight = w.clone();
        let f = move |a: &[Tensor]| autograd::linear(&a[0], &weight, None)?.relu();
        let out = autograd::checkpoint_with(f.clone(), std::slice::from_ref(&x), variant).unwrap();
        if out.requires_grad() {
            out.sum().unwrap().backward().unwrap();
        }
        if variant == Reentrant::Yes {
            c.not_modelled(&scenario, "warnings");
        } else {
            c.check(&scenario, "warnings", json!([]));
        }
        c.check(&scenario, "output requires_grad", out.requires_grad());
        c.check(&scenario, "weight gets a gradient", w.grad().is_some());
        let x = x.requires_grad_(true).unwrap();
        let out = autograd::checkpoint_with(f, std::slice::from_ref(&x), variant).unwrap();
        c.check(
            &format!("checkpoint use_reentrant={reentrant}, linear then relu"),
            "graph_nodes",
            sorted(out.graph_nodes()),
        );
    }
    c.finish();
}
