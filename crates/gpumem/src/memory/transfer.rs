//! Copy counters: how many copies and bytes moved, by direction. Learners count their copies.

use std::sync::atomic::{AtomicU64, Ordering};

/// Copies in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CopyCount {
    /// Number of copies.
    pub copies: u64,
    /// Bytes moved.
    pub bytes: u64,
}

/// The copy counters of one device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TransferStats {
    /// Host memory into the device (`from_slice`, `copy_from_slice`, pinned uploads).
    pub host_to_device: CopyCount,
    /// Device memory out to the host (`to_vec`, pinned downloads).
    pub device_to_host: CopyCount,
    /// Within the device (`try_clone`, `copy_from`), or between two devices (`to`), counted on both.
    pub device_to_device: CopyCount,
    /// Of the host↔device copies, those whose host side was pinned memory.
    pub pinned: CopyCount,
}

impl TransferStats {
    /// All copies in every direction (pinned copies are already among host↔device).
    pub fn total_copies(&self) -> u64 {
        self.host_to_device.copies + self.device_to_host.copies + self.device_to_device.copies
    }
}

/// Direction of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

#[derive(Default)]
pub(crate) struct TransferCounters {
    counts: [[AtomicU64; 2]; 4],
}

impl TransferCounters {
    pub(crate) fn count(&self, direction: Direction, bytes: usize, pinned: bool) {
        let add = |slot: usize| {
            self.counts[slot][0].fetch_add(1, Ordering::Relaxed);
            self.counts[slot][1].fetch_add(bytes as u64, Ordering::Relaxed);
        };
        add(direction as usize);
        if pinned {
            add(3);
        }
    }

    pub(crate) fn read(&self) -> TransferStats {
        let get = |slot: usize| CopyCount {
            copies: self.counts[slot][0].load(Ordering::Relaxed),
            bytes: self.counts[slot][1].load(Ordering::Relaxed),
        };
        TransferStats {
            host_to_device: get(Direction::HostToDevice as usize),
            device_to_host: get(Direction::DeviceToHost as usize),
            device_to_device: get(Direction::DeviceToDevice as usize),
            pinned: get(3),
        }
    }

    pub(crate) fn reset(&self) {
        self.counts
            .iter()
            .flatten()
            .for_each(|c| c.store(0, Ordering::Relaxed));
    }
}
