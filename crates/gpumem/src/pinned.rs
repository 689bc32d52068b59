//! Pinned (page-locked) host memory through a caching host allocator, as torch's
//! `CachingHostAllocator`: sizes round up to a power of two and freed blocks are kept for reuse.

use crate::activity::{ActivityLog, HostAction, WorkKind};
use crate::allocator::PendingUse;
use crate::backend::{DeviceBackend, HostAllocation};
use crate::buffer::{Buffer, Element};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::history::{HistoryLevel, HistoryOptions, TraceAction, TraceEntry, now_us};
use crate::stats::Stat;
use crate::stream::{Event, Stream};
use crate::transfer::Direction;
use std::collections::{BTreeMap, VecDeque};
use std::marker::PhantomData;
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

/// One block of the pinned host allocator in a snapshot (torch 2.15's `HostSegmentInfo`: the host
/// allocator never splits a block, so each is a segment of its own).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostSegmentInfo {
    /// Its address.
    pub address: u64,
    /// Its size in bytes (a power of two).
    pub size: u64,
    /// Handed out now.
    pub allocated: bool,
    /// Handed out, or freed with copies that may still use it.
    pub active: bool,
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
    fn malloc(
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
        log.host(action, block, size, requested, &st.stats);
        Ok((alloc, block))
    }

    fn free(
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
        log.host(HostAction::Free, block, size, 0, &st.stats);
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
                log.host(HostAction::Release, block.block, size, 0, &st.stats);
            }
        }
    }
}

/// `len` elements of `T` in pinned host memory (`torch.empty(.., pin_memory=True)`).
///
/// Reading or writing it waits for any asynchronous copy still using it, so a copy can never see
/// its data change underneath.
pub struct PinnedBuffer<T: Element> {
    device: Device,
    alloc: HostAllocation,
    /// The block's size: `size_of::<T>() × len` rounded up to a power of two.
    block_size: usize,
    /// The block's number in the device's pinned activity.
    block: u64,
    len: usize,
    pending: Vec<Event>,
    _element: PhantomData<T>,
}

impl Device {
    /// `len` zeros of `T` in pinned host memory, from this device's caching host allocator.
    pub fn alloc_pinned<T: Element>(&self, len: usize) -> Result<PinnedBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::HostAlloc {
                size: usize::MAX,
                reason: format!("{len} elements overflow the address space"),
            })?;
        let block_size = bytes.max(1).next_power_of_two();
        let (alloc, block) = self.inner.host.malloc(
            self.inner.backend.as_ref(),
            &self.inner.activity,
            block_size,
            bytes,
        )?;
        // SAFETY: the block holds block_size >= bytes bytes and is ours.
        unsafe { std::ptr::write_bytes(alloc.ptr, 0, bytes) };
        Ok(PinnedBuffer {
            device: self.clone(),
            alloc,
            block_size,
            block,
            len,
            pending: Vec::new(),
            _element: PhantomData,
        })
    }
}

impl<T: Element> PinnedBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the operating system really locked the pages (it may refuse on cpu, e.g. a low
    /// `ulimit -l`; the buffer then works as ordinary pageable memory).
    pub fn is_page_locked(&self) -> bool {
        self.alloc.page_locked
    }

    /// Bytes of the cached host block behind it (a power of two).
    pub fn block_bytes(&self) -> usize {
        self.block_size
    }

    /// Remembers a copy in flight, forgetting those already finished (a loop of copies that never
    /// reads the buffer must not pile up events).
    fn track(&mut self, copy: Event) {
        self.pending.retain(|e| !e.is_done());
        self.pending.push(copy);
    }

    fn wait_for_copies(&mut self) {
        for event in self.pending.drain(..) {
            event.wait();
        }
    }

    /// The data, after waiting for copies still using it.
    pub fn as_slice(&mut self) -> &[T] {
        self.wait_for_copies();
        // SAFETY: the block holds len elements of T, initialised (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.alloc.ptr.cast(), self.len) }
    }

    /// The data for writing, after waiting for copies still using it.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        self.wait_for_copies();
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.cast(), self.len) }
    }

    fn check(&self, op: &'static str, buf: &Buffer<T>, stream: &Stream) -> Result<()> {
        if buf.len() != self.len {
            return Err(Error::LengthMismatch {
                expected: buf.len(),
                actual: self.len,
            });
        }
        for dev in [buf.device(), stream.device()] {
            if *dev != self.device {
                return Err(Error::DeviceMismatch {
                    op,
                    expected: self.device.to_string(),
                    actual: dev.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Queues a copy of this pinned data into `dst` on `stream` and returns at once (cuda); the
    /// device buffer is marked as used by `stream`. On cpu the copy is done on return.
    pub fn copy_to_device_async(&mut self, dst: &mut Buffer<T>, stream: &Stream) -> Result<()> {
        self.check("copy_to_device_async", dst, stream)?;
        let n = dst.size_bytes();
        if n > 0 {
            let span = self.device.inner.activity.start();
            // SAFETY: both ranges hold n bytes; the pinned block stays alive and unchanged until
            // the copy's event has passed (every access waits for `pending`).
            unsafe {
                self.device.inner.backend.copy_htod(
                    dst.ptr(),
                    self.alloc.ptr,
                    n,
                    stream.raw(),
                    true,
                )?
            };
            self.device.inner.activity.finish(
                span,
                WorkKind::HostToDevice,
                "copy",
                stream.id().0,
                n,
                Some(self.block),
            );
            dst.record_stream(stream);
            self.track(stream.record_event()?);
            self.device.count(Direction::HostToDevice, n, true);
        }
        Ok(())
    }

    /// Queues a copy of `src` into this pinned memory on `stream` and returns at once (cuda).
    pub fn copy_from_device_async(&mut self, src: &Buffer<T>, stream: &Stream) -> Result<()> {
        self.check("copy_from_device_async", src, stream)?;
        let n = src.size_bytes();
        if n > 0 {
            let span = self.device.inner.activity.start();
            // SAFETY: as in copy_to_device_async.
            unsafe {
                self.device.inner.backend.copy_dtoh(
                    self.alloc.ptr,
                    src.ptr(),
                    n,
                    stream.raw(),
                    true,
                )?
            };
            self.device.inner.activity.finish(
                span,
                WorkKind::DeviceToHost,
                "copy",
                stream.id().0,
                n,
                Some(self.block),
            );
            src.record_stream(stream);
            self.track(stream.record_event()?);
            self.device.count(Direction::DeviceToHost, n, true);
        }
        Ok(())
    }
}

impl<T: Element> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let inner = &self.device.inner;
        inner.host.free(
            &inner.activity,
            self.alloc,
            self.block,
            self.block_size,
            pending,
        );
    }
}
