//! The caching allocator: PyTorch's `CUDACachingAllocator` rules over any [`RawMemory`].
//!
//! It knows nothing of CUDA. Segments are reserved from the backend and carved into blocks; freed
//! blocks stay cached in one of two pools (small: requests up to 1 MiB; large: the rest), keyed by
//! stream and size, and are reused best-fit. Reserved memory goes back to the device only through
//! [`CachingAllocator::empty_cache`] or when a reservation fails (release the cache, retry once).
//!
//! With `expandable_segments:True` a request that finds no cached block grows one segment per
//! stream and pool instead: address space is reserved once and pages (2 MiB in the small pool,
//! 20 MiB in the large one, as torch) are mapped behind it on demand and unmapped by
//! `empty_cache`. The rules are torch 2.x's `ExpandableSegment` and `try_allocate_expandable_block`.

use crate::error::{Error, Result};
use crate::policy::blocks::{Block, BlockId, ExpandableSegment, FreeBlocks, PoolKey, State};
use crate::policy::config::AllocatorConfig;
use crate::policy::history::{
    BlockInfo, BlockState, History, HistoryOptions, SegmentInfo, Snapshot, TraceAction,
};
use crate::policy::stats::{DeviceStats, MemoryStats, Pool};
use crate::raw::backend::{DevicePtr, MappedPage, Pinning, RawMemory, RawStream, ReserveError};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

pub use crate::policy::blocks::Allocation;
pub use crate::policy::sizes::{
    LARGE_BUFFER, MAX_EXPANDABLE_ADDRESS_SPACE, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ONE_EXA_BYTE,
    ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE, pool_for, round_size, segment_size_for,
};
pub use crate::policy::streams::{PendingUse, StreamId};

/// The caching allocator of one device.
pub struct CachingAllocator<B: RawMemory> {
    backend: B,
    device: String,
    state: Mutex<State>,
}

impl<B: RawMemory> CachingAllocator<B> {
    /// An allocator over `backend`, named `device` in messages and summaries.
    pub fn new(backend: B, device: impl Into<String>, config: AllocatorConfig) -> Self {
        CachingAllocator {
            backend,
            device: device.into(),
            state: Mutex::new(State {
                blocks: Vec::new(),
                free_slots: Vec::new(),
                small: FreeBlocks::new(),
                large: FreeBlocks::new(),
                pending_frees: Vec::new(),
                reserved: 0,
                limit: None,
                fraction: None,
                oversize_segments: Default::default(),
                unmapped: BTreeMap::new(),
                expandable: Vec::new(),
                raw_streams: HashMap::new(),
                stats: DeviceStats {
                    max_split_size: config.max_split_size as u64,
                    ..DeviceStats::default()
                },
                config,
                history: History::default(),
            }),
        }
    }

    /// The raw backend underneath.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave the block lists half-edited in a way that
        // matters more than losing the device, so keep going with the data as it is.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Allocates at least `size` bytes for use on `stream`. `size` 0 is an error-free empty block.
    #[track_caller]
    pub fn malloc(&self, size: usize, stream: StreamId) -> Result<Allocation> {
        let mut guard = self.lock();
        if size as u64 >= ONE_EXA_BYTE {
            // torch's guard, before the allocator is asked: no retry, no `oom` entry, not counted
            // in `num_ooms`.
            let (free, total) = self.backend.mem_get_info().unwrap_or((0, 0));
            let allocated = guard.stats.allocated_bytes.all.current;
            return Err(Error::OutOfMemory {
                device: self.device.clone(),
                alloc_size: size as u64,
                requested: size as u64,
                total: total as u64,
                free: free as u64,
                allocated,
                reserved_unallocated: guard.stats.reserved_bytes.all.current - allocated,
                allowed: guard.limit.map(|l| l as u64),
                too_large: true,
            });
        }
        let st = &mut *guard;
        st.history
            .set_call_site(Some(std::panic::Location::caller()));
        if size == 0 {
            return Ok(Allocation {
                ptr: 0,
                size: 0,
                requested: 0,
                id: usize::MAX,
            });
        }
        st.process_pending_frees();
        let rounded = round_size(size, &st.config);
        let pool = pool_for(rounded);
        let segment_size = segment_size_for(rounded, &st.config);

        let mut found = st.get_free_block(pool, stream, rounded);
        if found.is_none() {
            if st.config.garbage_collection_threshold > 0.0 && st.limit.is_some() {
                self.garbage_collect(st);
            }
            found = self.reserve_segment(st, pool, stream, segment_size, rounded, false)?;
            if found.is_none() && self.release_available_cached_blocks(st, pool, stream, rounded) {
                found = self.reserve_segment(st, pool, stream, segment_size, rounded, false)?;
            }
            if found.is_none() {
                self.release_cached_blocks(st);
                found = self.reserve_segment(st, pool, stream, segment_size, rounded, true)?;
            }
        }
        let Some(id) = found else {
            st.stats.num_ooms += 1;
            let (free, total) = self.backend.mem_get_info().unwrap_or((0, 0));
            // As torch 2.15 (`record_trace(TraceEntry::OOM, device_free, params.size(), ..)`):
            // the entry carries the device's free bytes and the rounded request, not the
            // segment that was asked of the device.
            st.history
                .record(TraceAction::Oom, free as u64, rounded, stream, &st.stats);
            let allocated = st.stats.allocated_bytes.all.current;
            return Err(Error::OutOfMemory {
                device: self.device.clone(),
                alloc_size: segment_size as u64,
                requested: size as u64,
                total: total as u64,
                free: free as u64,
                allocated,
                reserved_unallocated: st.stats.reserved_bytes.all.current - allocated,
                allowed: st.limit.map(|l| l as u64),
                too_large: false,
            });
        };
        Ok(st.alloc_found_block(id, size, rounded))
    }

    /// Returns a block to the cache. With pending uses on other streams the block stays active
    /// (not reusable) until they are done; its bytes stop counting as allocated at once.
    ///
    /// `allocation` must be live: an `Allocation` is plain data, and freeing one twice is a bug
    /// (caught when the block is still free; after reuse it would free the new owner's block).
    /// [`crate::Buffer`] frees exactly once.
    pub fn free(&self, allocation: Allocation, pending: Vec<Box<dyn PendingUse>>) {
        if allocation.size == 0 {
            return;
        }
        // As torch's `free`: a block with recorded streams gets an event on each (`insert_events`)
        // even when they are idle, and stays active (in `active_bytes` and `requested_bytes`)
        // until the next `malloc` finds the events done (`process_events`).
        let mut guard = self.lock();
        let st = &mut *guard;
        let id = allocation.id;
        let (size, requested, pool, stream, ptr, oversize) = {
            let b = st.block_mut(id);
            assert!(
                b.allocated && b.ptr == allocation.ptr,
                "gpumem: freeing a block that is not live"
            );
            b.allocated = false;
            let oversize = std::mem::take(&mut b.counted_oversize);
            (b.size, b.requested, b.pool, b.stream, b.ptr, oversize)
        };
        let stats = &mut st.stats;
        stats.allocation.decrease(pool, 1);
        stats.allocated_bytes.decrease(pool, size as u64);
        if oversize {
            st.stats.oversize_allocations.decrease(1);
        }
        st.history.record(
            TraceAction::FreeRequested,
            ptr,
            requested,
            stream,
            &st.stats,
        );
        if pending.is_empty() {
            st.free_block(id);
        } else {
            st.block_mut(id).pending = pending.len();
            st.pending_frees.push((id, pending));
        }
    }

    /// Releases every cached segment that holds no live block; nothing else.
    pub fn empty_cache(&self) {
        let mut st = self.lock();
        self.release_cached_blocks(&mut st);
    }

    /// Tells the allocator the backend's handle of stream `id`, so that unmapping its expandable
    /// segment's pages waits for that stream alone, as torch's does. Call [`forget_stream`]
    /// before the stream is destroyed; until then `raw` must stay alive. The default stream
    /// (`StreamId(0)`) is always `RawStream(0)`.
    ///
    /// [`forget_stream`]: CachingAllocator::forget_stream
    pub fn register_stream(&self, id: StreamId, raw: RawStream) {
        if id != StreamId(0) {
            self.lock().raw_streams.insert(id, raw);
        }
    }

    /// Forgets a stream's handle (it is about to be destroyed): from now on unmapping its
    /// segment's pages waits for the whole device.
    pub fn forget_stream(&self, id: StreamId) {
        self.lock().raw_streams.remove(&id);
    }

    /// `torch.cuda.memory_stats()`.
    pub fn memory_stats(&self) -> MemoryStats {
        self.lock().stats.to_memory_stats()
    }

    /// The raw counters (faster than `memory_stats` for a single number).
    pub fn device_stats(&self) -> DeviceStats {
        self.lock().stats.clone()
    }

    /// Sets every peak to its current value.
    pub fn reset_peak_stats(&self) {
        self.lock().stats.reset_peak();
    }

    /// Zeroes the running totals and event counters.
    pub fn reset_accumulated_stats(&self) {
        self.lock().stats.reset_accumulated();
    }

    /// Caps this process's reservations at `fraction` of the device's total memory.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::BadSetting {
                setting: format!("memory fraction {fraction}"),
                reason: format!("Invalid fraction value: {fraction}. Allowed range: 0~1"),
            });
        }
        let (_, total) = self.backend.mem_get_info()?;
        let mut st = self.lock();
        st.limit = Some((total as f64 * fraction) as usize);
        st.fraction = Some(fraction);
        Ok(())
    }

    /// The fraction set by `set_memory_fraction`; 1.0 when none is set (torch's
    /// `get_per_process_memory_fraction`).
    pub fn memory_fraction(&self) -> f64 {
        self.lock().fraction.unwrap_or(1.0)
    }

    /// Removes the cap set by `set_memory_fraction`.
    pub fn clear_memory_fraction(&self) {
        let mut st = self.lock();
        st.limit = None;
        st.fraction = None;
    }

    /// The current configuration.
    pub fn config(&self) -> AllocatorConfig {
        self.lock().config.clone()
    }

    /// How the device's pinned host memory is made under the current settings
    /// ([`AllocatorConfig::pinning`]).
    pub fn config_pinning(&self) -> Pinning {
        self.lock().config.pinning()
    }

    /// Replaces the configuration; cached blocks stay.
    pub fn set_config(&self, config: AllocatorConfig) {
        let mut st = self.lock();
        st.stats.max_split_size = config.max_split_size as u64;
        st.config = config;
    }

    /// Applies a setting string at run time, as torch's `_set_allocator_settings`: the options
    /// named change, `max_split_size_mb`, `roundup_power2_divisions` and
    /// `garbage_collection_threshold` go back to their defaults unless named; cached blocks stay.
    pub fn set_allocator_settings(&self, text: &str) -> Result<()> {
        let mut st = self.lock();
        st.config.apply(text)?;
        st.stats.max_split_size = st.config.max_split_size as u64;
        Ok(())
    }

    /// Starts (`true`: torch's `enabled="all"`, every entry kept) or stops recording a trace of
    /// allocator events for `snapshot`.
    pub fn record_history(&self, enabled: bool) {
        self.record_history_options(if enabled {
            HistoryOptions::default()
        } else {
            HistoryOptions::off()
        });
    }

    /// `record_history` with torch's options, for the device trace (see
    /// [`crate::HistoryOptions`]; `Device::record_memory_history_options` also checks them and
    /// applies them to the pinned host allocator).
    pub fn record_history_options(&self, options: HistoryOptions) {
        self.lock().history.set_options(options);
    }

    /// Puts an annotation named `label` into the history when recording (nothing otherwise).
    pub fn record_annotation(&self, label: &str) {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.history.annotate(label, &st.stats);
    }

    /// The segments and blocks now, and the recorded trace (which gets a `snapshot` entry, as
    /// torch's, when recording).
    pub fn snapshot(&self) -> Snapshot {
        let mut guard = self.lock();
        let st = &mut *guard;
        // As torch's `snapshot()`: the trace is read first, then the segments' snapshot records
        // its `snapshot` entry, so that entry shows in the next snapshot's trace, not this one's.
        let trace = st.history.entries();
        let active = st.stats.active_bytes.all.current as usize;
        st.history
            .record(TraceAction::Snapshot, 0, active, StreamId(0), &st.stats);
        let mut segments = Vec::new();
        for (id, block) in st.blocks.iter().enumerate() {
            let Some(block) = block else { continue };
            // One segment per contiguous mapped range, as torch reports expandable segments.
            if !block.mapped || block.prev.is_some_and(|p| st.block(p).mapped) {
                continue;
            }
            let mut blocks = Vec::new();
            let mut cursor = Some(id);
            while let Some(c) = cursor.filter(|&c| st.block(c).mapped) {
                let b = st.block(c);
                blocks.push(BlockInfo {
                    address: b.ptr,
                    size: b.size as u64,
                    requested_size: if b.allocated { b.requested as u64 } else { 0 },
                    state: if b.allocated {
                        BlockState::ActiveAllocated
                    } else if b.pending > 0 {
                        BlockState::ActivePendingFree
                    } else {
                        BlockState::Inactive
                    },
                });
                cursor = b.next;
            }
            segments.push(SegmentInfo::new(
                block.ptr,
                block.stream,
                block.pool,
                block.expandable.is_some(),
                blocks,
            ));
        }
        segments.sort_by_key(|s| s.address);
        Snapshot {
            device: self.device.clone(),
            segments,
            trace,
            allocator_settings: st.config.clone(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
        }
    }

    /// The `memory_summary` table.
    pub fn memory_summary(&self) -> String {
        self.memory_stats().summary(&self.device)
    }

    /// Bytes now in live blocks (`memory_allocated`), without building the whole stats map.
    pub fn allocated_bytes(&self) -> u64 {
        self.lock().stats.allocated_bytes.all.current
    }

    /// Bytes now reserved from the device (`memory_reserved`).
    pub fn reserved_bytes(&self) -> u64 {
        self.lock().stats.reserved_bytes.all.current
    }

    /// Reserves a new segment of `size` bytes and registers it as one free block, or with
    /// expandable segments grows one to fit `rounded` bytes. `Ok(None)`: not enough memory.
    fn reserve_segment(
        &self,
        st: &mut State,
        pool: Pool,
        stream: StreamId,
        size: usize,
        rounded: usize,
        is_retry: bool,
    ) -> Result<Option<BlockId>> {
        if is_retry {
            st.stats.num_alloc_retries += 1;
        }
        // As torch, the cap is checked against the segment size even when a segment grows.
        if st.limit.is_some_and(|limit| st.reserved + size > limit) {
            return Ok(None);
        }
        if st.config.expandable_segments {
            return self.try_allocate_expandable_block(st, pool, stream, rounded);
        }
        let ptr = match self.backend.reserve(size) {
            Ok(ptr) => ptr,
            Err(ReserveError::OutOfMemory) => return Ok(None),
            Err(ReserveError::Other(e)) => return Err(e),
        };
        st.reserved += size;
        st.stats.segment.increase(pool, 1);
        st.stats.reserved_bytes.increase(pool, size as u64);
        if size >= st.config.max_split_size {
            st.stats.oversize_segments.increase(1);
            st.oversize_segments.insert(ptr);
        }
        st.stats.num_device_alloc += 1;
        let id = st.insert_block(Block {
            ptr,
            size,
            requested: 0,
            stream,
            pool,
            allocated: false,
            pending: 0,
            prev: None,
            next: None,
            gc_count: 0,
            counted_oversize: false,
            mapped: true,
            expandable: None,
        });
        st.history
            .record(TraceAction::SegmentAlloc, ptr, size, stream, &st.stats);
        Ok(Some(id))
    }

    /// A free range of address space of at least `size` bytes on `stream` in an expandable
    /// segment of `pool`, lowest address first (torch's `find_expandable_block`): an unmapped
    /// block, with the free block before it when there is one, or a new segment.
    fn find_expandable_block(
        &self,
        st: &mut State,
        pool: Pool,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let allocatable = |st: &State, id: Option<BlockId>| {
            id.filter(|&i| {
                let b = st.block(i);
                !b.allocated && b.pending == 0
            })
        };
        let starts: Vec<BlockId> = st
            .unmapped
            .range((pool, stream, 0)..=(pool, stream, DevicePtr::MAX))
            .map(|(_, &id)| id)
            .collect();
        for unmapped in starts {
            let start = allocatable(st, st.block(unmapped).prev).unwrap_or(unmapped);
            let mut room = 0;
            let mut cursor = Some(start);
            while room < size {
                let Some(c) = allocatable(st, cursor) else {
                    break;
                };
                room += st.block(c).size;
                cursor = st.block(c).next;
            }
            if room >= size {
                return Ok(Some(start));
            }
        }
        let page_size = match pool {
            Pool::Small => SMALL_BUFFER,
            Pool::Large => LARGE_BUFFER,
        };
        if !self.backend.virtual_memory_management() {
            return Err(expandable_unsupported(&self.device));
        }
        let (_, total) = self.backend.mem_get_info()?;
        let wanted = total
            .saturating_add(total / 8)
            .min(MAX_EXPANDABLE_ADDRESS_SPACE);
        let pages = wanted.div_ceil(page_size).max(1);
        let space = pages * page_size;
        let base = match self.backend.reserve_address_space(space) {
            Ok(base) => base,
            Err(ReserveError::OutOfMemory) => return Ok(None),
            Err(ReserveError::Other(e)) => return Err(e),
        };
        let segment = st.expandable.len();
        st.expandable.push(Some(ExpandableSegment {
            stream,
            base,
            size: space,
            page_size,
            pages: vec![None; pages],
        }));
        let id = st.insert_block(Block {
            ptr: base,
            size: space,
            requested: 0,
            stream,
            pool,
            allocated: false,
            pending: 0,
            prev: None,
            next: None,
            gc_count: 0,
            counted_oversize: false,
            mapped: false,
            expandable: Some(segment),
        });
        st.unmapped.insert((pool, stream, base), id);
        Ok(Some(id))
    }

    /// Maps the pages under the first `size` bytes of unmapped block `id` and merges the result
    /// with its free neighbours (torch's `map_block`). `Ok(false)`: the device is full.
    fn map_block(&self, st: &mut State, id: BlockId, size: usize) -> Result<bool> {
        let (ptr, block_size, pool, stream, segment) = {
            let b = st.block(id);
            debug_assert!(!b.mapped && size <= b.size);
            let segment = b
                .expandable
                .expect("an unmapped block lies in an expandable segment");
            (b.ptr, b.size, b.pool, b.stream, segment)
        };
        let (base, page_size) = {
            let seg = st.expandable[segment].as_ref().expect("a live segment");
            (seg.base, seg.page_size)
        };
        let begin = (ptr - base) as usize / page_size;
        let end = ((ptr - base) as usize + size).div_ceil(page_size);
        for page in begin..end {
            let at = base + (page * page_size) as u64;
            // SAFETY: the page lies in the segment's address space and is not mapped.
            match unsafe { self.backend.map(at, page_size) } {
                Ok(handle) => st.segment_mut(segment).pages[page] = Some(handle),
                Err(error) => {
                    self.unmap_pages(st, segment, begin, page);
                    return match error {
                        ReserveError::OutOfMemory => Ok(false),
                        ReserveError::Other(e) => Err(e),
                    };
                }
            }
        }
        let mapped = (end - begin) * page_size;
        st.unmapped.remove(&(pool, stream, ptr));
        st.block_mut(id).mapped = true;
        if mapped < block_size {
            let next = st.block(id).next;
            let rest = st.insert_block(Block {
                ptr: ptr + mapped as u64,
                size: block_size - mapped,
                requested: 0,
                stream,
                pool,
                allocated: false,
                pending: 0,
                prev: Some(id),
                next,
                gc_count: 0,
                counted_oversize: false,
                mapped: false,
                expandable: Some(segment),
            });
            if let Some(n) = next {
                st.block_mut(n).prev = Some(rest);
            }
            st.block_mut(id).next = Some(rest);
            st.block_mut(id).size = mapped;
            st.unmapped
                .insert((pool, stream, ptr + mapped as u64), rest);
        }
        let prev = st.block(id).prev;
        st.try_merge(id, prev);
        let next = st.block(id).next;
        st.try_merge(id, next);
        let key = st.key(id);
        st.pool_mut(pool).insert(key, id);
        st.reserved += mapped;
        st.stats.reserved_bytes.increase(pool, mapped as u64);
        st.stats.num_device_alloc += 1;
        st.history
            .record(TraceAction::SegmentMap, ptr, mapped, stream, &st.stats);
        Ok(true)
    }

    /// Unmaps pages `begin..end` of expandable segment `segment`: one backend call, which waits
    /// once for the segment's stream (torch's `unmapHandles`), or for the whole device when that
    /// stream is gone or was never registered.
    fn unmap_pages(&self, st: &mut State, segment: usize, begin: usize, end: usize) {
        let stream = st.segment_mut(segment).stream;
        let raw = match stream {
            StreamId(0) => Some(RawStream(0)),
            other => st.raw_streams.get(&other).copied(),
        };
        let seg = st.segment_mut(segment);
        let (base, page_size) = (seg.base, seg.page_size);
        let pages: Vec<MappedPage> = (begin..end)
            .filter_map(|page| {
                let handle = seg.pages[page].take()?;
                Some(MappedPage {
                    ptr: base + (page * page_size) as u64,
                    size: page_size,
                    handle,
                })
            })
            .collect();
        // SAFETY: every page was mapped by `map` with its handle and holds no live block; a
        // registered stream is alive until `forget_stream`, which needs this lock.
        unsafe { self.backend.unmap(&pages, raw) };
    }

    /// Finds room for `size` bytes in an expandable segment and maps what is missing (torch's
    /// `try_allocate_expandable_block`); the block returned is out of the pool.
    fn try_allocate_expandable_block(
        &self,
        st: &mut State,
        pool: Pool,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let Some(mut candidate) = self.find_expandable_block(st, pool, stream, size)? else {
            return Ok(None);
        };
        if !st.block(candidate).mapped {
            let first = st.block(candidate).size.min(size);
            if !self.map_block(st, candidate, first)? {
                return Ok(None);
            }
        }
        while st.block(candidate).size < size {
            let missing = size - st.block(candidate).size;
            let next = st
                .block(candidate)
                .next
                .expect("find_expandable_block found room after the candidate");
            let part = st.block(next).size.min(missing);
            if !self.map_block(st, next, part)? {
                return Ok(None);
            }
            candidate = next;
        }
        let key = st.key(candidate);
        st.pool_mut(pool).remove(&key);
        Ok(Some(candidate))
    }

    /// Unmaps the whole pages under free block `id` of an expandable segment; the slivers before
    /// and after stay mapped as free blocks (torch's `unmap_block`).
    fn unmap_block(&self, st: &mut State, id: BlockId) {
        let (ptr, size, pool, stream, segment) = {
            let b = st.block(id);
            let segment = b.expandable.expect("an expandable block");
            (b.ptr, b.size, b.pool, b.stream, segment)
        };
        let (base, page_size) = {
            let seg = st.expandable[segment].as_ref().expect("a live segment");
            (seg.base, seg.page_size)
        };
        let offset = (ptr - base) as usize;
        let begin = offset.div_ceil(page_size);
        let end = (offset + size) / page_size;
        if begin >= end {
            return;
        }
        let key = st.key(id);
        st.pool_mut(pool).remove(&key);
        let start = base + (begin * page_size) as u64;
        let unmapped = (end - begin) * page_size;
        let before = (start - ptr) as usize;
        let after = size - before - unmapped;
        let free_piece = |st: &mut State, at: DevicePtr, len: usize| {
            st.insert_block(Block {
                ptr: at,
                size: len,
                requested: 0,
                stream,
                pool,
                allocated: false,
                pending: 0,
                prev: None,
                next: None,
                gc_count: 0,
                counted_oversize: false,
                mapped: true,
                expandable: Some(segment),
            })
        };
        if before > 0 {
            let piece = free_piece(st, ptr, before);
            let prev = st.block(id).prev;
            st.block_mut(piece).prev = prev;
            st.block_mut(piece).next = Some(id);
            if let Some(p) = prev {
                st.block_mut(p).next = Some(piece);
            }
            st.block_mut(id).prev = Some(piece);
            let k = st.key(piece);
            st.pool_mut(pool).insert(k, piece);
        }
        if after > 0 {
            let piece = free_piece(st, start + unmapped as u64, after);
            let next = st.block(id).next;
            st.block_mut(piece).prev = Some(id);
            st.block_mut(piece).next = next;
            if let Some(n) = next {
                st.block_mut(n).prev = Some(piece);
            }
            st.block_mut(id).next = Some(piece);
            let k = st.key(piece);
            st.pool_mut(pool).insert(k, piece);
        }
        self.unmap_pages(st, segment, begin, end);
        {
            let b = st.block_mut(id);
            b.ptr = start;
            b.size = unmapped;
            b.mapped = false;
        }
        let prev = st.block(id).prev;
        st.try_merge(id, prev);
        let next = st.block(id).next;
        st.try_merge(id, next);
        let at = st.block(id).ptr;
        st.unmapped.insert((pool, stream, at), id);
        st.reserved -= unmapped;
        st.stats.reserved_bytes.decrease(pool, unmapped as u64);
        st.stats.num_device_free += 1;
        st.history.record(
            TraceAction::SegmentUnmap,
            start,
            unmapped,
            stream,
            &st.stats,
        );
    }

    /// Gives back the address space of an expandable segment that is wholly unmapped.
    fn release_expandable_segment(&self, st: &mut State, id: BlockId) {
        let block = st.remove_block(id);
        debug_assert!(!block.mapped && !block.is_split());
        st.unmapped.remove(&(block.pool, block.stream, block.ptr));
        let segment = block.expandable.expect("an expandable block");
        let seg = st.expandable[segment].take().expect("a live segment");
        debug_assert!(seg.pages.iter().all(Option::is_none) && seg.size == block.size);
        // SAFETY: the space came from reserve_address_space(seg.size) and nothing is mapped.
        unsafe { self.backend.release_address_space(seg.base, seg.size) };
    }

    /// Returns one unsplit cached segment to the backend.
    fn release_block(&self, st: &mut State, id: BlockId) {
        let block = st.remove_block(id);
        debug_assert!(!block.is_split() && !block.allocated);
        st.pool_mut(block.pool)
            .remove(&PoolKey::new(block.stream, block.size, block.ptr));
        // SAFETY: the block is a whole segment from `reserve(block.size)` and nobody holds it.
        unsafe { self.backend.release(block.ptr, block.size) };
        st.reserved -= block.size;
        st.stats.segment.decrease(block.pool, 1);
        st.stats
            .reserved_bytes
            .decrease(block.pool, block.size as u64);
        if st.oversize_segments.remove(&block.ptr) {
            st.stats.oversize_segments.decrease(1);
        }
        st.stats.num_device_free += 1;
        st.history.record(
            TraceAction::SegmentFree,
            block.ptr,
            block.size,
            block.stream,
            &st.stats,
        );
    }

    /// Waits for pending frees, then releases every cached whole segment of both pools.
    fn release_cached_blocks(&self, st: &mut State) {
        st.stats.num_sync_all_streams += 1;
        for (id, pending) in std::mem::take(&mut st.pending_frees) {
            pending.iter().for_each(|p| p.wait());
            st.block_mut(id).pending = 0;
            st.free_block(id);
        }
        let whole: Vec<BlockId> = st
            .small
            .values()
            .chain(st.large.values())
            .copied()
            .filter(|&id| !st.block(id).is_split() && st.block(id).expandable.is_none())
            .collect();
        for id in whole {
            self.release_block(st, id);
        }
        let expandable: Vec<BlockId> = st
            .small
            .values()
            .chain(st.large.values())
            .copied()
            .filter(|&id| st.block(id).expandable.is_some())
            .collect();
        for id in expandable {
            self.unmap_block(st, id);
            let b = st.block(id);
            if !b.mapped && !b.is_split() {
                self.release_expandable_segment(st, id);
            }
        }
    }

    /// With `max_split_size` set: frees oversize cached blocks on `stream` until a request of
    /// `size` could fit (torch's `release_available_cached_blocks`).
    fn release_available_cached_blocks(
        &self,
        st: &mut State,
        pool: Pool,
        stream: StreamId,
        size: usize,
    ) -> bool {
        let max_split = st.config.max_split_size;
        if max_split == usize::MAX {
            return false;
        }
        let target = size.max(max_split);
        let candidates: Vec<(usize, BlockId)> = st
            .pool(pool)
            .iter()
            .filter(|(k, _)| k.stream == stream && k.size() >= max_split)
            .filter(|(_, id)| !st.block(**id).is_split() && st.block(**id).expandable.is_none())
            .map(|(k, id)| (k.size(), *id))
            .collect();
        if let Some(&(_, single)) = candidates.iter().find(|(size, _)| *size >= target) {
            self.release_block(st, single);
            return true;
        }
        let mut released = 0;
        for &(size, id) in candidates.iter().rev() {
            if released >= target {
                break;
            }
            self.release_block(st, id);
            released += size;
        }
        released >= target
    }

    /// Frees the oldest cached large blocks once reserved memory passes the threshold.
    fn garbage_collect(&self, st: &mut State) {
        let Some(limit) = st.limit else { return };
        let threshold = (st.config.garbage_collection_threshold * limit as f64) as usize;
        if st.reserved <= threshold {
            return;
        }
        let target = st.reserved - threshold;
        let mut reclaimed = 0;
        loop {
            let freeable: Vec<(BlockId, u64)> = st
                .large
                .values()
                .filter(|&&id| !st.block(id).is_split() && st.block(id).expandable.is_none())
                .map(|&id| (id, st.block(id).gc_count))
                .collect();
            if freeable.is_empty() || reclaimed >= target {
                return;
            }
            let age_threshold =
                freeable.iter().map(|(_, age)| *age as f64).sum::<f64>() / freeable.len() as f64;
            for (id, age) in freeable {
                if age as f64 >= age_threshold {
                    reclaimed += st.block(id).size;
                    self.release_block(st, id);
                }
            }
        }
    }
}

impl<B: RawMemory> Drop for CachingAllocator<B> {
    /// Returns cached segments to the backend. Segments that still hold live blocks are left
    /// alone: someone may still use that memory.
    fn drop(&mut self) {
        self.empty_cache();
    }
}

/// The error for `expandable_segments:True` on a device without CUDA virtual memory management.
/// torch 2.15 does not read the attribute: there the allocation fails with the driver's error
/// from its first virtual-memory call. gpumem fails at the same allocation, and says why.
fn expandable_unsupported(device: &str) -> Error {
    Error::BadSetting {
        setting: "expandable_segments".into(),
        reason: format!(
            "expandable_segments:True needs CUDA virtual memory management (cuMemCreate, cuMemMap), \
             which {device} does not support (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED \
             is 0); set expandable_segments:False in GPUMEM_ALLOC_CONF"
        ),
    }
}
