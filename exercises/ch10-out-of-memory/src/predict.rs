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
pub fn predict(_case: Case) -> Outcome {
    // TODO: for each case: does it run out of memory, what is the peak reserved (MiB), and how
    // many times is the whole cache released to retry? Work it out from the allocator's rules.
    todo!("predict {_case:?}")
}
// ANCHOR_END: predict
