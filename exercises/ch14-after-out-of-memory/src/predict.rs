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
    // TODO: how many segments does one step reserve (a block is a multiple of 512 B; which
    // segment does a block of this size come from, and how many such blocks does one hold)?
    // Then: which steps reserve them, and which give them back?
    todo!("predict {steps:?}")
}
// ANCHOR_END: predict
