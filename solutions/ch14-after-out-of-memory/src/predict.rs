//! Chapter 14's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: steps
/// A loop of training steps: each allocates the same buffers, holds them all, and drops them
/// all at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    /// Buffers allocated in each step, all alive together until the step ends.
    pub buffers: u64,
    /// Bytes asked for by each buffer (at least 1).
    pub size: u64,
    /// How many steps run (at least 1).
    pub steps: u64,
    /// Whether `empty_cache()` is called after every step.
    pub empty_cache: bool,
}

/// What the loop cost, as the allocator's statistics count it from a clean start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    /// `num_device_alloc`: segments reserved from the device (torch's `cudaMalloc` calls).
    pub device_allocs: u64,
    /// `num_device_free`: segments given back to the device (torch's `cudaFree` calls).
    pub device_frees: u64,
    /// `max_memory_reserved()` at the end, in bytes.
    pub peak_reserved: u64,
}
// ANCHOR_END: steps

// ANCHOR: predict
/// Your prediction of what `steps` costs, with the allocator's default settings.
pub fn predict_refill(steps: Steps) -> Cost {
    const MIB: u64 = 1 << 20;
    // Every block is a multiple of 512 bytes.
    let block = steps.size.div_ceil(512) * 512;
    // The segment a step's buffers are cut from, and how many blocks one holds: up to 1 MiB the
    // small pool's 2 MiB segments, below 10 MiB the large pool's 20 MiB ones, else a segment of
    // the block's own, rounded up to 2 MiB.
    let (segment, per_segment) = if block <= MIB {
        (2 * MIB, 2 * MIB / block)
    } else if block < 10 * MIB {
        (20 * MIB, 20 * MIB / block)
    } else {
        (block.div_ceil(2 * MIB) * 2 * MIB, 1)
    };
    let segments = steps.buffers.div_ceil(per_segment);
    // Without empty_cache the first step reserves them and every later step finds them cached;
    // with it, every step reserves them again and gives them back.
    let (device_allocs, device_frees) = if steps.empty_cache {
        (segments * steps.steps, segments * steps.steps)
    } else {
        (segments, 0)
    };
    Cost {
        device_allocs,
        device_frees,
        peak_reserved: segments * segment,
    }
}
// ANCHOR_END: predict
