//! Chapter 7's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: host_sizes
/// The sizes of `host_scenario`'s four pinned buffers, in bytes (`a` and `c` hold `f32`, so
/// their sizes are multiples of 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSizes {
    /// `a`: copied to the device, then dropped.
    pub a: u64,
    /// `b`: dropped.
    pub b: u64,
    /// `c`: allocated after both are dropped, alive at the end.
    pub c: u64,
    /// `d`: allocated after `c`, alive at the end.
    pub d: u64,
}

/// The page's sizes: 3000 `f32`, 20,000 bytes, 2500 `f32`, 4096 bytes.
pub const HOST_SIZES: HostSizes = HostSizes {
    a: 12_000,
    b: 20_000,
    c: 10_000,
    d: 4096,
};
// ANCHOR_END: host_sizes

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
/// Predict, then measure: the numbers you expect from `host_scenario` with `sizes`, written
/// BEFORE running it. The tests try the page's `HOST_SIZES` and sizes drawn on every run, each
/// at most 64 KiB: write the rules, not the page's numbers.
pub fn predict_host(sizes: HostSizes) -> HostPrediction {
    // Every pinned block is its request rounded up to a power of two.
    let block = |bytes: u64| bytes.max(1).next_power_of_two();
    let [a, b, c, d] = [sizes.a, sizes.b, sizes.c, sizes.d].map(block);
    // a and b come from the system; once both are dropped (a's copy finished), their blocks are
    // cached. c, then d, reuses a cached block of exactly its size, if one is left.
    let mut cached = vec![a, b];
    let mut obtained = vec![a, b];
    for wanted in [c, d] {
        match cached.iter().position(|&size| size == wanted) {
            Some(i) => {
                cached.swap_remove(i);
            }
            None => obtained.push(wanted),
        }
    }
    HostPrediction {
        num_host_alloc: obtained.len() as u64,
        // c and d are alive at the end.
        pinned_active_bytes: c + d,
        // a and b alive together, or c and d.
        pinned_peak_active_bytes: (a + b).max(c + d),
        // Every block obtained stays in the pool until empty_host_cache.
        pinned_pool_bytes: obtained.iter().sum(),
        // empty_host_cache gives back the cached blocks only.
        num_host_free: cached.len() as u64,
        pinned_pool_after_empty: c + d,
        // a's async copy and the copy from the Vec.
        host_to_device_copies: 2,
        pinned_copies: 1,
        // The data's bytes, not the block's.
        pinned_bytes: sizes.a,
    }
}
// ANCHOR_END: predict_host
