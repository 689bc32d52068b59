//! The caching host allocator behind pinned memory, as torch's `CachingHostAllocator`: sizes
//! round up to a power of two, freed blocks wait in the cache until the copies using them are done.

use crate::error::Result;
use crate::memory::activity::{ActivityLog, HostAction};
use crate::memory::event::Event;
use crate::policy::allocator::PendingUse;
use crate::policy::stats::Stat;
use crate::raw::backend::{DeviceBackend, HostAllocation};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The pinned host allocator's counters (`torch.cuda.host_memory_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostMemoryStats {
    /// Live pinned blocks.
    pub allocation: Stat,
    /// Pinned blocks obtained from the system (live or cached).
    pub segment: Stat,
    /// Bytes in live pinned blocks.
    pub allocated_bytes: Stat,
    /// Bytes of pinned memory obtained from the system.
    pub reserved_bytes: Stat,
    /// Calls to the system's pinned allocation (`cuMemHostAlloc`).
    pub num_host_alloc: u64,
    /// Calls to the system's pinned free.
    pub num_host_free: u64,
}

struct CachedHostBlock {
    alloc: HostAllocation,
    /// The block's number (from 1, in the order blocks were taken from the system).
    block: u64,
    /// Copies that may still read or write the block.
    pending: Vec<Event>,
}

#[derive(Default)]
struct HostState {
    free: BTreeMap<usize, Vec<CachedHostBlock>>,
    stats: HostMemoryStats,
    /// The number the last block taken from the system got.
    blocks_taken: u64,
}

/// One device's caching allocator for pinned host memory.
#[derive(Default)]
pub(crate) struct HostAllocator {
    state: Mutex<HostState>,
}

impl HostAllocator {
    fn lock(&self) -> std::sync::MutexGuard<'_, HostState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of `size` bytes (a power of two) for a request of `requested` bytes, and its number.
    pub(super) fn malloc(
        &self,
        backend: &dyn DeviceBackend,
        log: &ActivityLog,
        size: usize,
        requested: usize,
    ) -> Result<(HostAllocation, u64)> {
        let mut st = self.lock();
        let reused = st.free.get_mut(&size).and_then(|list| {
            let i = list
                .iter()
                .position(|b| b.pending.iter().all(PendingUse::is_done))?;
            let b = list.swap_remove(i);
            Some((b.alloc, b.block))
        });
        let (alloc, block, action) = match reused {
            Some((alloc, block)) => (alloc, block, HostAction::Reuse),
            None => {
                let alloc = backend.host_alloc(size)?;
                st.stats.num_host_alloc += 1;
                st.stats.segment.increase(1);
                st.stats.reserved_bytes.increase(size as u64);
                st.blocks_taken += 1;
                (alloc, st.blocks_taken, HostAction::Alloc)
            }
        };
        st.stats.allocation.increase(1);
        st.stats.allocated_bytes.increase(size as u64);
        log.host(
            action,
            block,
            size,
            requested,
            st.stats.allocated_bytes.current,
            st.stats.reserved_bytes.current,
        );
        Ok((alloc, block))
    }

    pub(super) fn free(
        &self,
        log: &ActivityLog,
        alloc: HostAllocation,
        block: u64,
        size: usize,
        pending: Vec<Event>,
    ) {
        let mut st = self.lock();
        st.stats.allocation.decrease(1);
        st.stats.allocated_bytes.decrease(size as u64);
        log.host(
            HostAction::Free,
            block,
            size,
            0,
            st.stats.allocated_bytes.current,
            st.stats.reserved_bytes.current,
        );
        st.free.entry(size).or_default().push(CachedHostBlock {
            alloc,
            block,
            pending,
        });
    }

    pub(crate) fn stats(&self) -> HostMemoryStats {
        self.lock().stats
    }

    pub(crate) fn reset_stats(&self) {
        let mut st = self.lock();
        let s = &mut st.stats;
        for stat in [
            &mut s.allocation,
            &mut s.segment,
            &mut s.allocated_bytes,
            &mut s.reserved_bytes,
        ] {
            *stat = Stat {
                current: stat.current,
                peak: stat.current,
                allocated: 0,
                freed: 0,
            };
        }
        s.num_host_alloc = 0;
        s.num_host_free = 0;
    }

    pub(crate) fn empty_cache(&self, backend: &dyn DeviceBackend, log: &ActivityLog) {
        let mut st = self.lock();
        for (size, blocks) in std::mem::take(&mut st.free) {
            for block in blocks {
                block.pending.iter().for_each(PendingUse::wait);
                // SAFETY: the block came from host_alloc(size) and no copy uses it any more.
                unsafe { backend.host_free(block.alloc, size) };
                st.stats.num_host_free += 1;
                st.stats.segment.decrease(1);
                st.stats.reserved_bytes.decrease(size as u64);
                log.host(
                    HostAction::Release,
                    block.block,
                    size,
                    0,
                    st.stats.allocated_bytes.current,
                    st.stats.reserved_bytes.current,
                );
            }
        }
    }
}
