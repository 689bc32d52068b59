//! Chapter 10: out of memory.
//!
//! Read torch's out-of-memory message number by number, tell fragmentation from a full device,
//! and make a workload that runs out of memory with plenty free in total fit: with
//! `max_split_size_mb`, with `expandable_segments`, and by changing the order of its allocations
//! (`garbage_collection_threshold` is measured too). Edit the items marked `TODO`.

pub use ch10_given::{
    ACTIVATIONS, BUDGET, Fixes, GRADIENTS, Held, MIB, STAGING, SettingFix, measure,
    workload_as_written,
};
pub use ch10_predict::{CASES, Case, Outcome};
use gpumem::{Device, Result};

// ANCHOR: budget
/// The fraction to pass to `set_per_process_memory_fraction` on a device of `total` bytes so that
/// the cap is at least `budget` and less than `budget` + 1 MiB (`total` is more than that).
pub fn budget_fraction(_budget: u64, _total: u64) -> f64 {
    // TODO: torch caps at `(fraction × total)` rounded down: aim half a MiB above the budget.
    todo!("the fraction of {_total} bytes that is {_budget} bytes")
}
// ANCHOR_END: budget

// ANCHOR: report
/// The numbers of an out-of-memory message, in bytes (torch prints two decimals, so a number read
/// from text is within half a hundredth of its unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomReport {
    /// "Tried to allocate X": the segment the allocator tried to reserve.
    pub tried_to_allocate: u64,
    /// "a total capacity of X".
    pub total: u64,
    /// "of which X is free": the device's free memory.
    pub free: u64,
    /// "X allowed;": the cap from `set_per_process_memory_fraction`, when one is set.
    pub allowed: Option<u64>,
    /// "X is allocated by PyTorch" (gpumem): bytes in live blocks.
    pub allocated: u64,
    /// "X is reserved by PyTorch but unallocated": cached, free, still reserved.
    pub reserved_unallocated: u64,
}

/// What an out-of-memory error says about its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Diagnosis {
    /// The cache holds at least the size asked for, but in pieces no request fits in.
    Fragmentation,
    /// The device had room, but the process's cap (its memory fraction) did not.
    OverTheCap,
    /// The memory is really in use: by this process's live blocks or by others.
    DeviceFull,
}
// ANCHOR_END: report

// ANCHOR: read
/// A size as torch's `format_size` prints it: `"1024 bytes"`, `"1.50 KiB"`, `"20.00 MiB"`,
/// `"15.51 GiB"`, in bytes (rounded to the nearest byte). `None` for anything else.
pub fn parse_size(_text: &str) -> Option<u64> {
    // TODO: a number, a space, a unit (bytes, KiB, MiB, GiB): the number times the unit.
    todo!("read the size {_text:?}")
}

/// The numbers of an out-of-memory message, as torch (or gpumem) prints it. `None` when a number
/// is missing: not such a message, or torch's "more than 1EB" refusal.
pub fn parse_oom(_text: &str) -> Option<OomReport> {
    // TODO: each number follows a fixed phrase ("Tried to allocate ", "total capacity of ",
    // " of which ", "Of the allocated memory "), or comes just before one (" allowed;",
    // " is reserved by").
    todo!("read the numbers of {_text:?}")
}

/// What `report` says about the cause: `Fragmentation` when the process's cached bytes plus the
/// room it still has (under its cap, and on the device) would hold the request; otherwise
/// `OverTheCap` when a cap is set and the device had the room; otherwise `DeviceFull`.
pub fn diagnose(_report: &OomReport) -> Diagnosis {
    // TODO: reserved = allocated + reserved_unallocated; room = free, or with a cap the smaller
    // of free and allowed − reserved.
    todo!("diagnose {_report:?}")
}
// ANCHOR_END: read

// ANCHOR: fix
/// The `GPUMEM_ALLOC_CONF` text (torch's `PYTORCH_CUDA_ALLOC_CONF`) of each fix, one option each.
pub fn fix_setting(_fix: SettingFix) -> &'static str {
    // TODO: one option per fix, with a value torch accepts.
    todo!("the setting for {_fix:?}")
}

/// The workload with its allocations in another order, so that it fits under `BUDGET` with
/// torch's default settings: the same three buffers, the same two held at the end, no
/// `empty_cache`.
pub fn workload_reordered(_dev: &Device) -> Result<Held> {
    // TODO: which buffer split the cached staging segment in the workload as written?
    todo!("allocate the same buffers in an order that does not fragment")
}
// ANCHOR_END: fix
