//! Chapter 1's prediction: built as a crate of its own, with no dependencies (not even gpumem),
//! so it is a prediction made before measuring. The tests measure and compare, at the page's
//! sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: predict_first_allocations
/// What [`predict_first_allocations`] predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstAllocations {
    /// `memory_allocated()` after the first buffer, in bytes.
    pub allocated_after_first: u64,
    /// `memory_reserved()` after the first buffer, in bytes.
    pub reserved_after_first: u64,
    /// How many bytes the free memory that `mem_get_info()` reports falls by on `cpu`.
    pub free_drop_after_first: u64,
    /// `memory_allocated()` after the second buffer, in bytes.
    pub allocated_after_second: u64,
    /// `memory_reserved()` after the second buffer, in bytes.
    pub reserved_after_second: u64,
    /// Segments reserved from the device (`segment.all.current`) after the second buffer.
    pub segments_after_second: u64,
}

/// Your prediction, as a rule: for a fresh device (empty cache) on which this runs,
///
/// ```text
/// let a = dev.alloc::<f32>(first_len)?;    // first_len * 4 bytes
/// // measure: memory_allocated, memory_reserved, mem_get_info's free
/// let b = dev.alloc::<f32>(second_len)?;   // second_len * 4 bytes
/// // measure: memory_allocated, memory_reserved, the number of segments
/// ```
///
/// with both buffers small (at most 1 MiB each). The tests call it at the page's sizes
/// (`first_len = 1`, `second_len = 200`) and at sizes drawn afresh on every run.
pub fn predict_first_allocations(_first_len: u64, _second_len: u64) -> FirstAllocations {
    // TODO: write the allocator's rules as arithmetic on the two lengths.
    todo!("predict_first_allocations")
}
// ANCHOR_END: predict_first_allocations
