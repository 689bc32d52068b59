//! Chapter 10's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: cases
/// The ways of running the workload the chapter measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// As written, torch's default settings.
    AsWritten,
    /// As written, with `fix_setting(SettingFix::MaxSplitSize)`.
    MaxSplitSize,
    /// As written, with `fix_setting(SettingFix::ExpandableSegments)`.
    ExpandableSegments,
    /// As written, with `fix_setting(SettingFix::GarbageCollection)`.
    GarbageCollection,
    /// `workload_reordered`, torch's default settings.
    Reordered,
}

/// Every case, in the order the chapter shows them.
pub const CASES: [Case; 5] = [
    Case::AsWritten,
    Case::MaxSplitSize,
    Case::ExpandableSegments,
    Case::GarbageCollection,
    Case::Reordered,
];

/// What a run of the workload came to (or what you predict it comes to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Whether an allocation failed with out of memory.
    pub out_of_memory: bool,
    /// `max_memory_reserved()` at the end, in MiB.
    pub peak_reserved_mib: u64,
    /// `num_alloc_retries`: reservations retried after the whole cache was released.
    pub retries: u64,
}
// ANCHOR_END: cases

// ANCHOR: predict
/// Your prediction for each case, before you run it.
pub fn predict(case: Case) -> Outcome {
    let (out_of_memory, peak_reserved_mib, retries) = match case {
        // 100 MiB cached, split by 30 MiB; 80 MiB more would pass 130 MiB; releasing the cache
        // frees nothing (its one segment holds the activations): out of memory after one retry.
        Case::AsWritten => (true, 100, 1),
        // 30 MiB may not split the oversize 100 MiB: its own segment (130 MiB). For 80 MiB the
        // oversize block alone is released, without a retry: 30 + 80.
        Case::MaxSplitSize => (false, 130, 0),
        // The retry unmaps the three free pages (60 MiB) of the one segment; then 80 MiB maps
        // four pages after the 10 MiB still free: 40 + 80 = 120 MiB.
        Case::ExpandableSegments => (false, 120, 1),
        // Collection only frees whole cached blocks; the split one is not: as written.
        Case::GarbageCollection => (true, 100, 1),
        // 30 + 100 = 130 MiB reserved, then 80 MiB is cut from the cached staging segment.
        Case::Reordered => (false, 130, 0),
    };
    Outcome {
        out_of_memory,
        peak_reserved_mib,
        retries,
    }
}
// ANCHOR_END: predict
