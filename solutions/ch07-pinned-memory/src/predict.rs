//! Chapter 7's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: host_prediction
/// What `host_scenario` does to the pinned host allocator (`dev.host_memory_stats()`) and to the
/// copy counters (`dev.transfer_stats()`), on a device with an empty host cache and zeroed counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPrediction {
    /// Pinned blocks obtained from the system (`num_host_alloc`).
    pub num_host_alloc: u64,
    /// Bytes in pinned blocks handed out, at the end (`active_bytes.current`).
    pub pinned_active_bytes: u64,
    /// The most bytes ever in pinned blocks handed out (`active_bytes.peak`).
    pub pinned_peak_active_bytes: u64,
    /// Bytes of pinned memory held, handed out or cached, at the end: the pool
    /// (`allocated_bytes.current`, torch 2.15's meaning).
    pub pinned_pool_bytes: u64,
    /// Pinned blocks given back to the system by `empty_host_cache` (`num_host_free`).
    pub num_host_free: u64,
    /// `allocated_bytes.current` (the pool) after `empty_host_cache`.
    pub pinned_pool_after_empty: u64,
    /// Host-to-device copies, pageable and pinned (`host_to_device.copies`).
    pub host_to_device_copies: u64,
    /// Of those, copies from pinned memory (`pinned.copies`).
    pub pinned_copies: u64,
    /// Bytes moved by the pinned copies (`pinned.bytes`).
    pub pinned_bytes: u64,
}
// ANCHOR_END: host_prediction

// ANCHOR: predict_host
/// Predict, then measure: the numbers you expect from `host_scenario`, written BEFORE running it.
pub fn predict_host() -> HostPrediction {
    HostPrediction {
        // a (16 KiB block), b (32 KiB), d (4 KiB); c reuses a's cached 16 KiB block.
        num_host_alloc: 3,
        // c (16 KiB) + d (4 KiB).
        pinned_active_bytes: 16_384 + 4096,
        // a and b alive together.
        pinned_peak_active_bytes: 16_384 + 32_768,
        // Every block obtained stays: 16 KiB (c) + 32 KiB (b's, cached) + 4 KiB (d).
        pinned_pool_bytes: 16_384 + 32_768 + 4096,
        // Only the cached 32 KiB block has no owner.
        num_host_free: 1,
        pinned_pool_after_empty: 16_384 + 4096,
        // a's async copy and the copy from the Vec.
        host_to_device_copies: 2,
        pinned_copies: 1,
        // The data's bytes, not the block's.
        pinned_bytes: 12_000,
    }
}
// ANCHOR_END: predict_host
