//! Chapter 15's prediction: built as a crate of its own, with no dependencies (not even gpumem),
//! so it is a prediction made before measuring. The tests measure what every rank holds and
//! compare, at the page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: training
/// What data-parallel training keeps on each rank, and how much of it ZeRO shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Plain data parallelism (DDP): every rank keeps everything.
    Ddp,
    /// ZeRO stage 1 (P_os): the optimizer state is sharded.
    Zero1,
    /// ZeRO stage 2 (P_os+g): the gradients too.
    Zero2,
    /// ZeRO stage 3 (P_os+g+p, FSDP's full sharding): the parameters too.
    Zero3,
}

/// Mixed-precision training with Adam, as the ZeRO paper counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Training {
    /// The model's parameters (Ψ), a multiple of 256 × `ranks` (so that every shard is whole
    /// blocks).
    pub params: u64,
    /// The ranks (N_d), one GPU each.
    pub ranks: u64,
    /// Bytes of optimizer state per parameter (K): 12 for mixed-precision Adam (an fp32 copy of
    /// the parameters, the first and the second moment).
    pub optimizer_bytes_per_param: u64,
    /// What is sharded.
    pub stage: Stage,
}

/// What one rank holds between steps, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerRank {
    /// The fp16 parameters (2 bytes each), or this rank's shard of them.
    pub params: u64,
    /// The fp16 gradients (2 bytes each), or this rank's shard of them.
    pub grads: u64,
    /// The optimizer state (K bytes per parameter), or this rank's shard of it.
    pub optimizer: u64,
}
// ANCHOR_END: training

// ANCHOR: predict
/// Your prediction of what each rank holds for `training`.
pub fn predict_per_rank(training: Training) -> PerRank {
    let Training {
        params,
        ranks,
        optimizer_bytes_per_param: k,
        stage,
    } = training;
    // Everything, or a 1/N_d share of it.
    let kept = |bytes: u64, sharded: bool| if sharded { bytes / ranks } else { bytes };
    let (params_sharded, grads_sharded) = match stage {
        Stage::Ddp | Stage::Zero1 => (false, false),
        Stage::Zero2 => (false, true),
        Stage::Zero3 => (true, true),
    };
    PerRank {
        params: kept(2 * params, params_sharded),
        grads: kept(2 * params, grads_sharded),
        optimizer: kept(k * params, stage != Stage::Ddp),
    }
}
// ANCHOR_END: predict
