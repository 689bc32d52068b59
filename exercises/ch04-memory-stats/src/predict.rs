//! Chapter 4's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

// ANCHOR: stats_struct
/// The numbers this chapter reads from `memory_stats()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsView {
    /// Bytes in live blocks: `allocated_bytes.all.current`.
    pub allocated: u64,
    /// Bytes the callers asked for, before rounding: `requested_bytes.all.current`.
    pub requested: u64,
    /// Bytes reserved from the device: `reserved_bytes.all.current`.
    pub reserved: u64,
    /// Highest `allocated` since the last peak reset: `allocated_bytes.all.peak`.
    pub peak_allocated: u64,
    /// Reserved segments of the small pool: `segment.small_pool.current`.
    pub small_segments: u64,
    /// Reserved segments of the large pool: `segment.large_pool.current`.
    pub large_segments: u64,
    /// Free bytes inside segments that a live block keeps from being released:
    /// `inactive_split_bytes.all.current`.
    pub inactive_split_bytes: u64,
}

// ANCHOR_END: stats_struct

// ANCHOR: predict
/// Your prediction of `memory_stats()` once `Mlp::new(dev, shape)` is alive on an empty device:
/// per layer `(inputs, outputs)`, an `f32` weight of `inputs * outputs` then a bias of `outputs`.
/// The tests try the page's `MLP_SHAPE`, `[(1024, 1024), (1024, 10)]`, and two-layer shapes drawn
/// on every run whose first weight is over 1 MiB and under 10 MiB and whose other parameters fit
/// in one small segment together.
pub fn predict_mlp(_shape: &[(usize, usize)]) -> StatsView {
    // TODO: write the rules that give the seven numbers for such a shape (use MIB).
    todo!("predict the MLP's stats")
}

/// Your prediction of `memory_stats()` after `fragment(dev, each, last)` on an empty device, its
/// buffers alive: four buffers of `each` bytes, the first and third dropped, then one of `last`
/// bytes. The tests try the page's `FRAGMENT_SIZES`, 4 MiB and 6 MiB, and sizes drawn on every
/// run: `each` over 2.5 MiB and at most 4.5 MiB, and `last` under 10 MiB and larger than every
/// free piece the four buffers leave in their segment (every size a multiple of 4).
pub fn predict_fragmented(_each: u64, _last: u64) -> StatsView {
    // TODO: write the rules that give the seven numbers for such sizes (use MIB).
    todo!("predict the fragmented stats")
}
// ANCHOR_END: predict
