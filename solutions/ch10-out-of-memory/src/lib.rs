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
pub fn budget_fraction(budget: u64, total: u64) -> f64 {
    // Half a MiB above the budget: the rounding of `fraction × total` cannot fall below it.
    (budget as f64 + (MIB / 2) as f64) / total as f64
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
pub fn parse_size(text: &str) -> Option<u64> {
    let (number, unit) = text.trim().split_once(' ')?;
    let unit: f64 = match unit.trim() {
        "bytes" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    (value >= 0.0).then(|| (value * unit).round() as u64)
}

/// The size that starts right after `marker` in `text`: a number and a unit.
fn size_after(text: &str, marker: &str) -> Option<u64> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let mut words = rest.split_whitespace();
    let number = words.next()?;
    let unit = words.next()?.trim_end_matches(['.', ',', ';']);
    parse_size(&format!("{number} {unit}"))
}

/// The size that ends right before `marker` in `text`: the two words before it.
fn size_before(text: &str, marker: &str) -> Option<u64> {
    let words: Vec<&str> = text[..text.find(marker)?].split_whitespace().collect();
    let [.., number, unit] = words.as_slice() else {
        return None;
    };
    parse_size(&format!("{number} {unit}"))
}

/// The numbers of an out-of-memory message, as torch (or gpumem) prints it. `None` when a number
/// is missing: not such a message, or torch's "more than 1EB" refusal.
pub fn parse_oom(text: &str) -> Option<OomReport> {
    Some(OomReport {
        tried_to_allocate: size_after(text, "Tried to allocate ")?,
        total: size_after(text, "total capacity of ")?,
        free: size_after(text, " of which ")?,
        allowed: size_before(text, " allowed;"),
        allocated: size_after(text, "Of the allocated memory ")?,
        reserved_unallocated: size_before(text, " is reserved by")?,
    })
}

/// What `report` says about the cause: `Fragmentation` when the process's cached bytes plus the
/// room it still has (under its cap, and on the device) would hold the request; otherwise
/// `OverTheCap` when a cap is set and the device had the room; otherwise `DeviceFull`.
pub fn diagnose(report: &OomReport) -> Diagnosis {
    let reserved = report.allocated + report.reserved_unallocated;
    let room = match report.allowed {
        Some(allowed) => allowed.saturating_sub(reserved).min(report.free),
        None => report.free,
    };
    if report.reserved_unallocated + room >= report.tried_to_allocate {
        Diagnosis::Fragmentation
    } else if report.allowed.is_some() && report.free >= report.tried_to_allocate {
        Diagnosis::OverTheCap
    } else {
        Diagnosis::DeviceFull
    }
}
// ANCHOR_END: read

// ANCHOR: fix
/// The `GPUMEM_ALLOC_CONF` text (torch's `PYTORCH_CUDA_ALLOC_CONF`) of each fix, one option each.
pub fn fix_setting(fix: SettingFix) -> &'static str {
    match fix {
        // The 100 MiB staging block becomes oversize: the 30 MiB request may not split it.
        SettingFix::MaxSplitSize => "max_split_size_mb:64",
        SettingFix::ExpandableSegments => "expandable_segments:True",
        SettingFix::GarbageCollection => "garbage_collection_threshold:0.6",
    }
}

/// The workload with its allocations in another order, so that it fits under `BUDGET` with
/// torch's default settings: the same three buffers, the same two held at the end, no
/// `empty_cache`.
pub fn workload_reordered(dev: &Device) -> Result<Held> {
    // The long-lived activations first, in a segment of their own; the staging segment is then
    // cached whole, and the gradients take 80 MiB of it.
    let activations = dev.alloc::<u8>(ACTIVATIONS)?;
    let staging = dev.alloc::<u8>(STAGING)?;
    drop(staging);
    let gradients = dev.alloc::<u8>(GRADIENTS)?;
    Ok(Held {
        activations,
        gradients,
    })
}
// ANCHOR_END: fix
