//! Chapter 15: several GPUs.
//!
//! Load a checkpoint onto each rank's own device (not all of them onto device 0), write one
//! step of fully sharded data parallelism (FSDP, ZeRO stage 3) over a process group, and predict
//! what each rank holds under DDP and ZeRO's three stages. The ranks are the devices `cpu`,
//! `cpu:1`, ...: each with its own caching allocator, as each GPU has its own.
//! Edit the items marked `TODO`.

pub use ch15_given::{
    Checkpoint, FsdpRank, MIB, local_gradient, measure_per_rank, shard_model,
};
pub use ch15_predict::{PerRank, Stage, Training};
use gpumem::collective::ProcessGroup;
use gpumem::optim::Optimizer;
use gpumem::{Buffer, Result};

// ANCHOR: load_on_rank
/// Rank `rank` of `group` loads `checkpoint` (saved by rank 0) to train with it: every tensor
/// on the rank's own device, and nothing of it ever on another rank's.
pub fn load_on_rank(
    checkpoint: &Checkpoint,
    group: &ProcessGroup,
    rank: usize,
) -> Result<Vec<Buffer<f32>>> {
    // torch.load(path, map_location=f"cuda:{local_rank}"): straight onto the rank's device.
    // Loading without it, then `.to(device)`, lands every rank's copy on device 0 first.
    checkpoint.load(Some(group.device(rank)?))
}
// ANCHOR_END: load_on_rank


// ANCHOR: fsdp_step
/// One FSDP training step: every rank computes the gradient of its own batch (`batches[r]`)
/// with the whole parameters, the gradients are averaged over the ranks, and each rank's Adam
/// updates its own shard. Between steps a rank holds its shard, its shard of the averaged
/// gradient and Adam's two moments of its shard: nothing whole.
pub fn fsdp_step(group: &ProcessGroup, ranks: &mut [FsdpRank], batches: &[Vec<f32>]) -> Result<()> {
    // All-gather the shards: each rank holds the whole parameters for its forward and backward.
    let shards: Vec<&Buffer<f32>> = ranks.iter().map(|r| r.shard.data()).collect();
    let whole = group.all_gather(&shards)?;
    let local = whole
        .iter()
        .zip(batches)
        .map(|(params, batch)| local_gradient(params, batch))
        .collect::<Result<Vec<_>>>()?;
    // Reshard: the whole parameters go back to each device's cache.
    drop(whole);
    // Reduce-scatter: each rank keeps the sum of its shard's gradients, the rest goes.
    let grads = group.reduce_scatter(&local.iter().collect::<Vec<_>>())?;
    drop(local);
    let mean = 1.0 / group.world_size() as f32;
    for (rank, mut grad) in ranks.iter_mut().zip(grads) {
        gpumem::ops::scale(&mut grad, mean)?;
        rank.shard.backward_from(grad, false)?;
        rank.optimizer.step()?;
    }
    Ok(())
}
// ANCHOR_END: fsdp_step

