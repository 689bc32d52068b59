//! Graded tests for chapter 15: several GPUs.

use ch15_predict::predict_per_rank;
use ch15_several_gpus::{PerRank, Stage, Training, fsdp_step, load_on_rank};
// The checkpoint, the sharded model and the measurement come from the given crate, never from
// your `src/`.
use ch15_given::{Checkpoint, measure_per_rank, shard_model};
use gpumem::collective::ProcessGroup;
use gpumem::optim::Optimizer;
use gpumem::testing::{Draw, Prediction};
use gpumem::{Buffer, Device};

/// The block a buffer of `bytes` takes (a multiple of 512 B).
fn block(bytes: u64) -> u64 {
    bytes.div_ceil(512).max(1) * 512
}

/// Tensors of `lens` elements on `cpu` (rank 0's device), saved, then dropped and their cache
/// emptied, with cpu's peaks reset: the checkpoint rank 0 wrote earlier.
fn rank0_checkpoint(group: &ProcessGroup, lens: &[usize]) -> Checkpoint {
    let dev = group.device(0).expect("rank 0");
    let tensors: Vec<Buffer<f32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let values: Vec<f32> = (0..n).map(|j| (i * 1000 + j) as f32).collect();
            dev.from_slice(&values).expect("a tensor")
        })
        .collect();
    let checkpoint = Checkpoint::save(&tensors.iter().collect::<Vec<_>>()).expect("save");
    drop(tensors);
    dev.empty_cache();
    dev.reset_peak_memory_stats();
    checkpoint
}

/// A world size and tensor lengths drawn for this run.
fn drawn_checkpoint(draw: &mut Draw) -> (usize, Vec<usize>) {
    let world = draw.pick(&[2usize, 3, 4]);
    let lens = (0..draw.range(1, 5))
        .map(|_| draw.size(1, 300_000))
        .collect();
    (world, lens)
}

#[test]
fn load_on_rank_puts_every_tensor_on_the_ranks_device() {
    gpumem::testing::seeded(|| {
        let (world, lens) = drawn_checkpoint(&mut Draw::from_env());
        let group = gpumem::testing::devices(world);
        let checkpoint = rank0_checkpoint(&group, &lens);
        let expected = checkpoint.load(Some(&Device::cpu())).expect("load");
        let expected: Vec<Vec<f32>> = expected.iter().map(|t| t.to_vec().unwrap()).collect();
        let last = world - 1;
        let loaded = load_on_rank(&checkpoint, &group, last).expect("load_on_rank");
        assert_eq!(loaded.len(), lens.len(), "one buffer per saved tensor");
        let mine = group.device(last).unwrap();
        for (i, t) in loaded.iter().enumerate() {
            assert_eq!(t.device(), mine, "tensor {i} of rank {last}");
            assert_eq!(t.to_vec().unwrap(), expected[i], "tensor {i}'s values");
        }
        let blocks: u64 = lens.iter().map(|&n| block(4 * n as u64)).sum();
        assert_eq!(
            mine.memory_allocated(),
            blocks,
            "rank {last}'s device holds its copy of the checkpoint"
        );
    })
}

#[test]
fn load_on_rank_leaves_device_0_to_rank_0() {
    gpumem::testing::seeded(|| {
        let (world, lens) = drawn_checkpoint(&mut Draw::from_env());
        let group = gpumem::testing::devices(world);
        let checkpoint = rank0_checkpoint(&group, &lens);
        let blocks: u64 = lens.iter().map(|&n| block(4 * n as u64)).sum();
        let mut held = Vec::new();
        for rank in 0..world {
            held.push(load_on_rank(&checkpoint, &group, rank).expect("load_on_rank"));
        }
        let zero = group.device(0).unwrap();
        assert_eq!(
            zero.max_memory_allocated(),
            blocks,
            "device 0 held rank 0's copy and never another rank's, not even for a moment"
        );
        for (rank, dev) in group.devices().iter().enumerate() {
            assert_eq!(
                dev.memory_allocated(),
                blocks,
                "rank {rank}'s device, {dev}"
            );
        }
    })
}

#[test]
fn load_on_rank_refuses_a_rank_outside_the_group() {
    let group = gpumem::testing::devices(2);
    let checkpoint = rank0_checkpoint(&group, &[10]);
    let err = load_on_rank(&checkpoint, &group, 2).expect_err("rank 2 of 2");
    assert!(
        err.to_string().contains("no rank 2 in a group of 2"),
        "the error names the rank: {err}"
    );
    for dev in group.devices() {
        assert_eq!(dev.memory_allocated(), 0, "{dev}: nothing loaded");
    }
}

/// torch.optim.Adam's defaults, on the host in f64, over `steps` gradients: the reference.
fn adam_reference(params: &[f32], grads: &[Vec<f32>]) -> Vec<f64> {
    let (lr, b1, b2, eps) = (1e-3f64, 0.9f64, 0.999f64, 1e-8f64);
    let mut p: Vec<f64> = params.iter().map(|&x| x as f64).collect();
    let mut m = vec![0.0; p.len()];
    let mut v = vec![0.0; p.len()];
    for (t, g) in grads.iter().enumerate() {
        let t = (t + 1) as i32;
        for i in 0..p.len() {
            let g = g[i] as f64;
            m[i] = b1 * m[i] + (1.0 - b1) * g;
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
            let denom = (v[i] / (1.0 - b2.powi(t))).sqrt() + eps;
            p[i] -= lr / (1.0 - b1.powi(t)) * m[i] / denom;
        }
    }
    p
}

/// A world size, a parameter count (a multiple of 128 per rank) and data drawn for this run.
fn drawn_model(draw: &mut Draw) -> (usize, Vec<f32>) {
    let world = draw.pick(&[2usize, 3, 4]);
    let n = 128 * world * draw.size(1, 40);
    let params = (0..n)
        .map(|_| draw.range(0, 2000) as f32 / 100.0 - 10.0)
        .collect();
    (world, params)
}

/// Each rank's batch: values the gradient is taken against, all below the parameters by 10 or
/// more, so that no averaged gradient is near zero (where Adam's step turns on its sign, and a
/// rounding apart flips it).
fn drawn_batches(draw: &mut Draw, world: usize, n: usize) -> Vec<Vec<f32>> {
    (0..world)
        .map(|_| {
            (0..n)
                .map(|_| draw.range(0, 1000) as f32 / 100.0 - 30.0)
                .collect()
        })
        .collect()
}

#[test]
fn fsdp_step_matches_adam_on_the_averaged_gradient() {
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let (world, params) = drawn_model(&mut draw);
        let group = gpumem::testing::devices(world);
        let mut ranks = shard_model(&group, &params).expect("shard_model");
        let mut host = params.clone();
        let mut grads = Vec::new();
        for _ in 0..2 {
            let batches = drawn_batches(&mut draw, world, params.len());
            // The gradient of ½‖p − b‖² is p − b; averaged over the ranks.
            let mean: Vec<f32> = (0..params.len())
                .map(|i| batches.iter().map(|b| host[i] - b[i]).sum::<f32>() / world as f32)
                .collect();
            fsdp_step(&group, &mut ranks, &batches).expect("fsdp_step");
            grads.push(mean);
            let reference = adam_reference(&params, &grads);
            host = reference.iter().map(|&x| x as f32).collect();
            let got: Vec<f64> = ranks
                .iter()
                .flat_map(|r| r.shard.to_vec().unwrap())
                .map(f64::from)
                .collect();
            gpumem::testing::assert_close(
                "the shards, in rank order, after Adam on the gradient averaged over the ranks",
                &got,
                &reference,
                1e-5,
            );
        }
    })
}

#[test]
fn fsdp_step_leaves_each_rank_the_gradient_averaged_over_the_ranks() {
    // Adam hardly changes its step when every gradient is N times larger (it divides by the
    // gradient's own size), so the parameters cannot tell a sum from a mean: the gradient can.
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let (world, params) = drawn_model(&mut draw);
        let group = gpumem::testing::devices(world);
        let mut ranks = shard_model(&group, &params).expect("shard_model");
        let batches = drawn_batches(&mut draw, world, params.len());
        // The gradient of ½‖p − b‖² is p − b; averaged over the ranks.
        let mean: Vec<f64> = (0..params.len())
            .map(|i| {
                batches
                    .iter()
                    .map(|b| f64::from(params[i] - b[i]))
                    .sum::<f64>()
                    / world as f64
            })
            .collect();
        fsdp_step(&group, &mut ranks, &batches).expect("fsdp_step");
        let got: Vec<f64> = ranks
            .iter()
            .flat_map(|r| {
                let grad = r.shard.grad().expect("a gradient after the step");
                grad.to_vec().unwrap()
            })
            .map(f64::from)
            .collect();
        gpumem::testing::assert_close(
            &format!(
                "the ranks' gradients, in rank order: the sum of the {world} ranks' gradients \
                 divided by {world}"
            ),
            &got,
            &mean,
            1e-5,
        );
    })
}

#[test]
fn fsdp_step_leaves_each_rank_its_shard_its_gradient_and_adams_state() {
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let (world, params) = drawn_model(&mut draw);
        let group = gpumem::testing::devices(world);
        let mut ranks = shard_model(&group, &params).expect("shard_model");
        let shard = 4 * (params.len() / world) as u64;
        let batches = drawn_batches(&mut draw, world, params.len());
        fsdp_step(&group, &mut ranks, &batches).expect("fsdp_step");
        for (rank, dev) in group.devices().iter().enumerate() {
            assert_eq!(
                dev.memory_allocated(),
                4 * shard,
                "rank {rank} ({dev}): its shard, its shard of the gradient, Adam's exp_avg and \
                 exp_avg_sq of it, and nothing whole"
            );
            let g = ranks[rank].shard.grad().expect("a gradient after the step");
            assert_eq!(
                g.numel() as u64 * 4,
                shard,
                "rank {rank}'s gradient is a shard"
            );
        }
    })
}

#[test]
fn fsdp_step_holds_the_whole_parameters_only_until_the_gradients_are_computed() {
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let (world, params) = drawn_model(&mut draw);
        let group = gpumem::testing::devices(world);
        let mut ranks = shard_model(&group, &params).expect("shard_model");
        let shard = 4 * (params.len() / world) as u64;
        let whole = 4 * params.len() as u64;
        for dev in group.devices() {
            dev.reset_peak_memory_stats();
        }
        let batches = drawn_batches(&mut draw, world, params.len());
        fsdp_step(&group, &mut ranks, &batches).expect("fsdp_step");
        for (rank, dev) in group.devices().iter().enumerate() {
            assert_eq!(
                dev.max_memory_allocated(),
                shard + 2 * whole,
                "rank {rank}'s peak: its shard, the gathered parameters and its whole local \
                 gradient; the gathered parameters go before the reduce-scatter"
            );
        }
    })
}

/// What each rank of torch 2.15's `fully_shard` held after one Adam step of a 16,384-parameter
/// float32 model on 2 ranks (bench/torch_fsdp2.txt): its parameter shards, their gradients, and
/// Adam's exp_avg and exp_avg_sq, in bytes. (`crates/workbook/tests/torch_fsdp2.rs` checks that
/// these are the file's numbers.)
const TORCH_FSDP2_PER_RANK: [u64; 3] = [32768, 32768, 65536];

#[test]
fn fsdp_step_holds_what_torchs_fully_shard_holds() {
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let group = gpumem::testing::devices(2);
        let params: Vec<f32> = (0..16384)
            .map(|_| draw.range(0, 200) as f32 / 100.0)
            .collect();
        let mut ranks = shard_model(&group, &params).expect("shard_model");
        let batches = drawn_batches(&mut draw, 2, params.len());
        fsdp_step(&group, &mut ranks, &batches).expect("fsdp_step");
        for (rank, r) in ranks.iter().enumerate() {
            let grad = r.shard.grad().expect("a gradient after the step");
            let adam = r.optimizer.state_bytes();
            assert_eq!(
                [4 * r.shard.numel() as u64, 4 * grad.numel() as u64, adam],
                TORCH_FSDP2_PER_RANK,
                "rank {rank}: [parameter shard, its gradient, Adam's state], bytes, as torch 2.15's \
                 fully_shard keeps them"
            );
        }
    })
}

/// Checks the prediction for `training` against what every rank of a group holds.
fn check_prediction(training: Training) {
    let group = gpumem::testing::devices(training.ranks as usize);
    // The prediction is made before anything is measured.
    let predicted: PerRank = predict_per_rank(training);
    let measured = measure_per_rank(&group, training).expect("measure");
    for (rank, m) in measured.into_iter().enumerate() {
        Prediction::new(format!("your prediction for {training:?}, rank {rank}"))
            .bytes("params", predicted.params, m.params)
            .rule("2 bytes per fp16 parameter; divided by the ranks only in stage 3")
            .bytes("grads", predicted.grads, m.grads)
            .rule("2 bytes per fp16 gradient; divided by the ranks from stage 2 on")
            .bytes("optimizer", predicted.optimizer, m.optimizer)
            .rule("K bytes per parameter; divided by the ranks from stage 1 on")
            .check();
    }
}

const STAGES: [Stage; 4] = [Stage::Ddp, Stage::Zero1, Stage::Zero2, Stage::Zero3];

#[test]
fn prediction_at_the_pages_sizes_matches() {
    for stage in STAGES {
        check_prediction(Training {
            params: 256 << 10,
            ranks: 4,
            optimizer_bytes_per_param: 12,
            stage,
        });
    }
}

#[test]
fn prediction_at_drawn_sizes_matches() {
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        for _ in 0..3 {
            let ranks = draw.pick(&[2u64, 3, 4, 8]);
            check_prediction(Training {
                // At most 256 Ki parameters: 1 MiB of fp32.
                params: 256 * ranks * draw.range(1, 1024 / ranks),
                ranks,
                optimizer_bytes_per_param: draw.pick(&[4u64, 8, 12, 16]),
                stage: draw.pick(&STAGES),
            });
        }
    })
}

#[test]
fn prediction_reproduces_the_zero_papers_figure_1() {
    let _group = gpumem::testing::devices(1);
    // Figure 1 of Rajbhandari et al. 2020: Ψ = 7.5 B, N_d = 64, K = 12, in GB of 10⁹ bytes.
    let paper = [
        (Stage::Ddp, 120.0),
        (Stage::Zero1, 31.4),
        (Stage::Zero2, 16.6),
        (Stage::Zero3, 1.9),
    ];
    for (stage, gb) in paper {
        let p = predict_per_rank(Training {
            params: 7_500_000_000,
            ranks: 64,
            optimizer_bytes_per_param: 12,
            stage,
        });
        let total = (p.params + p.grads + p.optimizer) as f64 / 1e9;
        assert_eq!(
            format!("{total:.1}"),
            format!("{gb:.1}"),
            "{stage:?} at the paper's setting, per GPU, in GB: {p:?}"
        );
    }
}
