//! The allocator's bookkeeping: blocks and the segments they split, the two pools of cached blocks
//! ordered best-fit, expandable segments' pages, and the state behind the allocator's lock, with
//! splitting, merging and freeing.

use crate::policy::config::AllocatorConfig;
use crate::policy::history::{History, TraceAction};
use crate::policy::sizes::{MIN_BLOCK_SIZE, SMALL_SIZE};
use crate::policy::stats::{DeviceStats, Pool};
use crate::policy::streams::{PendingUse, StreamId};
use crate::raw::backend::{DevicePtr, RawStream};
use std::collections::{BTreeMap, HashMap};

/// A live block handed out by [`CachingAllocator::malloc`](crate::allocator::CachingAllocator::malloc); give it back with `free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Start address.
    pub ptr: DevicePtr,
    /// The block's size: the request rounded up, or more when a cached block was not split.
    pub size: usize,
    /// The size that was asked for.
    pub requested: usize,
    pub(super) id: BlockId,
}

pub(super) type BlockId = usize;

#[derive(Debug)]
pub(super) struct Block {
    pub(super) ptr: DevicePtr,
    pub(super) size: usize,
    pub(super) requested: usize,
    pub(super) stream: StreamId,
    pub(super) pool: Pool,
    pub(super) allocated: bool,
    /// Events this freed block still waits on before it can be reused.
    pub(super) pending: usize,
    pub(super) prev: Option<BlockId>,
    pub(super) next: Option<BlockId>,
    /// How many searches this cached block has sat through (garbage collection ages blocks).
    pub(super) gc_count: u64,
    /// Whether this live block was counted in `oversize_allocations` (the setting may change
    /// between its malloc and its free).
    pub(super) counted_oversize: bool,
    /// Whether memory is behind this block's range (false only in expandable segments).
    pub(super) mapped: bool,
    /// The expandable segment this block lies in, if any.
    pub(super) expandable: Option<usize>,
}

impl Block {
    pub(super) fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }
}

/// Position of a cached block in its pool: ordered by stream, then size, then address (best fit,
/// lowest address among equals, as torch's `BlockComparatorSize`). Size and address share one
/// `u128`, so comparing two keys is two integer comparisons: the pools are the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct PoolKey {
    pub(super) stream: StreamId,
    pub(super) size_then_ptr: u128,
}

impl PoolKey {
    pub(super) fn new(stream: StreamId, size: usize, ptr: DevicePtr) -> Self {
        PoolKey {
            stream,
            size_then_ptr: (size as u128) << 64 | ptr as u128,
        }
    }

    pub(super) fn size(&self) -> usize {
        (self.size_then_ptr >> 64) as usize
    }
}

/// The cached (free) blocks of one pool. Free blocks never overlap, so their addresses are unique.
pub(super) type FreeBlocks = BTreeMap<PoolKey, BlockId>;

pub(super) struct State {
    pub(super) blocks: Vec<Option<Block>>,
    pub(super) free_slots: Vec<BlockId>,
    pub(super) small: FreeBlocks,
    pub(super) large: FreeBlocks,
    /// Freed blocks waiting for streams to finish with them.
    pub(super) pending_frees: Vec<(BlockId, Vec<Box<dyn PendingUse>>)>,
    pub(super) stats: DeviceStats,
    /// Bytes reserved from the backend (torch's `total_allocated_memory`).
    pub(super) reserved: usize,
    /// Cap from `set_memory_fraction`.
    pub(super) limit: Option<usize>,
    /// The fraction behind `limit`.
    pub(super) fraction: Option<f64>,
    /// Base addresses of the segments counted in `oversize_segments`.
    pub(super) oversize_segments: std::collections::BTreeSet<DevicePtr>,
    /// Blocks of expandable segments with no memory behind them, by pool, stream and address.
    pub(super) unmapped: BTreeMap<(Pool, StreamId, DevicePtr), BlockId>,
    /// Expandable segments (`None`: released).
    pub(super) expandable: Vec<Option<ExpandableSegment>>,
    /// The backend's handle of each live stream but the default one (always `RawStream(0)`), for
    /// the wait before an expandable segment's pages are unmapped.
    pub(super) raw_streams: HashMap<StreamId, RawStream>,
    pub(super) config: AllocatorConfig,
    pub(super) history: History,
}

/// One expandable segment: reserved address space, with memory mapped page by page.
pub(super) struct ExpandableSegment {
    /// The stream whose blocks it holds (one segment per stream and pool).
    pub(super) stream: StreamId,
    pub(super) base: DevicePtr,
    /// Bytes of address space.
    pub(super) size: usize,
    /// 2 MiB in the small pool, 20 MiB in the large one.
    pub(super) page_size: usize,
    /// The backend's handle of each mapped page; `None`: unmapped.
    pub(super) pages: Vec<Option<u64>>,
}

impl State {
    #[inline]
    pub(super) fn block(&self, id: BlockId) -> &Block {
        self.blocks[id].as_ref().expect("gpumem: dangling block id")
    }

    #[inline]
    pub(super) fn block_mut(&mut self, id: BlockId) -> &mut Block {
        self.blocks[id].as_mut().expect("gpumem: dangling block id")
    }

    pub(super) fn insert_block(&mut self, block: Block) -> BlockId {
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

    pub(super) fn remove_block(&mut self, id: BlockId) -> Block {
        self.free_slots.push(id);
        self.blocks[id].take().expect("gpumem: dangling block id")
    }

    pub(super) fn segment_mut(&mut self, segment: usize) -> &mut ExpandableSegment {
        self.expandable[segment]
            .as_mut()
            .expect("gpumem: a released expandable segment")
    }

    pub(super) fn pool(&self, pool: Pool) -> &FreeBlocks {
        match pool {
            Pool::Small => &self.small,
            Pool::Large => &self.large,
        }
    }

    pub(super) fn pool_mut(&mut self, pool: Pool) -> &mut FreeBlocks {
        match pool {
            Pool::Small => &mut self.small,
            Pool::Large => &mut self.large,
        }
    }

    pub(super) fn key(&self, id: BlockId) -> PoolKey {
        let b = self.block(id);
        PoolKey::new(b.stream, b.size, b.ptr)
    }

    /// Best fit on the same stream, with torch's oversize rules.
    pub(super) fn get_free_block(
        &mut self,
        pool: Pool,
        stream: StreamId,
        size: usize,
    ) -> Option<BlockId> {
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
    pub(super) fn choose_expandable(
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

    pub(super) fn should_split_sizes(&self, pool: Pool, block_size: usize, size: usize) -> bool {
        let remaining = block_size - size;
        if pool == Pool::Small || self.config.expandable_segments {
            return remaining >= MIN_BLOCK_SIZE;
        }
        size < self.config.max_split_size && remaining > SMALL_SIZE
    }

    /// Marks a free block (taken out of its pool) live, splitting off the rest when torch would.
    pub(super) fn alloc_found_block(
        &mut self,
        mut id: BlockId,
        requested: usize,
        size: usize,
    ) -> Allocation {
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
    pub(super) fn free_block(&mut self, id: BlockId) {
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
    pub(super) fn try_merge(&mut self, dst: BlockId, src: Option<BlockId>) -> usize {
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
    pub(super) fn process_pending_frees(&mut self) {
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

pub(super) fn apply_net(array: &mut crate::policy::stats::StatArray, pool: Pool, net: i64) {
    if net > 0 {
        array.increase(pool, net as u64);
    } else if net < 0 {
        array.decrease(pool, net.unsigned_abs());
    }
}
