//! The caching host allocator behind pinned memory, as torch's `CachingHostAllocator`: sizes
//! round up to a power of two, freed blocks wait in the cache until the copies using them are done.

use crate::error::Result;
use crate::memory::activity::{ActivityLog, HostAction};
use crate::memory::event::Event;
use crate::policy::allocator::PendingUse;
use crate::policy::history::{
    HistoryLevel, HistoryOptions, HostSegmentInfo, TraceAction, TraceEntry, now_us,
};
use crate::policy::stats::Stat;
use crate::raw::backend::{DeviceBackend, HostAllocation, Pinning};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// The pinned host allocator's counters (`torch.cuda.host_memory_stats`), under torch 2.15's
/// keys and meanings (its `HostStats`, ATen/core/CachingHostAllocator.h in the 2.15.0 wheel, and
/// `host_memory_stats`'s docstring; after pytorch/pytorch#164412 and #169560). Before those
/// changes torch called the pool `segment` / `reserved_bytes` and the blocks handed out
/// `allocation` / `allocated_bytes` (pytorch/pytorch#147660). torch's `host_alloc_time` and
/// `host_free_time` are not kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostMemoryStats {
    /// Pinned blocks the allocator owns, handed out or cached (`allocations`).
    pub allocations: Stat,
    /// Their bytes, handed out or cached: the pool (`allocated_bytes`).
    pub allocated_bytes: Stat,
    /// Blocks handed out and not yet back in the cache (`active_requests`).
    pub active_requests: Stat,
    /// Their bytes (`active_bytes`).
    pub active_bytes: Stat,
    /// Blocks taken from the system (`cuMemHostAlloc`) to grow the pool (`num_host_alloc`).
    pub num_host_alloc: u64,
    /// Cached blocks given back to the system (`num_host_free`).
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
    /// Blocks handed out: their number, address and size.
    live: BTreeMap<u64, (u64, usize)>,
    stats: HostMemoryStats,
    /// The number the last block taken from the system got.
    blocks_taken: u64,
    /// The host trace (`record_pinned_host_memory`).
    history: HostHistory,
}

/// The pinned host allocator's own trace, as torch 2.15's `CachingHostAllocatorImpl`
/// (`record_trace`, `recordHistory` in ATen/core/CachingHostAllocator.h of the 2.15.0 wheel):
/// `segment_alloc` and `alloc` when a block is taken from the system, `alloc` on reuse,
/// `free_requested` and `free_completed` on a free, `segment_free` when `empty_host_cache` gives a
/// block back. Sizes are the block's (rounded) size; entries carry no stream and no frames.
#[derive(Default)]
struct HostHistory {
    enabled: bool,
    max_entries: usize,
    entries: VecDeque<TraceEntry>,
}

impl HostHistory {
    fn record(&mut self, action: TraceAction, addr: u64, size: usize, stats: &HostMemoryStats) {
        if !self.enabled {
            return;
        }
        if self.entries.len() >= self.max_entries {
            self.entries.pop_front();
        }
        self.entries.push_back(TraceEntry {
            action,
            addr,
            size: size as u64,
            stream: 0,
            allocated: stats.active_bytes.current,
            reserved: stats.allocated_bytes.current,
            time_us: now_us(),
            frames: Vec::new(),
            label: None,
        });
    }
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

    /// A block of `size` bytes (a power of two) for a request of `requested` bytes, and its number;
    /// a block taken from the system is made as `pinning` says.
    pub(super) fn malloc(
        &self,
        backend: &dyn DeviceBackend,
        log: &ActivityLog,
        size: usize,
        requested: usize,
        pinning: Pinning,
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
                let alloc = backend.host_alloc(size, pinning)?;
                st.stats.num_host_alloc += 1;
                st.stats.allocations.increase(1);
                st.stats.allocated_bytes.increase(size as u64);
                st.blocks_taken += 1;
                let stats = st.stats;
                st.history
                    .record(TraceAction::SegmentAlloc, alloc.ptr as u64, size, &stats);
                (alloc, st.blocks_taken, HostAction::Alloc)
            }
        };
        st.stats.active_requests.increase(1);
        st.stats.active_bytes.increase(size as u64);
        st.live.insert(block, (alloc.ptr as u64, size));
        let stats = st.stats;
        st.history
            .record(TraceAction::Alloc, alloc.ptr as u64, size, &stats);
        log.host(
            action,
            block,
            size,
            requested,
            st.stats.active_bytes.current,
            st.stats.allocated_bytes.current,
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
        let addr = alloc.ptr as u64;
        st.live.remove(&block);
        let stats = st.stats;
        st.history
            .record(TraceAction::FreeRequested, addr, size, &stats);
        st.stats.active_requests.decrease(1);
        st.stats.active_bytes.decrease(size as u64);
        let stats = st.stats;
        st.history
            .record(TraceAction::FreeCompleted, addr, size, &stats);
        log.host(
            HostAction::Free,
            block,
            size,
            0,
            st.stats.active_bytes.current,
            st.stats.allocated_bytes.current,
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

    /// `record_memory_history`'s options for the host trace, as torch 2.15 applies them: recording
    /// is on when `enabled` and `record_pinned_host_memory` are; turning it off keeps the trace
    /// (only `clear_history` empties it; torch's host `recordHistory`). Options that name neither
    /// `record_pinned_host_memory` nor `enabled=None` leave the host trace alone.
    pub(crate) fn record_history(&self, options: &HistoryOptions) {
        if options.enabled.is_some() && !options.record_pinned_host_memory {
            return;
        }
        let mut st = self.lock();
        let h = &mut st.history;
        h.enabled = options.enabled.is_some();
        if h.enabled {
            h.max_entries = match options.enabled {
                Some(HistoryLevel::All) => options.max_entries.max(1),
                _ => 1,
            };
        }
        if options.clear_history {
            h.entries.clear();
        }
        while h.entries.len() > h.max_entries.max(1) {
            h.entries.pop_front();
        }
    }

    /// Whether the host trace is recording.
    pub(crate) fn is_recording(&self) -> bool {
        self.lock().history.enabled
    }

    /// The host trace, oldest first.
    pub(crate) fn traces(&self) -> Vec<TraceEntry> {
        self.lock().history.entries.iter().cloned().collect()
    }

    /// Every block the pinned host allocator holds, handed out or cached, by address.
    pub(crate) fn segments(&self) -> Vec<HostSegmentInfo> {
        let st = self.lock();
        let mut out: Vec<HostSegmentInfo> = st
            .live
            .values()
            .map(|&(address, size)| HostSegmentInfo {
                address,
                size: size as u64,
                allocated: true,
                active: true,
            })
            .collect();
        for (size, blocks) in &st.free {
            for b in blocks {
                out.push(HostSegmentInfo {
                    address: b.alloc.ptr as u64,
                    size: *size as u64,
                    allocated: false,
                    active: !b.pending.iter().all(PendingUse::is_done),
                });
            }
        }
        out.sort_by_key(|s| s.address);
        out
    }

    pub(crate) fn reset_stats(&self) {
        let mut st = self.lock();
        let s = &mut st.stats;
        for stat in [
            &mut s.allocations,
            &mut s.allocated_bytes,
            &mut s.active_requests,
            &mut s.active_bytes,
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
                st.stats.allocations.decrease(1);
                st.stats.allocated_bytes.decrease(size as u64);
                let stats = st.stats;
                st.history.record(
                    TraceAction::SegmentFree,
                    block.alloc.ptr as u64,
                    size,
                    &stats,
                );
                log.host(
                    HostAction::Release,
                    block.block,
                    size,
                    0,
                    st.stats.active_bytes.current,
                    st.stats.allocated_bytes.current,
                );
            }
        }
    }
}
