//! The caching allocator's rules, pinned with exact numbers on a private allocator over host memory.

use gpumem::allocator::{CachingAllocator, StreamId};
use gpumem::backend_cpu::CpuBackend;
use gpumem::{AllocatorConfig, Error, TraceAction};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
const S0: StreamId = StreamId(0);

fn allocator(capacity: usize) -> CachingAllocator<CpuBackend> {
    CachingAllocator::new(CpuBackend::new(capacity), "cpu", AllocatorConfig::default())
}

fn with_config(capacity: usize, conf: &str) -> CachingAllocator<CpuBackend> {
    CachingAllocator::new(
        CpuBackend::new(capacity),
        "cpu",
        AllocatorConfig::parse(conf).unwrap(),
    )
}

fn stat(a: &CachingAllocator<CpuBackend>, key: &str) -> u64 {
    a.memory_stats()
        .get(key)
        .unwrap_or_else(|| panic!("no stat {key}"))
}

#[test]
fn one_byte_takes_a_512_byte_block_in_a_2_mib_segment() {
    let a = allocator(GIB);
    let b = a.malloc(1, S0).unwrap();
    assert_eq!(b.size, 512);
    assert_eq!(a.allocated_bytes(), 512);
    assert_eq!(a.reserved_bytes(), 2 * MIB as u64);
    assert_eq!(stat(&a, "requested_bytes.all.current"), 1);
    assert_eq!(stat(&a, "segment.small_pool.current"), 1);
    assert_eq!(stat(&a, "segment.large_pool.current"), 0);
    a.free(b, vec![]);
    assert_eq!(a.allocated_bytes(), 0);
    assert_eq!(
        a.reserved_bytes(),
        2 * MIB as u64,
        "drop keeps the segment cached"
    );
    a.empty_cache();
    assert_eq!(a.reserved_bytes(), 0);
    assert_eq!(stat(&a, "num_device_alloc"), 1);
    assert_eq!(stat(&a, "num_device_free"), 1);
}

#[test]
fn sizes_round_up_to_multiples_of_512() {
    let a = allocator(GIB);
    for (request, block) in [
        (0usize, 0usize),
        (511, 512),
        (512, 512),
        (513, 1024),
        (1000, 1024),
        (MIB, MIB),
    ] {
        let b = a.malloc(request, S0).unwrap();
        assert_eq!(b.size, block, "request {request}");
        a.free(b, vec![]);
    }
}

#[test]
fn small_requests_share_one_segment_until_it_is_full() {
    let a = allocator(GIB);
    let blocks: Vec<_> = (0..4).map(|_| a.malloc(512 * KIB, S0).unwrap()).collect();
    assert_eq!(
        a.reserved_bytes(),
        2 * MIB as u64,
        "four 512 KiB blocks fill one 2 MiB segment"
    );
    let fifth = a.malloc(512, S0).unwrap();
    assert_eq!(
        a.reserved_bytes(),
        4 * MIB as u64,
        "a full segment means a new one"
    );
    for b in blocks {
        a.free(b, vec![]);
    }
    a.free(fifth, vec![]);
}

#[test]
fn medium_requests_get_20_mib_segments_and_large_ones_their_own() {
    let a = allocator(GIB);
    let large = a.malloc(10 * MIB + 1, S0).unwrap();
    assert_eq!(large.size, 10 * MIB + 512, "rounded to 512 B");
    assert_eq!(
        a.reserved_bytes(),
        12 * MIB as u64,
        "its own segment, rounded up to 2 MiB"
    );
    let medium = a.malloc(MIB + 1, S0).unwrap();
    assert_eq!(
        medium.size,
        2 * MIB - 512,
        "the rest of the 12 MiB segment, whole: splitting would leave less than 1 MiB"
    );
    assert_eq!(a.reserved_bytes(), 12 * MIB as u64);
    let second = a.malloc(MIB + 1, S0).unwrap();
    assert_eq!(
        a.reserved_bytes(),
        32 * MIB as u64,
        "the rest is too small now: a 20 MiB segment"
    );
    assert_eq!(stat(&a, "segment.large_pool.current"), 2);
    // The 20 MiB segment was split; its rest stays cached as an inactive split block.
    let rests = 20 * MIB - (MIB + 512);
    assert_eq!(
        stat(&a, "inactive_split_bytes.large_pool.current"),
        rests as u64
    );
    for b in [large, medium, second] {
        a.free(b, vec![]);
    }
}

#[test]
fn large_blocks_split_only_when_more_than_1_mib_would_remain() {
    let a = allocator(GIB);
    // 19 MiB from a 20 MiB segment leaves exactly 1 MiB: no split, the whole segment is handed out.
    let whole = a.malloc(19 * MIB, S0).unwrap();
    assert_eq!(whole.size, 20 * MIB);
    assert_eq!(a.allocated_bytes(), 20 * MIB as u64);
    assert_eq!(stat(&a, "requested_bytes.all.current"), 19 * MIB as u64);
    a.free(whole, vec![]);
    // 2 MiB leaves 18 MiB: split.
    let part = a.malloc(2 * MIB, S0).unwrap();
    assert_eq!(part.size, 2 * MIB);
    assert_eq!(
        stat(&a, "inactive_split_bytes.large_pool.current"),
        18 * MIB as u64
    );
    assert_eq!(stat(&a, "inactive_split.large_pool.current"), 1);
    a.free(part, vec![]);
    assert_eq!(
        stat(&a, "inactive_split_bytes.all.current"),
        0,
        "merged back into one block"
    );
}

#[test]
fn small_blocks_split_when_512_bytes_or_more_remain() {
    let a = allocator(GIB);
    let x = a.malloc(MIB, S0).unwrap();
    let y = a.malloc(MIB - 512, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 2 * MIB as u64);
    assert_eq!(
        stat(&a, "inactive_split_bytes.small_pool.current"),
        512,
        "512 B left over is split off"
    );
    let z = a.malloc(512, S0).unwrap();
    assert_eq!(
        a.reserved_bytes(),
        2 * MIB as u64,
        "the last 512 B are reused"
    );
    assert_eq!(stat(&a, "inactive_split_bytes.small_pool.current"), 0);
    for b in [x, y, z] {
        a.free(b, vec![]);
    }
}

#[test]
fn freed_blocks_merge_with_free_neighbours() {
    let a = allocator(GIB);
    let x = a.malloc(512 * KIB, S0).unwrap();
    let y = a.malloc(512 * KIB, S0).unwrap();
    let z = a.malloc(512 * KIB, S0).unwrap();
    a.free(y, vec![]);
    assert_eq!(
        stat(&a, "inactive_split.small_pool.current"),
        2,
        "the hole and the tail"
    );
    a.free(x, vec![]);
    assert_eq!(
        stat(&a, "inactive_split.small_pool.current"),
        2,
        "x merged into the hole"
    );
    assert_eq!(
        stat(&a, "inactive_split_bytes.small_pool.current"),
        1536 * KIB as u64
    );
    a.free(z, vec![]);
    assert_eq!(
        stat(&a, "inactive_split.small_pool.current"),
        0,
        "one whole free segment"
    );
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert_eq!(snap.segments[0].blocks.len(), 1);
}

#[test]
fn best_fit_picks_the_smallest_cached_block_that_fits() {
    let a = allocator(GIB);
    let big = a.malloc(12 * MIB, S0).unwrap();
    let small = a.malloc(10 * MIB, S0).unwrap();
    let (big_ptr, small_ptr) = (big.ptr, small.ptr);
    a.free(big, vec![]);
    a.free(small, vec![]);
    let again = a.malloc(10 * MIB, S0).unwrap();
    assert_eq!(again.ptr, small_ptr);
    let next = a.malloc(11 * MIB, S0).unwrap();
    assert_eq!(next.ptr, big_ptr);
    assert_eq!(a.reserved_bytes(), 22 * MIB as u64, "no new segment");
    a.free(again, vec![]);
    a.free(next, vec![]);
}

#[test]
fn among_equal_sizes_best_fit_picks_the_lowest_address() {
    let a = allocator(GIB);
    let blocks: Vec<_> = (0..3).map(|_| a.malloc(12 * MIB, S0).unwrap()).collect();
    let lowest = blocks.iter().map(|b| b.ptr).min().unwrap();
    // Free them highest address first, so the cache's insertion order is not the answer.
    let mut by_address = blocks;
    by_address.sort_by_key(|b| std::cmp::Reverse(b.ptr));
    for b in by_address {
        a.free(b, vec![]);
    }
    let again = a.malloc(12 * MIB, S0).unwrap();
    assert_eq!(again.ptr, lowest);
    a.free(again, vec![]);
}
#[test]
fn empty_cache_releases_only_segments_without_live_blocks() {
    let a = allocator(GIB);
    let keep = a.malloc(512, S0).unwrap();
    let gone = a.malloc(4 * MIB, S0).unwrap();
    a.free(gone, vec![]);
    assert_eq!(a.reserved_bytes(), 22 * MIB as u64);
    a.empty_cache();
    assert_eq!(
        a.reserved_bytes(),
        2 * MIB as u64,
        "the live 512 B block pins its segment"
    );
    assert_eq!(a.allocated_bytes(), 512);
    a.free(keep, vec![]);
    a.empty_cache();
    assert_eq!(a.reserved_bytes(), 0);
}

#[test]
fn blocks_are_cached_per_stream() {
    let a = allocator(GIB);
    let b = a.malloc(512, S0).unwrap();
    a.free(b, vec![]);
    let other = a.malloc(512, StreamId(7)).unwrap();
    assert_eq!(
        a.reserved_bytes(),
        4 * MIB as u64,
        "a block cached for stream 0 is not given to stream 7"
    );
    a.free(other, vec![]);
}

#[test]
fn out_of_memory_releases_the_cache_and_retries_once() {
    let a = allocator(64 * MIB);
    let cached = a.malloc(40 * MIB, S0).unwrap();
    a.free(cached, vec![]);
    assert_eq!(a.reserved_bytes(), 40 * MIB as u64);
    // 50 MiB fits neither the cached 40 MiB block nor beside it: the cache is released, then retried.
    let b = a.malloc(50 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 50 * MIB as u64);
    assert_eq!(stat(&a, "num_alloc_retries"), 1);
    assert_eq!(stat(&a, "num_ooms"), 0);
    assert_eq!(stat(&a, "num_sync_all_streams"), 1);
    a.free(b, vec![]);
}

#[test]
fn out_of_memory_error_says_what_was_asked_and_what_is_held_and_leaves_the_allocator_usable() {
    let a = allocator(64 * MIB);
    let live = a.malloc(40 * MIB, S0).unwrap();
    let err = a.malloc(30 * MIB, S0).unwrap_err();
    match &err {
        Error::OutOfMemory {
            alloc_size,
            requested,
            total,
            free,
            allocated,
            reserved_unallocated,
            allowed,
            ..
        } => {
            assert_eq!(*alloc_size, 30 * MIB as u64);
            assert_eq!(*requested, 30 * MIB as u64);
            assert_eq!(*total, 64 * MIB as u64);
            assert_eq!(*free, 24 * MIB as u64);
            assert_eq!(*allocated, 40 * MIB as u64);
            assert_eq!(*reserved_unallocated, 0);
            assert_eq!(*allowed, None);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("Tried to allocate 30.00 MiB"), "{text}");
    assert!(
        text.contains("total capacity of 64.00 MiB of which 24.00 MiB is free"),
        "{text}"
    );
    assert_eq!(stat(&a, "num_ooms"), 1);
    assert_eq!(stat(&a, "num_alloc_retries"), 1);
    a.free(live, vec![]);
    let after = a.malloc(30 * MIB, S0).unwrap();
    assert_eq!(after.size, 30 * MIB);
    a.free(after, vec![]);
}

#[test]
fn memory_fraction_caps_reservations() {
    let a = allocator(100 * MIB);
    a.set_memory_fraction(0.5).unwrap();
    let b = a.malloc(40 * MIB, S0).unwrap();
    let err = a.malloc(12 * MIB, S0).unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory { allowed: Some(l), .. } if l == 50 * MIB as u64),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("is free. 50.00 MiB allowed; Of the allocated memory"),
        "{err}"
    );
    a.clear_memory_fraction();
    let c = a.malloc(12 * MIB, S0).unwrap();
    a.free(b, vec![]);
    a.free(c, vec![]);
    assert!(a.set_memory_fraction(1.5).is_err());
}

#[test]
fn max_split_size_makes_big_blocks_oversize_and_unsplittable() {
    let a = with_config(GIB, "max_split_size_mb:64");
    let big = a.malloc(100 * MIB, S0).unwrap();
    assert_eq!(stat(&a, "oversize_allocations.current"), 1);
    assert_eq!(stat(&a, "oversize_segments.current"), 1);
    a.free(big, vec![]);
    // A small request never takes an oversize block ...
    let small = a.malloc(30 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 130 * MIB as u64);
    a.free(small, vec![]);
    // ... and an oversize request takes one only if it wastes less than 20 MiB.
    let close = a.malloc(90 * MIB, S0).unwrap();
    assert_eq!(close.size, 100 * MIB, "the cached 100 MiB block, not split");
    a.free(close, vec![]);
    let far = a.malloc(70 * MIB, S0).unwrap();
    assert_eq!(
        far.size,
        70 * MIB,
        "30 MiB of waste is too much: a new segment"
    );
    a.free(far, vec![]);
    assert_eq!(stat(&a, "oversize_allocations.current"), 0);
}

#[test]
fn oversize_cached_blocks_are_released_before_the_whole_cache() {
    let a = with_config(150 * MIB, "max_split_size_mb:64");
    let big = a.malloc(100 * MIB, S0).unwrap();
    let keep = a.malloc(20 * MIB, S0).unwrap();
    a.free(big, vec![]);
    // 120 MiB reserved. 70 MiB would waste 30 MiB of the cached 100 MiB block, and does not fit
    // beside it: the oversize block is released (not the whole cache), without a retry.
    let fits = a.malloc(70 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 90 * MIB as u64);
    assert_eq!(stat(&a, "num_alloc_retries"), 0);
    assert_eq!(stat(&a, "num_sync_all_streams"), 0);
    assert_eq!(stat(&a, "num_device_free"), 1);
    a.free(fits, vec![]);
    a.free(keep, vec![]);
}

#[test]
fn roundup_power2_divisions_rounds_to_a_fraction_of_the_power_of_two() {
    let a = with_config(GIB, "roundup_power2_divisions:4");
    // 1200 KiB lies between 1 MiB and 2 MiB; with 4 divisions the steps are 256 KiB: 1280 KiB.
    let b = a.malloc(1200 * KIB, S0).unwrap();
    assert_eq!(b.size, 1280 * KIB);
    a.free(b, vec![]);
    let exact = a.malloc(4 * MIB, S0).unwrap();
    assert_eq!(exact.size, 4 * MIB, "powers of two stay as they are");
    a.free(exact, vec![]);
}

#[test]
fn peaks_hold_until_reset_and_totals_until_accumulated_reset() {
    let a = allocator(GIB);
    let b = a.malloc(3 * MIB, S0).unwrap();
    a.free(b, vec![]);
    assert_eq!(stat(&a, "allocated_bytes.all.peak"), 3 * MIB as u64);
    assert_eq!(stat(&a, "allocated_bytes.all.allocated"), 3 * MIB as u64);
    assert_eq!(stat(&a, "allocated_bytes.all.freed"), 3 * MIB as u64);
    a.reset_peak_stats();
    assert_eq!(stat(&a, "allocated_bytes.all.peak"), 0);
    assert_eq!(
        stat(&a, "reserved_bytes.all.peak"),
        20 * MIB as u64,
        "reserved is still 20 MiB"
    );
    a.reset_accumulated_stats();
    assert_eq!(stat(&a, "allocated_bytes.all.allocated"), 0);
    assert_eq!(stat(&a, "num_device_alloc"), 0);
}

#[test]
fn pending_stream_uses_keep_a_freed_block_active_until_done() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Flag(Arc<AtomicBool>);
    impl gpumem::allocator::PendingUse for Flag {
        fn is_done(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
        fn wait(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let a = allocator(GIB);
    let done = Arc::new(AtomicBool::new(false));
    let b = a.malloc(512, S0).unwrap();
    let ptr = b.ptr;
    a.free(b, vec![Box::new(Flag(done.clone()))]);
    assert_eq!(a.allocated_bytes(), 0, "no longer allocated");
    assert_eq!(
        stat(&a, "active_bytes.all.current"),
        512,
        "but still active"
    );
    let other = a.malloc(512, S0).unwrap();
    assert_ne!(
        other.ptr, ptr,
        "the block may still be in use by another stream"
    );
    done.store(true, Ordering::SeqCst);
    let reused = a.malloc(512, S0).unwrap();
    assert_eq!(
        reused.ptr, ptr,
        "once the stream is done the block is reused"
    );
    assert_eq!(stat(&a, "active_bytes.all.current"), 1024);
    a.free(other, vec![]);
    a.free(reused, vec![]);
}

#[test]
fn history_records_allocations_segments_and_ooms() {
    let a = allocator(4 * MIB);
    a.record_history(true);
    let b = a.malloc(512, S0).unwrap();
    a.free(b, vec![]);
    let _ = a.malloc(8 * MIB, S0).unwrap_err();
    let trace = a.snapshot().trace;
    let actions: Vec<TraceAction> = trace.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [
            TraceAction::SegmentAlloc,
            TraceAction::Alloc,
            TraceAction::FreeRequested,
            TraceAction::FreeCompleted,
            TraceAction::SegmentFree,
            TraceAction::Oom,
        ]
    );
    // torch 2.15 records the rounded request in the OOM entry (`params.size()`), not the 20 MiB
    // segment asked of the device (`alloc_size`, what the message's "Tried to allocate" says).
    assert_eq!(
        trace[5].size,
        8 * MIB as u64,
        "the OOM entry's size is the request's"
    );
    // Each snapshot taken while recording adds a `snapshot` entry after reading the trace, as
    // torch 2.15's `snapshot()`: the next snapshot shows it.
    let json = a.snapshot().to_json();
    let back = gpumem::Snapshot::from_json(&json).unwrap();
    assert_eq!(back.trace.len(), 7);
    assert_eq!(back.trace[6].action, TraceAction::Snapshot);
    assert_eq!(back.trace[1].allocated, 512);
    assert_eq!(back.trace[1].reserved, 2 * MIB as u64);
}

#[test]
fn garbage_collection_frees_old_cached_blocks_past_the_threshold() {
    let a = with_config(100 * MIB, "garbage_collection_threshold:0.5");
    a.set_memory_fraction(1.0).unwrap();
    let x = a.malloc(30 * MIB, S0).unwrap();
    let y = a.malloc(24 * MIB, S0).unwrap();
    a.free(x, vec![]);
    a.free(y, vec![]);
    assert_eq!(a.reserved_bytes(), 54 * MIB as u64);
    // A 40 MiB request finds no cached fit; 54 MiB reserved is over the 50 MiB threshold, so cached
    // blocks are reclaimed before a new segment is reserved.
    let z = a.malloc(40 * MIB, S0).unwrap();
    assert!(
        a.reserved_bytes() < 94 * MIB as u64,
        "reserved {}",
        a.reserved_bytes()
    );
    assert_eq!(stat(&a, "num_ooms"), 0);
    a.free(z, vec![]);
}

#[test]
fn dropping_an_allocator_returns_its_cached_segments() {
    use gpumem::backend::RawMemory;
    use std::sync::Arc;
    let backend = Arc::new(CpuBackend::new(GIB));
    let a = CachingAllocator::new(backend.clone(), "cpu", AllocatorConfig::default());
    let b = a.malloc(3 * MIB, S0).unwrap();
    a.free(b, vec![]);
    assert_eq!(backend.mem_get_info().unwrap().0, GIB - 20 * MIB);
    drop(a);
    assert_eq!(
        backend.mem_get_info().unwrap().0,
        GIB,
        "the cached 20 MiB segment went back"
    );
}

#[test]
fn trace_entries_carry_the_requested_size_as_torchs_do() {
    let a = allocator(GIB);
    a.record_history(true);
    let b = a.malloc(1000, S0).unwrap();
    a.free(b, vec![]);
    let sizes: Vec<(TraceAction, u64)> = a
        .snapshot()
        .trace
        .iter()
        .map(|e| (e.action, e.size))
        .collect();
    assert_eq!(
        sizes,
        [
            (TraceAction::SegmentAlloc, 2 * MIB as u64),
            (TraceAction::Alloc, 1000),
            (TraceAction::FreeRequested, 1000),
            (TraceAction::FreeCompleted, 1000),
        ]
    );
}

/// A stream's work that is already finished when the block is freed.
struct Idle;

impl gpumem::allocator::PendingUse for Idle {
    fn is_done(&self) -> bool {
        true
    }
    fn wait(&self) {}
}

/// torch 2.15's `free`: a block whose recorded streams are all idle still gets their events
/// (`insert_events`) and stays active, in `active_bytes` and `requested_bytes`, until the next
/// `malloc` processes the events (`process_events`).
#[test]
fn a_freed_block_with_idle_recorded_streams_stays_active_until_the_next_malloc() {
    let a = allocator(GIB);
    let b = a.malloc(1000, S0).unwrap();
    a.free(b, vec![Box::new(Idle)]);
    assert_eq!(stat(&a, "allocated_bytes.all.current"), 0);
    assert_eq!(stat(&a, "active_bytes.all.current"), 1024);
    assert_eq!(stat(&a, "requested_bytes.all.current"), 1000);
    let next = a.malloc(512, S0).unwrap();
    assert_eq!(
        next.ptr, b.ptr,
        "the malloc processed the events first, then reused the block"
    );
    assert_eq!(stat(&a, "active_bytes.all.current"), 512);
    assert_eq!(stat(&a, "requested_bytes.all.current"), 512);
    a.free(next, vec![]);
}

/// torch 2.15 counts `requested_bytes` down in `free_block`, not in `free`: while a side stream
/// still works on a freed block its requested bytes stay, with its active bytes.
#[test]
fn requested_bytes_stay_while_a_side_stream_still_works() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Flag(Arc<AtomicBool>);
    impl gpumem::allocator::PendingUse for Flag {
        fn is_done(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
        fn wait(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let a = allocator(GIB);
    let done = Arc::new(AtomicBool::new(false));
    let b = a.malloc(3000, S0).unwrap();
    a.free(b, vec![Box::new(Flag(done.clone()))]);
    let other = a.malloc(512, S0).unwrap();
    assert_eq!(stat(&a, "requested_bytes.all.current"), 3000 + 512);
    done.store(true, Ordering::SeqCst);
    assert_eq!(
        stat(&a, "requested_bytes.all.current"),
        3000 + 512,
        "done, but no allocator call has processed the event yet"
    );
    let third = a.malloc(512, S0).unwrap();
    assert_eq!(stat(&a, "requested_bytes.all.current"), 512 + 512);
    a.free(other, vec![]);
    a.free(third, vec![]);
}

/// torch 2.15's `snapshot()` reads the trace before the segments' snapshot records its own
/// `snapshot` entry: `empty_cache(); _snapshot()` ends in `segment_free` (test_cuda.py's
/// `test_memory_snapshot` reads the last entries the same way).
#[test]
fn empty_cache_then_snapshot_ends_in_segment_free() {
    let a = allocator(GIB);
    a.record_history(true);
    let b = a.malloc(512, S0).unwrap();
    a.free(b, vec![]);
    a.empty_cache();
    let trace = a.snapshot().trace;
    assert_eq!(
        trace.last().map(|e| e.action),
        Some(TraceAction::SegmentFree)
    );
    assert_eq!(trace.last().map(|e| e.size), Some(2 * MIB as u64));
    assert_eq!(
        a.snapshot().trace.last().map(|e| e.action),
        Some(TraceAction::Snapshot),
        "the first snapshot's entry shows in the second"
    );
}
