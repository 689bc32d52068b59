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
/// Your prediction of `memory_stats()` once `Mlp::new(dev, &MLP_SHAPE)` (`[(1024, 1024), (1024, 10)]`: two `Linear` layers, each an `f32` weight of `inputs * outputs` and a bias of `outputs`) is alive on an empty device.
pub fn predict_mlp() -> StatsView {
    // Blocks: 4 MiB weight (large pool), 4096 B bias, 40_960 B weight, 40 B bias -> 512 B.
    let blocks = 4 * MIB + 4096 + 40_960 + 512;
    StatsView {
        allocated: blocks,
        requested: 4 * MIB + 4096 + 40_960 + 40,
        // The 4 MiB weight is carved from a 20 MiB segment; the three small ones share 2 MiB.
        reserved: 20 * MIB + 2 * MIB,
        peak_allocated: blocks,
        small_segments: 1,
        large_segments: 1,
        // The rest of both segments is split off and free, but pinned by its live neighbours.
        inactive_split_bytes: (20 * MIB - 4 * MIB) + (2 * MIB - (4096 + 40_960 + 512)),
    }
}

/// Your prediction of `memory_stats()` after `fragment(dev)` on an empty device.
pub fn predict_fragmented() -> StatsView {
    StatsView {
        // Live: the second and fourth 4 MiB blocks and the 6 MiB block.
        allocated: 4 * MIB + 4 * MIB + 6 * MIB,
        requested: 14 * MIB,
        // No free block of the first segment (4, 4 and 4 MiB) fits 6 MiB: a second segment.
        reserved: 20 * MIB + 20 * MIB,
        // All four 4 MiB blocks were live at once.
        peak_allocated: 16 * MIB,
        small_segments: 0,
        large_segments: 2,
        // Three free 4 MiB holes in the first segment, 14 MiB left over in the second.
        inactive_split_bytes: 12 * MIB + 14 * MIB,
    }
}
// ANCHOR_END: predict
