//! Chapter 15: several GPUs.
//!
//! Load a checkpoint onto each rank's own device (not all of them onto device 0), write one
//! step of fully sharded data parallelism (FSDP, ZeRO stage 3) over a process group, and predict
//! what each rank holds under DDP and ZeRO's three stages. The ranks are the devices `cpu`,
//! `cpu:1`, ...: each with its own caching allocator, as each GPU has its own.
//! Edit the items marked `TODO`.

pub use ch15_given::{Checkpoint, FsdpRank, MIB, local_gradient, measure_per_rank, shard_model};
pub use ch15_predict::{PerRank, Stage, Training};
use gpumem::collective::ProcessGroup;
use gpumem::{Buffer, Result};

// ANCHOR: load_on_rank
/// Rank `rank` of `group` loads `checkpoint` (saved by rank 0) to train with it: every tensor
/// on the rank's own device, and nothing of it ever on another rank's.
pub fn load_on_rank(
    checkpoint: &Checkpoint,
    group: &ProcessGroup,
    rank: usize,
) -> Result<Vec<Buffer<f32>>> {
    // TODO: torch.load without map_location puts every tensor back where rank 0 saved it.
    // Where must this rank's copy go, and how does `Checkpoint::load` say so?
    todo!(
        "load {} bytes on rank {rank} of {group:?}",
        checkpoint.bytes()
    )
}
// ANCHOR_END: load_on_rank

// ANCHOR: fsdp_step
/// One FSDP training step: every rank computes the gradient of its own batch (`batches[r]`)
/// with the whole parameters, the gradients are averaged over the ranks, and each rank's Adam
/// updates its own shard. Between steps a rank holds its shard, its shard of the averaged
/// gradient and Adam's two moments of its shard: nothing whole.
pub fn fsdp_step(group: &ProcessGroup, ranks: &mut [FsdpRank], batches: &[Vec<f32>]) -> Result<()> {
    // TODO: all-gather the shards (each rank needs the whole parameters for its gradient),
    // compute each rank's local_gradient, let the whole parameters go, reduce-scatter the
    // gradients, average them, and give each rank's shard its gradient for its Adam's step.
    todo!(
        "one FSDP step of {} ranks on {} batches, over {group:?}",
        ranks.len(),
        batches.len()
    )
}
// ANCHOR_END: fsdp_step
