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
pub fn predict_mlp(shape: &[(usize, usize)]) -> StatsView {
    // Every block is its request rounded up to 512 bytes.
    let block = |bytes: u64| bytes.max(1).div_ceil(512) * 512;
    let requests: Vec<u64> = shape
        .iter()
        .flat_map(|&(inputs, outputs)| [(inputs * outputs * 4) as u64, (outputs * 4) as u64])
        .collect();
    // The first weight (over 1 MiB) is cut from a 20 MiB large-pool segment; the rest (at most
    // 1 MiB each) share one 2 MiB small-pool segment.
    let large = block(requests[0]);
    let small: u64 = requests[1..].iter().map(|&r| block(r)).sum();
    StatsView {
        allocated: large + small,
        requested: requests.iter().sum(),
        reserved: 20 * MIB + 2 * MIB,
        peak_allocated: large + small,
        small_segments: 1,
        large_segments: 1,
        // The rest of both segments is split off and free, but pinned by its live neighbours.
        inactive_split_bytes: (20 * MIB - large) + (2 * MIB - small),
    }
}

/// Your prediction of `memory_stats()` after `fragment(dev, each, last)` on an empty device, its
/// buffers alive: four buffers of `each` bytes, the first and third dropped, then one of `last`
/// bytes. The tests try the page's `FRAGMENT_SIZES`, 4 MiB and 6 MiB, and sizes drawn on every
/// run: `each` over 2.5 MiB and at most 4.5 MiB, and `last` under 10 MiB and larger than every
/// free piece the four buffers leave in their segment (every size a multiple of 4).
pub fn predict_fragmented(each: u64, last: u64) -> StatsView {
    let block = |bytes: u64| bytes.max(1).div_ceil(512) * 512;
    let (each_block, last_block) = (block(each), block(last));
    StatsView {
        // Live: the second and fourth buffers and the last one.
        allocated: 2 * each_block + last_block,
        requested: 2 * each + last,
        // The first segment's free pieces (two holes and its tail) are each smaller than the
        // last buffer: a second 20 MiB segment.
        reserved: 20 * MIB + 20 * MIB,
        // The most allocated at once: the four buffers, or what is alive at the end.
        peak_allocated: (4 * each_block).max(2 * each_block + last_block),
        small_segments: 0,
        large_segments: 2,
        // What is free in both segments, each pinned by its live blocks.
        inactive_split_bytes: (20 * MIB - 2 * each_block) + (20 * MIB - last_block),
    }
}
// ANCHOR_END: predict
