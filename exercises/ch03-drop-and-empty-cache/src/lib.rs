//! Chapter 3: `drop` versus `empty_cache`.
//!
//! Dropping a buffer (Rust's `del`) gives its block back to the allocator's cache;
//! `empty_cache` gives whole, unused segments back to the device. Edit the items marked `TODO`.

pub use ch03_given::{TinyLinear, measure};
pub use ch03_predict::{MIB, Outcome, Scenario};
use gpumem::{Device, Result};

// ANCHOR: unload_model
/// Frees `model` and hands the memory it used back to the device, for other processes to use.
pub fn unload_model(_dev: &Device, _model: TinyLinear) {
    // TODO: two steps, in the right order. Rename `_dev` and `_model` when you use them.
    todo!("free the model, then release the cache")
}
// ANCHOR_END: unload_model

// ANCHOR: memory_view
/// Three views of one device's memory, read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryView {
    /// Bytes in live blocks (`memory_allocated`).
    pub allocated: u64,
    /// Bytes the allocator holds from the device, live or cached (`memory_reserved`).
    pub reserved: u64,
    /// Bytes in use on the whole device as the driver (and nvidia-smi) sees it: total − free.
    pub driver_used: u64,
    /// The device's total memory, as the driver reports it.
    pub driver_total: u64,
}

impl MemoryView {
    /// Reads the allocator's counters and the driver's `(free, total)` from `dev`.
    pub fn capture(_dev: &Device) -> Result<MemoryView> {
        // TODO: two counters of the allocator, one call to the driver.
        todo!("read memory_allocated, memory_reserved and mem_get_info")
    }

    /// Reserved but not allocated: memory the allocator holds in its cache.
    pub fn cached(&self) -> u64 {
        // TODO
        todo!("reserved minus allocated")
    }

    /// Memory the driver counts as used that this allocator does not hold (0 on `cpu`).
    pub fn outside_allocator(&self) -> u64 {
        // TODO
        todo!("driver_used minus reserved")
    }
}
// ANCHOR_END: memory_view
