//! Chapter 10's given code: the workload, the settings to try and the measurement your
//! predictions are compared with. A crate of its own, outside your `src/`, so that `check` and
//! `grade` run and measure with this official copy; your crate re-exports it.

pub use ch10_predict::{Case, Outcome};
use gpumem::{Buffer, Device, Error, Result};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

// ANCHOR: workload
/// What the workload may reserve: its budget, set with `set_per_process_memory_fraction`.
pub const BUDGET: u64 = 130 * MIB;
/// A staging buffer for loading data, dropped once the data is in place.
pub const STAGING: usize = 100 << 20;
/// The activations, kept to the end.
pub const ACTIVATIONS: usize = 30 << 20;
/// The gradients, kept to the end.
pub const GRADIENTS: usize = 80 << 20;

/// What the workload holds when it is done: 110 MiB, well under the budget.
pub struct Held {
    /// `ACTIVATIONS` bytes.
    pub activations: Buffer<u8>,
    /// `GRADIENTS` bytes.
    pub gradients: Buffer<u8>,
}

/// The workload as written: stage the data, let the staging buffer go, then allocate the
/// activations and the gradients.
pub fn workload_as_written(dev: &Device) -> Result<Held> {
    let staging = dev.alloc::<u8>(STAGING)?;
    drop(staging);
    let activations = dev.alloc::<u8>(ACTIVATIONS)?;
    let gradients = dev.alloc::<u8>(GRADIENTS)?;
    Ok(Held {
        activations,
        gradients,
    })
}
// ANCHOR_END: workload

// ANCHOR: settings
/// The settings that might fix the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingFix {
    /// Keep big blocks whole.
    MaxSplitSize,
    /// Grow one segment instead of reserving many.
    ExpandableSegments,
    /// Reclaim old cached blocks before the cap is reached.
    GarbageCollection,
}
// ANCHOR_END: settings

// ANCHOR: measure
/// Your answers that a measurement runs with: the tests pass your `fix_setting`,
/// `budget_fraction` and `workload_reordered`.
#[derive(Clone, Copy)]
pub struct Fixes {
    /// `fix_setting`: the settings text of each fix.
    pub fix_setting: fn(SettingFix) -> &'static str,
    /// `budget_fraction`: the fraction that caps the process at the budget.
    pub budget_fraction: fn(u64, u64) -> f64,
    /// `workload_reordered`: the workload in an order that fits.
    pub workload_reordered: fn(&Device) -> Result<Held>,
}

/// Runs one case on `dev` under `BUDGET` from a clean start, with `fixes`, and puts the device
/// back as it was.
/// Returns what happened and the out-of-memory error, if there was one.
pub fn measure(dev: &Device, case: Case, fixes: Fixes) -> Result<(Outcome, Option<Error>)> {
    let original = dev.allocator().config();
    dev.empty_cache();
    dev.reset_peak_memory_stats();
    dev.reset_accumulated_memory_stats();
    let setting = match case {
        Case::AsWritten | Case::Reordered => "",
        Case::MaxSplitSize => (fixes.fix_setting)(SettingFix::MaxSplitSize),
        Case::ExpandableSegments => (fixes.fix_setting)(SettingFix::ExpandableSegments),
        Case::GarbageCollection => (fixes.fix_setting)(SettingFix::GarbageCollection),
    };
    let (_, total) = dev.mem_get_info()?;
    let run = dev
        .set_allocator_settings(setting)
        .and_then(|()| dev.set_per_process_memory_fraction((fixes.budget_fraction)(BUDGET, total)))
        .and_then(|()| match case {
            Case::Reordered => (fixes.workload_reordered)(dev),
            _ => workload_as_written(dev),
        });
    let error = match run {
        Ok(held) => {
            drop(held);
            None
        }
        Err(e) if e.is_out_of_memory() => Some(e),
        Err(e) => {
            restore(dev, original);
            return Err(e);
        }
    };
    let stats = dev.memory_stats();
    let outcome = Outcome {
        out_of_memory: error.is_some(),
        peak_reserved_mib: dev.max_memory_reserved() / MIB,
        retries: stats.get("num_alloc_retries").unwrap_or(0),
    };
    restore(dev, original);
    Ok((outcome, error))
}

/// Settings, cap and cache back as they were before `measure`.
fn restore(dev: &Device, original: gpumem::AllocatorConfig) {
    dev.set_allocator_config(original);
    dev.clear_per_process_memory_fraction();
    dev.empty_cache();
}
// ANCHOR_END: measure
