//! The optimizers against torch's update formulas computed on the host in f64 (SGD with momentum,
//! dampening, Nesterov and weight decay; Adam; AdamW), for both implementations; their state made
//! on the first step and its exact size in allocator bytes; the for-each step's temporaries as a
//! measured peak; zero_grad both ways.

use gpumem::Device;
use gpumem::autograd::Tensor;
use gpumem::ops::XorShift;
use gpumem::optim::{Adam, AdamOptions, Implementation, Optimizer, Sgd, SgdOptions};
use gpumem::testing::{assert_close, device};

/// Parameter lengths: blocks of 1,536, 512 and 4,096 B (under 1 MiB: multiples of 512 B).
const SIZES: [usize; 3] = [300, 40, 1000];

fn params(dev: &Device, rng: &mut XorShift) -> Vec<Tensor> {
    SIZES
        .iter()
        .map(|&n| {
            Tensor::uniform(dev, &[n], -1.0, 1.0, rng)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        })
        .collect()
}

/// Sets each parameter's gradient to `gs[i]` through backward of `Σ p·c`.
fn set_grads(dev: &Device, params: &[Tensor], gs: &[Vec<f32>]) {
    for (p, g) in params.iter().zip(gs) {
        p.clear_grad();
        let c = Tensor::from_f32(dev, g, &[g.len()]).unwrap();
        p.mul(&c).unwrap().sum().unwrap().backward().unwrap();
    }
}

fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn values(params: &[Tensor]) -> Vec<Vec<f64>> {
    params
        .iter()
        .map(|p| to_f64(&p.to_f32_vec().unwrap()))
        .collect()
}

/// Gradients for three steps.
fn gradients(rng: &mut XorShift) -> Vec<Vec<Vec<f32>>> {
    (0..3)
        .map(|_| {
            SIZES
                .iter()
                .map(|&n| rng.uniform_vec(n, -2.0, 2.0))
                .collect()
        })
        .collect()
}

/// torch's `_single_tensor_sgd` on the host.
fn sgd_reference(p0: &[Vec<f64>], grads: &[Vec<Vec<f32>>], o: SgdOptions) -> Vec<Vec<f64>> {
    let (lr, m, d, wd) = (
        o.lr as f64,
        o.momentum as f64,
        o.dampening as f64,
        o.weight_decay as f64,
    );
    let mut p = p0.to_vec();
    let mut bufs: Vec<Option<Vec<f64>>> = vec![None; p.len()];
    for step in grads {
        for (i, g) in step.iter().enumerate() {
            let mut g: Vec<f64> = g
                .iter()
                .zip(&p[i])
                .map(|(&g, &x)| g as f64 + wd * x)
                .collect();
            if m != 0.0 {
                let buf = match bufs[i].take() {
                    None => g.clone(),
                    Some(b) => b
                        .iter()
                        .zip(&g)
                        .map(|(b, g)| m * b + (1.0 - d) * g)
                        .collect(),
                };
                g = if o.nesterov {
                    g.iter().zip(&buf).map(|(g, b)| g + m * b).collect()
                } else {
                    buf.clone()
                };
                bufs[i] = Some(buf);
            }
            for (x, g) in p[i].iter_mut().zip(&g) {
                *x -= lr * g;
            }
        }
    }
    p
}

/// torch's `_single_tensor_adam` (and AdamW's decoupled decay) on the host.
fn adam_reference(
    p0: &[Vec<f64>],
    grads: &[Vec<Vec<f32>>],
    o: AdamOptions,
    decoupled: bool,
) -> Vec<Vec<f64>> {
    let (lr, b1, b2, eps, wd) = (
        o.lr as f64,
        o.betas.0 as f64,
        o.betas.1 as f64,
        o.eps as f64,
        o.weight_decay as f64,
    );
    let mut p = p0.to_vec();
    let mut m: Vec<Vec<f64>> = p.iter().map(|x| vec![0.0; x.len()]).collect();
    let mut v = m.clone();
    for (t, step) in grads.iter().enumerate() {
        let t = t as i32 + 1;
        for (i, g) in step.iter().enumerate() {
            let mut g: Vec<f64> = to_f64(g);
            if decoupled {
                p[i].iter_mut().for_each(|x| *x *= 1.0 - lr * wd);
            } else {
                g.iter_mut().zip(&p[i]).for_each(|(g, x)| *g += wd * x);
            }
            let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
            for j in 0..g.len() {
                m[i][j] = b1 * m[i][j] + (1.0 - b1) * g[j];
                v[i][j] = b2 * v[i][j] + (1.0 - b2) * g[j] * g[j];
                let denom = (v[i][j].sqrt() / bc2.sqrt()) + eps;
                p[i][j] -= lr / bc1 * m[i][j] / denom;
            }
        }
    }
    p
}

fn run(dev: &Device, make: impl Fn(Vec<Tensor>) -> Box<dyn Optimizer<f32>>) -> Vec<Vec<f64>> {
    let mut rng = XorShift::new(11);
    let params = params(dev, &mut rng);
    let grads = gradients(&mut rng);
    let mut opt = make(params.clone());
    for g in &grads {
        set_grads(dev, &params, g);
        opt.step().unwrap();
    }
    values(&params)
}

fn start(dev: &Device) -> (Vec<Vec<f64>>, Vec<Vec<Vec<f32>>>) {
    let mut rng = XorShift::new(11);
    let p = params(dev, &mut rng);
    (values(&p), gradients(&mut rng))
}

fn flat(v: &[Vec<f64>]) -> Vec<f64> {
    v.concat()
}

const IMPLEMENTATIONS: [Implementation; 2] = [Implementation::ForLoop, Implementation::ForEach];

#[test]
fn sgd_matches_torchs_formulas_with_momentum_dampening_nesterov_and_weight_decay() {
    let dev = device();
    let (p0, grads) = start(&dev);
    let cases = [
        SgdOptions {
            lr: 0.1,
            ..SgdOptions::default()
        },
        SgdOptions {
            lr: 0.1,
            momentum: 0.9,
            ..SgdOptions::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.8,
            dampening: 0.3,
            weight_decay: 0.01,
            ..SgdOptions::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.1,
            ..SgdOptions::default()
        },
    ];
    for o in cases {
        let want = sgd_reference(&p0, &grads, o);
        for implementation in IMPLEMENTATIONS {
            let o = SgdOptions {
                implementation,
                ..o
            };
            let got = run(&dev, |p| Box::new(Sgd::new(p, o).unwrap()));
            assert_close(&format!("{o:?}"), &flat(&got), &flat(&want), 1e-6);
        }
    }
}

#[test]
fn adam_and_adamw_match_torchs_formulas() {
    let dev = device();
    let (p0, grads) = start(&dev);
    let cases = [
        (AdamOptions::default(), false),
        (
            AdamOptions {
                lr: 0.01,
                betas: (0.8, 0.99),
                weight_decay: 0.05,
                ..AdamOptions::default()
            },
            false,
        ),
        (
            AdamOptions {
                lr: 0.01,
                ..AdamOptions::adamw()
            },
            true,
        ),
    ];
    for (o, decoupled) in cases {
        let want = adam_reference(&p0, &grads, o, decoupled);
        for implementation in IMPLEMENTATIONS {
            let o = AdamOptions {
                implementation,
                ..o
            };
            let got = run(&dev, |p| {
                Box::new(if decoupled {
                    Adam::adamw(p, o).unwrap()
                } else {
                    Adam::new(p, o).unwrap()
                })
            });
            // The update moved every weight (the test would pass for a no-op otherwise).
            let moved = flat(&got).iter().zip(flat(&p0)).all(|(a, b)| *a != b);
            assert!(moved, "{o:?}: some weight did not move");
            assert_close(
                &format!("{o:?} decoupled {decoupled}"),
                &flat(&got),
                &flat(&want),
                1e-5,
            );
        }
    }
}

/// Block bytes of `n` f32 values (all sizes here are under 1 MiB: 512-byte multiples).
fn block(n: usize) -> u64 {
    ((n * 4).div_ceil(512).max(1) * 512) as u64
}

#[test]
fn state_is_made_on_the_first_step_only_for_parameters_with_a_gradient() {
    let dev = device();
    let mut rng = XorShift::new(3);
    let params = params(&dev, &mut rng);
    // The second parameter gets no gradient.
    let gs: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.5; n]).collect();
    let with_grad = [0usize, 2];
    let set = |params: &[Tensor]| {
        for p in params {
            p.clear_grad();
        }
        for &i in &with_grad {
            set_grads(&dev, &params[i..=i], &gs[i..=i]);
        }
    };
    let param_bytes: u64 = with_grad.iter().map(|&i| block(SIZES[i])).sum();

    let mut sgd = Sgd::new(params.clone(), SgdOptions::default()).unwrap();
    set(&params);
    let before = dev.memory_allocated();
    sgd.step().unwrap();
    assert_eq!(sgd.state_bytes(), 0, "plain SGD keeps nothing");
    assert_eq!(dev.memory_allocated(), before);

    let momentum = SgdOptions {
        momentum: 0.9,
        ..SgdOptions::default()
    };
    let mut sgd = Sgd::new(params.clone(), momentum).unwrap();
    assert_eq!(sgd.state_bytes(), 0, "nothing before the first step");
    sgd.step().unwrap();
    assert_eq!(sgd.state_bytes(), param_bytes);
    assert_eq!(dev.memory_allocated(), before + param_bytes);
    assert!(sgd.momentum_buffer(1).is_none());
    drop(sgd);

    let mut adam = Adam::new(params.clone(), AdamOptions::default()).unwrap();
    assert_eq!(adam.state_bytes(), 0);
    adam.step().unwrap();
    assert_eq!(
        adam.state_bytes(),
        2 * param_bytes,
        "exp_avg and exp_avg_sq"
    );
    assert_eq!(dev.memory_allocated(), before + 2 * param_bytes);
    assert_eq!((adam.step_count(0), adam.step_count(1)), (1, 0));
    assert!(adam.moments(1).is_none());
    // Later steps make nothing new.
    adam.step().unwrap();
    assert_eq!(dev.memory_allocated(), before + 2 * param_bytes);
}

#[test]
fn the_for_each_step_holds_a_temporary_for_every_parameter_at_once() {
    let dev = device();
    let mut peaks = Vec::new();
    for implementation in [
        Implementation::ForLoop,
        Implementation::ForEach,
        Implementation::Default,
    ] {
        let mut rng = XorShift::new(5);
        let params = params(&dev, &mut rng);
        let gs: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
        set_grads(&dev, &params, &gs);
        let o = AdamOptions {
            implementation,
            ..AdamOptions::default()
        };
        let mut adam = Adam::new(params.clone(), o).unwrap();
        adam.step().unwrap(); // the state exists from here on
        let before = dev.memory_allocated();
        dev.reset_peak_memory_stats();
        adam.step().unwrap();
        assert_eq!(dev.memory_allocated(), before, "temporaries are freed");
        peaks.push(dev.max_memory_allocated() - before);
    }
    let blocks: Vec<u64> = SIZES.iter().map(|&n| block(n)).collect();
    let all: u64 = blocks.iter().sum();
    // For-loop: the root and the quotient of one parameter, while the denominator of the one
    // before it is still allocated (Python keeps `denom` until it is assigned again): here the
    // 40-element one's and the largest's two; for-each: a root per parameter; the default:
    // for-each, as torch 2.15 picks for CUDA tensors (the cpu device stands in for one).
    let for_loop = (0..blocks.len())
        .map(|i| 2 * blocks[i] + if i > 0 { blocks[i - 1] } else { 0 })
        .max()
        .unwrap();
    assert_eq!(for_loop, block(40) + 2 * block(1000));
    assert_eq!(peaks, vec![for_loop, all, all]);
}

#[test]
fn zero_grad_frees_the_gradients_by_default_and_keeps_zeros_otherwise() {
    let dev = device();
    let mut rng = XorShift::new(9);
    let params = params(&dev, &mut rng);
    let gs: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![1.0; n]).collect();
    set_grads(&dev, &params, &gs);
    let grads: u64 = SIZES.iter().map(|&n| block(n)).sum();
    let sgd = Sgd::new(params.clone(), SgdOptions::default()).unwrap();
    let with_grads = dev.memory_allocated();

    sgd.zero_grad(false).unwrap();
    assert_eq!(
        dev.memory_allocated(),
        with_grads,
        "set_to_none=False keeps the blocks"
    );
    for p in &params {
        let g = p.grad().expect("the gradient is still there");
        assert!(g.to_f32_vec().unwrap().iter().all(|&v| v == 0.0));
    }
    sgd.zero_grad(true).unwrap();
    assert_eq!(dev.memory_allocated(), with_grads - grads);
    assert!(params.iter().all(|p| p.grad().is_none()));
}

#[test]
fn bad_hyperparameters_are_errors_with_torchs_words() {
    let dev = device();
    let mut rng = XorShift::new(1);
    let p = params(&dev, &mut rng);
    let e = Sgd::new(
        p.clone(),
        SgdOptions {
            lr: -1.0,
            ..SgdOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("Invalid learning rate: -1"), "{e}");
    let e = Adam::new(
        p.clone(),
        AdamOptions {
            betas: (0.9, 1.0),
            ..AdamOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(
        e.to_string()
            .contains("Invalid beta parameter at index 1: 1"),
        "{e}"
    );
    let e = Sgd::new(
        p,
        SgdOptions {
            nesterov: true,
            ..SgdOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("Nesterov"), "{e}");
}

#[test]
fn a_step_bumps_the_version_of_each_parameter_it_updates() {
    let dev = device();
    let mut rng = XorShift::new(2);
    let params = params(&dev, &mut rng);
    let gs: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![1.0; n]).collect();
    set_grads(&dev, &params[..1], &gs[..1]);
    let mut sgd = Sgd::new(params.clone(), SgdOptions::default()).unwrap();
    sgd.step().unwrap();
    let versions: Vec<u64> = params.iter().map(Tensor::version).collect();
    assert_eq!(versions, vec![1, 0, 0]);
}
