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

use crate::backend::{DevicePtr, RawMemory, ReserveError};
use crate::config::AllocatorConfig;
use crate::error::{Error, Result};
use crate::history::{
    BlockInfo, BlockState, History, HistoryOptions, SegmentInfo, Snapshot, TraceAction,
};
use crate::stats::{DeviceStats, MemoryStats, Pool};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Every block size is a multiple of this (torch's `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: usize = 512;
/// Requests up to this size use the small pool (`kSmallSize`).
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`).
pub const SMALL_BUFFER: usize = 2 << 20;
/// The page size of large expandable segments (`kLargeBuffer`), and the default segment size
/// of requests between 1 and 10 MiB (`large_segment_size_mb` changes that one).
pub const LARGE_BUFFER: usize = 20 << 20;
/// Requests from this size get a segment of their own, rounded to 2 MiB (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Rounding of large segments (`kRoundLarge`).
pub const ROUND_LARGE: usize = 2 << 20;
/// The most address space one expandable segment reserves (torch reserves 9/8 of the device's
/// memory; a cpu device without a capacity limit would otherwise ask for more than exists).
pub const MAX_EXPANDABLE_ADDRESS_SPACE: usize = 1 << 40;

/// Requests of this many bytes or more are refused at once, as torch's `allocate` does (2^60).
pub const ONE_EXA_BYTE: u64 = 1 << 60;

/// A stream as the allocator sees it: blocks are cached per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
pub struct StreamId(pub u64);

/// Work that may still use a freed block (an event recorded on a stream that used it).
pub trait PendingUse: Send {
    /// Whether the work has finished.
    fn is_done(&self) -> bool;
    /// Waits for the work to finish.
    fn wait(&self);
}

/// A live block handed out by [`CachingAllocator::malloc`]; give it back with `free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Start address.
    pub ptr: DevicePtr,
    /// The block's size: the request rounded up, or more when a cached block was not split.
    pub size: usize,
    /// The size that was asked for.
    pub requested: usize,
    id: BlockId,
}

type BlockId = usize;

#[derive(Debug)]
struct Block {
    ptr: DevicePtr,
    size: usize,
    requested: usize,
    stream: StreamId,
    pool: Pool,
    allocated: bool,
    /// Events this freed block still waits on before it can be reused.
    pending: usize,
    prev: Option<BlockId>,
    next: Option<BlockId>,
    /// How many searches this cached block has sat through (garbage collection ages blocks).
    gc_count: u64,
    /// Whether this live block was counted in `oversize_allocations` (the setting may change
    /// between its malloc and its free).
    counted_oversize: bool,
    /// Whether memory is behind this block's range (false only in expandable segments).
    mapped: bool,
    /// The expandable segment this block lies in, if any.
    expandable: Option<usize>,
}

impl Block {
    fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }
}

/// Position of a cached block in its pool: ordered by stream, then size, then address (best fit,
/// lowest address among equals, as torch's `BlockComparatorSize`). Size and address share one
/// `u128`, so comparing two keys is two integer comparisons: the pools are the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct PoolKey {
    stream: StreamId,
    size_then_ptr: u128,
}

impl PoolKey {
    fn new(stream: StreamId, size: usize, ptr: DevicePtr) -> Self {
        PoolKey {
            stream,
            size_then_ptr: (size as u128) << 64 | ptr as u128,
        }
    }

    fn size(&self) -> usize {
        (self.size_then_ptr >> 64) as usize
    }
}

/// The cached (free) blocks of one pool. Free blocks never overlap, so their addresses are unique.
type FreeBlocks = BTreeMap<PoolKey, BlockId>;

struct State {
    blocks: Vec<Option<Block>>,
    free_slots: Vec<BlockId>,
    small: FreeBlocks,
    large: FreeBlocks,
    /// Freed blocks waiting for streams to finish with them.
    pending_frees: Vec<(BlockId, Vec<Box<dyn PendingUse>>)>,
    stats: DeviceStats,
    /// Bytes reserved from the backend (torch's `total_allocated_memory`).
    reserved: usize,
    /// Cap from `set_memory_fraction`.
    limit: Option<usize>,
    /// The fraction behind `limit`.
    fraction: Option<f64>,
    /// Base addresses of the segments counted in `oversize_segments`.
    oversize_segments: std::collections::BTreeSet<DevicePtr>,
    /// Blocks of expandable segments with no memory behind them, by pool, stream and address.
    unmapped: BTreeMap<(Pool, StreamId, DevicePtr), BlockId>,
    /// Expandable segments (`None`: released).
    expandable: Vec<Option<ExpandableSegment>>,
    config: AllocatorConfig,
    history: History,
}

/// One expandable segment: reserved address space, with memory mapped page by page.
struct ExpandableSegment {
    base: DevicePtr,
    /// Bytes of address space.
    size: usize,
    /// 2 MiB in the small pool, 20 MiB in the large one.
    page_size: usize,
    /// The backend's handle of each mapped page; `None`: unmapped.
    pages: Vec<Option<u64>>,
}

/// The caching allocator of one device.
pub struct CachingAllocator<B: RawMemory> {
    backend: B,
    device: String,
    state: Mutex<State>,
}

/// Which pool a request of `size` bytes belongs to.
pub fn pool_for(size: usize) -> Pool {
    if size <= SMALL_SIZE {
        Pool::Small
    } else {
        Pool::Large
    }
}

/// Rounds a request to the block size torch would give it (`round_size`).
pub fn round_size(size: usize, config: &AllocatorConfig) -> usize {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let divisions = config.divisions_for(size);
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
        roundup_power2_next_division(size, divisions)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

fn roundup_power2_next_division(size: usize, divisions: usize) -> usize {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1usize << (usize::BITS - 1 - size.leading_zeros());
    let step = floor >> divisions.trailing_zeros();
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

/// The segment size reserved for a request of (rounded) `size` bytes (`get_allocation_size`):
/// 2 MiB up to 1 MiB, `large_segment_size_mb` (20 MiB) below 10 MiB, else the size in 2 MiB steps.
pub fn segment_size_for(size: usize, config: &AllocatorConfig) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        config.large_segment_size
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
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
        if size as u64 >= ONE_EXA_BYTE {
            return Err(Error::AllocationTooLarge {
                device: self.device.clone(),
                requested: size as u64,
            });
        }
        let mut guard = self.lock();
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
            // As torch, the OOM entry carries the device's free bytes (`device_free`).
            st.history.record(
                TraceAction::Oom,
                free as u64,
                segment_size,
                stream,
                &st.stats,
            );
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

    /// Unmaps pages `begin..end` of expandable segment `segment`.
    fn unmap_pages(&self, st: &mut State, segment: usize, begin: usize, end: usize) {
        let seg = st.segment_mut(segment);
        let (base, page_size) = (seg.base, seg.page_size);
        for page in begin..end {
            if let Some(handle) = seg.pages[page].take() {
                // SAFETY: the page was mapped by `map` with this handle and holds no live block.
                unsafe {
                    self.backend
                        .unmap(base + (page * page_size) as u64, page_size, handle)
                };
            }
        }
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

impl State {
    #[inline]
    fn block(&self, id: BlockId) -> &Block {
        self.blocks[id].as_ref().expect("gpumem: dangling block id")
    }

    #[inline]
    fn block_mut(&mut self, id: BlockId) -> &mut Block {
        self.blocks[id].as_mut().expect("gpumem: dangling block id")
    }

    fn insert_block(&mut self, block: Block) -> BlockId {
        match self.free_slots.pop() {
            Some(id) => {
                self.blocks[id] = Some(block);
                id
            }
            None => {
                self.blocks.push(Some(block));
                self.blocks.len() - 1
            }
        }
    }

    fn remove_block(&mut self, id: BlockId) -> Block {
        self.free_slots.push(id);
        self.blocks[id].take().expect("gpumem: dangling block id")
    }

    fn segment_mut(&mut self, segment: usize) -> &mut ExpandableSegment {
        self.expandable[segment]
            .as_mut()
            .expect("gpumem: a released expandable segment")
    }

    fn pool(&self, pool: Pool) -> &FreeBlocks {
        match pool {
            Pool::Small => &self.small,
            Pool::Large => &self.large,
        }
    }

    fn pool_mut(&mut self, pool: Pool) -> &mut FreeBlocks {
        match pool {
            Pool::Small => &mut self.small,
            Pool::Large => &mut self.large,
        }
    }

    fn key(&self, id: BlockId) -> PoolKey {
        let b = self.block(id);
        PoolKey::new(b.stream, b.size, b.ptr)
    }

    /// Best fit on the same stream, with torch's oversize rules.
    fn get_free_block(&mut self, pool: Pool, stream: StreamId, size: usize) -> Option<BlockId> {
        let max_split = self.config.max_split_size;
        // torch ages cached blocks only when garbage collection can run (a fraction is set).
        let aging = self.config.garbage_collection_threshold > 0.0 && self.limit.is_some();
        if aging {
            let ids: Vec<BlockId> = self.pool(pool).values().copied().collect();
            for id in ids {
                self.block_mut(id).gc_count += 1;
            }
        }
        let (mut key, mut id) = self
            .pool(pool)
            .range(PoolKey::new(stream, size, 0)..)
            .next()
            .map(|(k, v)| (*k, *v))?;
        if key.stream != stream {
            return None;
        }
        if self.block(id).expandable.is_some() {
            (key, id) = self.choose_expandable(pool, stream, size, key)?;
        }
        // Never hand out an oversize block for a small request, and an oversize request may waste
        // less than `max_non_split_rounding_size` (20 MiB unless set).
        let found_size = key.size();
        if size < max_split && found_size >= max_split {
            return None;
        }
        if size >= max_split && found_size >= size + self.config.max_non_split_rounding_size {
            return None;
        }
        self.pool_mut(pool).remove(&key);
        if aging {
            self.block_mut(id).gc_count = 0;
        }
        Some(id)
    }

    /// torch's rules when the best fit lies in an expandable segment. With expandable segments
    /// on, a block counts as big as it could grow (its size plus the unmapped space after it),
    /// so a fitting block that cannot grow is preferred to one at a segment's end. With them
    /// turned off since, expandable blocks are passed over.
    fn choose_expandable(
        &self,
        pool: Pool,
        stream: StreamId,
        size: usize,
        first: PoolKey,
    ) -> Option<(PoolKey, BlockId)> {
        let mut candidates = self
            .pool(pool)
            .range(first..)
            .take_while(|(k, _)| k.stream == stream)
            .map(|(k, v)| (*k, *v));
        if !self.config.expandable_segments {
            return candidates.find(|(_, id)| self.block(*id).expandable.is_none());
        }
        let expandable_size = |id: BlockId| {
            let b = self.block(id);
            b.size
                + b.next
                    .map(|n| self.block(n))
                    .filter(|n| !n.mapped)
                    .map_or(0, |n| n.size)
        };
        let mut best = candidates.next()?;
        for next in candidates {
            if self.block(best.1).expandable.is_none()
                || expandable_size(next.1) >= expandable_size(best.1)
            {
                break;
            }
            best = next;
        }
        debug_assert!(best.0.size() >= size);
        Some(best)
    }

    fn should_split_sizes(&self, pool: Pool, block_size: usize, size: usize) -> bool {
        let remaining = block_size - size;
        if pool == Pool::Small || self.config.expandable_segments {
            return remaining >= MIN_BLOCK_SIZE;
        }
        size < self.config.max_split_size && remaining > SMALL_SIZE
    }

    /// Marks a free block (taken out of its pool) live, splitting off the rest when torch would.
    fn alloc_found_block(&mut self, mut id: BlockId, requested: usize, size: usize) -> Allocation {
        // One read of the found block for everything the split decision needs.
        let (pool, already_split, ptr, stream, prev, found_size, expandable) = {
            let b = self.block(id);
            (
                b.pool,
                b.is_split(),
                b.ptr,
                b.stream,
                b.prev,
                b.size,
                b.expandable,
            )
        };
        if self.should_split_sizes(pool, found_size, size) {
            let remaining = id;
            id = self.insert_block(Block {
                ptr,
                size,
                requested: 0,
                stream,
                pool,
                allocated: false,
                pending: 0,
                prev,
                next: Some(remaining),
                gc_count: 0,
                counted_oversize: false,
                mapped: true,
                expandable,
            });
            if let Some(p) = prev {
                self.block_mut(p).next = Some(id);
            }
            // The pool key is built from local values: reading it back from the block right after
            // writing its fields stalls store forwarding on the hot path.
            let (rest_ptr, rest_size) = {
                let r = self.block_mut(remaining);
                r.prev = Some(id);
                r.ptr += size as u64;
                r.size -= size;
                (r.ptr, r.size)
            };
            self.pool_mut(pool)
                .insert(PoolKey::new(stream, rest_size, rest_ptr), remaining);
            let remaining_size = rest_size as u64;
            if expandable.is_some() {
                // torch keeps expandable segments out of the inactive_split statistics.
            } else if already_split {
                // An inactive split block shrinks by `size`.
                self.stats.inactive_split_bytes.decrease(pool, size as u64);
            } else {
                // A new inactive split block appears.
                self.stats
                    .inactive_split_bytes
                    .increase(pool, remaining_size);
                self.stats.inactive_split.increase(pool, 1);
            }
        } else if already_split && expandable.is_none() {
            let block_size = self.block(id).size as u64;
            self.stats.inactive_split_bytes.decrease(pool, block_size);
            self.stats.inactive_split.decrease(pool, 1);
        }
        let max_split_size = self.config.max_split_size;
        let (ptr, block_size, stream) = {
            let b = self.block_mut(id);
            b.allocated = true;
            b.requested = requested;
            b.counted_oversize = b.size >= max_split_size;
            (b.ptr, b.size, b.stream)
        };
        let s = &mut self.stats;
        s.allocation.increase(pool, 1);
        s.allocated_bytes.increase(pool, block_size as u64);
        s.active.increase(pool, 1);
        s.active_bytes.increase(pool, block_size as u64);
        s.requested_bytes.increase(pool, requested as u64);
        if block_size >= max_split_size {
            s.oversize_allocations.increase(1);
        }
        self.history
            .record(TraceAction::Alloc, ptr, requested, stream, &self.stats);
        Allocation {
            ptr,
            size: block_size,
            requested,
            id,
        }
    }

    /// Puts a no-longer-active block back in its pool, merged with free neighbours.
    fn free_block(&mut self, id: BlockId) {
        let (original_size, pool) = {
            let b = self.block(id);
            (b.size as u64, b.pool)
        };
        let (ptr, requested, stream) = {
            let b = self.block(id);
            (b.ptr, b.requested, b.stream)
        };
        self.history.record(
            TraceAction::FreeCompleted,
            ptr,
            requested,
            stream,
            &self.stats,
        );
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        for neighbour in [self.block(id).prev, self.block(id).next] {
            let subsumed = self.try_merge(id, neighbour);
            if subsumed > 0 {
                net_blocks -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        let (key, size, is_split) = {
            let b = self.block(id);
            (PoolKey::new(b.stream, b.size, b.ptr), b.size, b.is_split())
        };
        self.pool_mut(pool).insert(key, id);
        if is_split {
            net_blocks += 1;
            net_bytes += size as i64;
        }
        if self.block(id).expandable.is_none() {
            apply_net(&mut self.stats.inactive_split, pool, net_blocks);
            apply_net(&mut self.stats.inactive_split_bytes, pool, net_bytes);
        }
        self.stats.active.decrease(pool, 1);
        self.stats.active_bytes.decrease(pool, original_size);
        self.stats.requested_bytes.decrease(pool, requested as u64);
    }

    /// Merges free neighbour `src` into `dst`; returns the bytes taken over (0: no merge).
    fn try_merge(&mut self, dst: BlockId, src: Option<BlockId>) -> usize {
        let Some(src) = src else { return 0 };
        {
            let s = self.block(src);
            if s.allocated || s.pending > 0 || s.mapped != self.block(dst).mapped {
                return 0;
            }
        }
        let (pool, mapped, stream, ptr) = {
            let s = self.block(src);
            (s.pool, s.mapped, s.stream, s.ptr)
        };
        if mapped {
            let src_key = self.key(src);
            self.pool_mut(pool).remove(&src_key);
        } else {
            self.unmapped.remove(&(pool, stream, ptr));
        }
        let s = self.remove_block(src);
        if self.block(dst).prev == Some(src) {
            let d = self.block_mut(dst);
            d.ptr = s.ptr;
            d.prev = s.prev;
            if let Some(p) = s.prev {
                self.block_mut(p).next = Some(dst);
            }
        } else {
            self.block_mut(dst).next = s.next;
            if let Some(n) = s.next {
                self.block_mut(n).prev = Some(dst);
            }
        }
        self.block_mut(dst).size += s.size;
        s.size
    }

    /// Frees blocks whose pending stream uses have all finished.
    fn process_pending_frees(&mut self) {
        if self.pending_frees.is_empty() {
            return;
        }
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_frees)
            .into_iter()
            .partition(|(_, pending)| pending.iter().all(|p| p.is_done()));
        self.pending_frees = waiting;
        for (id, _) in done {
            self.block_mut(id).pending = 0;
            self.free_block(id);
        }
    }
}

fn apply_net(array: &mut crate::stats::StatArray, pool: Pool, net: i64) {
    if net > 0 {
        array.increase(pool, net as u64);
    } else if net < 0 {
        array.decrease(pool, net.unsigned_abs());
    }
}
