//! Chapter 3: `drop` versus `empty_cache`.
//!
//! Dropping a buffer (Rust's `del`) gives its block back to the allocator's cache;
//! `empty_cache` gives whole, unused segments back to the device. Reference solution.

pub use ch03_given::{TinyLinear, measure};
pub use ch03_predict::{MIB, Outcome, Scenario};
use gpumem::{Device, Result};

// ANCHOR: unload_model
/// Frees `model` and hands the memory it used back to the device, for other processes to use.
pub fn unload_model(dev: &Device, model: TinyLinear) {
    // First the blocks go back to the cache; only then is the segment free to release.
    drop(model);
    dev.empty_cache();
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
    pub fn capture(dev: &Device) -> Result<MemoryView> {
        let allocated = dev.memory_allocated();
        let reserved = dev.memory_reserved();
        let (free, total) = dev.mem_get_info()?;
        Ok(MemoryView {
            allocated,
            reserved,
            driver_used: total - free,
            driver_total: total,
        })
    }

    /// Reserved but not allocated: memory the allocator holds in its cache.
    pub fn cached(&self) -> u64 {
        self.reserved - self.allocated
    }

    /// Memory the driver counts as used that this allocator does not hold (0 on `cpu`).
    pub fn outside_allocator(&self) -> u64 {
        // On cuda another process may free memory between the two readings: never go below 0.
        self.driver_used.saturating_sub(self.reserved)
    }
}
// ANCHOR_END: memory_view
