//! `expandable_segments:True` on the cpu device: one segment per stream and pool grows page by
//! page (2 MiB pages in the small pool, 20 MiB in the large one) and `empty_cache` unmaps the
//! free pages, as torch 2.x's `ExpandableSegment` does.

use gpumem::allocator::{CachingAllocator, StreamId};
use gpumem::backend::{DevicePtr, MappedPage, RawMemory, RawStream, ReserveError};
use gpumem::backend_cpu::CpuBackend;
use gpumem::{AllocatorConfig, Error, TraceAction};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const MIB: usize = 1 << 20;
const S0: StreamId = StreamId(0);

fn expandable(capacity: usize) -> CachingAllocator<CpuBackend> {
    CachingAllocator::new(
        CpuBackend::new(capacity),
        "cpu",
        AllocatorConfig::parse("expandable_segments:True").unwrap(),
    )
}

fn stat(a: &CachingAllocator<CpuBackend>, key: &str) -> u64 {
    a.memory_stats()
        .get(key)
        .unwrap_or_else(|| panic!("no stat {key}"))
}

#[test]
fn a_small_request_maps_one_2_mib_page() {
    let a = expandable(1 << 30);
    a.record_history(true);
    let b = a.malloc(1, S0).unwrap();
    assert_eq!(b.size, 512);
    assert_eq!(a.reserved_bytes(), 2 * MIB as u64);
    assert_eq!(stat(&a, "num_device_alloc"), 1);
    // torch counts no segment for an expandable mapping, only reserved bytes.
    assert_eq!(stat(&a, "segment.all.current"), 0);
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert!(snap.segments[0].is_expandable);
    assert_eq!(snap.segments[0].segment_type, "small");
    assert_eq!(snap.segments[0].total_size, 2 * MIB as u64);
    assert_eq!(snap.trace[0].action, TraceAction::SegmentMap);
    assert_eq!(snap.trace[0].size, 2 * MIB as u64);
    a.free(b, vec![]);
}

#[test]
fn large_requests_grow_one_segment_in_20_mib_pages() {
    let a = expandable(1 << 30);
    let x = a.malloc(5 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 20 * MIB as u64, "one 20 MiB page");
    let y = a.malloc(5 * MIB, S0).unwrap();
    assert_eq!(y.ptr, x.ptr + 5 * MIB as u64, "the same page, right after");
    assert_eq!(a.reserved_bytes(), 20 * MIB as u64);
    // 12 MiB does not fit in the 10 MiB left: the segment grows by one page at its end, and the
    // block starts in the free 10 MiB before the new page.
    let z = a.malloc(12 * MIB, S0).unwrap();
    assert_eq!(z.ptr, y.ptr + 5 * MIB as u64);
    assert_eq!(a.reserved_bytes(), 40 * MIB as u64);
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1, "one contiguous mapped range");
    assert_eq!(snap.segments[0].total_size, 40 * MIB as u64);
    assert_eq!(snap.segments[0].allocated_size, 22 * MIB as u64);
    for b in [x, y, z] {
        a.free(b, vec![]);
    }
}

#[test]
fn empty_cache_unmaps_free_pages_inside_a_segment_that_still_holds_a_live_block() {
    let a = expandable(1 << 30);
    a.record_history(true);
    let first = a.malloc(30 * MIB, S0).unwrap();
    let second = a.malloc(30 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 60 * MIB as u64);
    a.free(first, vec![]);
    a.empty_cache();
    // The first page lay wholly under the freed block: unmapped. The 10 MiB of the second page
    // before `second` stay mapped (the page is shared with a live block).
    assert_eq!(a.reserved_bytes(), 40 * MIB as u64);
    assert_eq!(stat(&a, "num_device_free"), 1);
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert_eq!(snap.segments[0].address, first.ptr + 20 * MIB as u64);
    assert_eq!(snap.segments[0].total_size, 40 * MIB as u64);
    // The last entry is the unmap: the snapshot records its own entry after reading the trace.
    let unmap = snap.trace.last().unwrap();
    assert_eq!(unmap.action, TraceAction::SegmentUnmap);
    assert_eq!(unmap.size, 20 * MIB as u64);
    a.free(second, vec![]);
    a.empty_cache();
    assert_eq!(a.reserved_bytes(), 0);
    assert!(a.snapshot().segments.is_empty());
    assert_eq!(a.backend().mem_get_info().unwrap().0, 1 << 30);
}

#[test]
fn each_stream_and_pool_grows_its_own_segment() {
    let a = expandable(1 << 30);
    let s0 = a.malloc(5 * MIB, S0).unwrap();
    let s1 = a.malloc(5 * MIB, StreamId(1)).unwrap();
    let small = a.malloc(4096, S0).unwrap();
    assert_eq!(a.reserved_bytes(), (20 + 20 + 2) * MIB as u64);
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 3);
    assert!(snap.segments.iter().all(|s| s.is_expandable));
    for b in [s0, s1, small] {
        a.free(b, vec![]);
    }
    a.empty_cache();
    assert_eq!(a.reserved_bytes(), 0);
}

#[test]
fn the_fragmentation_that_fails_with_fixed_segments_fits_in_a_growing_one() {
    // A cached 100 MiB segment is split by a 30 MiB request; 90 MiB is free in all (70 MiB
    // cached, 20 MiB on the device), yet fixed segments cannot serve 80 MiB: the split segment
    // cannot be released and 80 MiB more does not fit. A growing segment maps 20 MiB behind the
    // free 70 MiB and serves it.
    for (conf, fits) in [("", false), ("expandable_segments:True", true)] {
        let a = CachingAllocator::new(
            CpuBackend::new(120 * MIB),
            "cpu",
            AllocatorConfig::parse(conf).unwrap(),
        );
        let big = a.malloc(100 * MIB, S0).unwrap();
        a.free(big, vec![]);
        let live = a.malloc(30 * MIB, S0).unwrap();
        assert_eq!(live.ptr, big.ptr, "{conf:?}: the cached block, split");
        let result = a.malloc(80 * MIB, S0);
        assert_eq!(result.is_ok(), fits, "{conf:?}: {result:?}");
        match result {
            Ok(b) => {
                assert_eq!(b.ptr, big.ptr + 30 * MIB as u64);
                assert_eq!(a.reserved_bytes(), 120 * MIB as u64);
                a.free(b, vec![]);
            }
            Err(e) => {
                assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
                assert!(
                    e.to_string()
                        .contains("70.00 MiB is reserved by gpumem but unallocated"),
                    "{e}"
                );
            }
        }
        a.free(live, vec![]);
    }
}

#[test]
fn turned_off_at_run_time_new_requests_leave_expandable_blocks_alone() {
    let a = expandable(1 << 30);
    let x = a.malloc(5 * MIB, S0).unwrap();
    a.free(x, vec![]);
    a.set_allocator_settings("expandable_segments:False")
        .unwrap();
    let y = a.malloc(5 * MIB, S0).unwrap();
    assert_ne!(y.ptr, x.ptr, "not the cached expandable block");
    assert_eq!(a.reserved_bytes(), 40 * MIB as u64);
    assert_eq!(stat(&a, "segment.all.current"), 1, "a fixed segment");
    a.free(y, vec![]);
    a.empty_cache();
    assert_eq!(a.reserved_bytes(), 0);
}

#[test]
fn a_full_device_is_an_out_of_memory_error_naming_the_segment_size() {
    let a = expandable(50 * MIB);
    let err = a.malloc(45 * MIB, S0).unwrap_err();
    assert!(
        err.to_string().contains("Tried to allocate 46.00 MiB"),
        "{err}"
    );
    assert_eq!(
        a.reserved_bytes(),
        0,
        "pages mapped before the failure are given back"
    );
    let ok = a.malloc(30 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 40 * MIB as u64);
    a.free(ok, vec![]);
}

#[test]
fn mapped_memory_is_usable_and_reads_zero_after_an_unmap() {
    let a = expandable(1 << 30);
    let first = a.malloc(40 * MIB, S0).unwrap();
    let keep = a.malloc(5 * MIB, S0).unwrap();
    // SAFETY: the block is ours and 40 MiB long.
    unsafe {
        std::ptr::write_bytes(first.ptr as *mut u8, 0xAB, first.size);
        assert_eq!(*(first.ptr as *const u8).add(first.size - 1), 0xAB);
    }
    a.free(first, vec![]);
    a.empty_cache();
    assert_eq!(
        a.reserved_bytes(),
        20 * MIB as u64,
        "two pages unmapped, keep's stays"
    );
    let again = a.malloc(40 * MIB, S0).unwrap();
    assert_eq!(again.ptr, first.ptr, "the lowest free address space again");
    // SAFETY: as above; the pages were unmapped and mapped afresh.
    unsafe { assert_eq!(*(again.ptr as *const u8), 0) };
    a.free(again, vec![]);
    a.free(keep, vec![]);
}

/// The cpu backend, counting `unmap` calls (each waits once) and pages unmapped, and noting the
/// stream each call waited for.
struct CountingUnmaps {
    backend: CpuBackend,
    calls: AtomicUsize,
    pages: AtomicUsize,
    waited_for: Mutex<Vec<Option<RawStream>>>,
}

impl CountingUnmaps {
    fn new() -> CountingUnmaps {
        CountingUnmaps {
            backend: CpuBackend::new(1 << 30),
            calls: AtomicUsize::new(0),
            pages: AtomicUsize::new(0),
            waited_for: Mutex::new(Vec::new()),
        }
    }
}

impl RawMemory for CountingUnmaps {
    fn reserve(&self, size: usize) -> Result<DevicePtr, ReserveError> {
        self.backend.reserve(size)
    }
    unsafe fn release(&self, ptr: DevicePtr, size: usize) {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.backend.release(ptr, size) }
    }
    fn mem_get_info(&self) -> gpumem::Result<(usize, usize)> {
        self.backend.mem_get_info()
    }
    fn reserve_address_space(&self, size: usize) -> Result<DevicePtr, ReserveError> {
        self.backend.reserve_address_space(size)
    }
    unsafe fn release_address_space(&self, ptr: DevicePtr, size: usize) {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.backend.release_address_space(ptr, size) }
    }
    unsafe fn map(&self, ptr: DevicePtr, size: usize) -> Result<u64, ReserveError> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.backend.map(ptr, size) }
    }
    unsafe fn unmap(&self, pages: &[MappedPage], stream: Option<RawStream>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.pages.fetch_add(pages.len(), Ordering::Relaxed);
        self.waited_for.lock().unwrap().push(stream);
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.backend.unmap(pages, stream) }
    }
}

#[test]
fn empty_cache_unmaps_a_free_range_with_one_wait_not_one_per_page() {
    let a = CachingAllocator::new(
        CountingUnmaps::new(),
        "cpu",
        AllocatorConfig::parse("expandable_segments:True").unwrap(),
    );
    let big = a.malloc(200 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 200 * MIB as u64, "ten 20 MiB pages");
    a.free(big, vec![]);
    a.empty_cache();
    assert_eq!(a.reserved_bytes(), 0);
    let backend = a.backend();
    assert_eq!(backend.pages.load(Ordering::Relaxed), 10);
    assert_eq!(
        backend.calls.load(Ordering::Relaxed),
        1,
        "one range, one wait (torch synchronizes once per range it unmaps)"
    );
}

#[test]
fn unmapping_waits_for_the_segments_own_stream_or_the_device_once_that_stream_is_gone() {
    let a = CachingAllocator::new(
        CountingUnmaps::new(),
        "cpu",
        AllocatorConfig::parse("expandable_segments:True").unwrap(),
    );
    let side = StreamId(3);
    a.register_stream(side, RawStream(7));
    for stream in [S0, side] {
        let block = a.malloc(40 * MIB, stream).unwrap();
        a.free(block, vec![]);
    }
    a.empty_cache();
    let mut waited = a.backend().waited_for.lock().unwrap().clone();
    waited.sort();
    assert_eq!(
        waited,
        [Some(RawStream(0)), Some(RawStream(7))],
        "each segment's range waits for its own stream (torch's cudaStreamSynchronize(stream_))"
    );
    a.forget_stream(side);
    let block = a.malloc(40 * MIB, side).unwrap();
    a.free(block, vec![]);
    a.empty_cache();
    assert_eq!(
        a.backend().waited_for.lock().unwrap().last(),
        Some(&None),
        "a stream forgotten (destroyed) is not waited for by its handle: the whole device is"
    );
}

/// The cpu backend as a device without CUDA virtual memory management would be.
struct NoVirtualMemory(CpuBackend);

impl RawMemory for NoVirtualMemory {
    fn reserve(&self, size: usize) -> Result<DevicePtr, ReserveError> {
        self.0.reserve(size)
    }
    unsafe fn release(&self, ptr: DevicePtr, size: usize) {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.0.release(ptr, size) }
    }
    fn mem_get_info(&self) -> gpumem::Result<(usize, usize)> {
        self.0.mem_get_info()
    }
    fn virtual_memory_management(&self) -> bool {
        false
    }
    fn reserve_address_space(&self, _size: usize) -> Result<DevicePtr, ReserveError> {
        panic!("address space reserved on a device without virtual memory management")
    }
    unsafe fn release_address_space(&self, _ptr: DevicePtr, _size: usize) {
        unreachable!("nothing was reserved")
    }
    unsafe fn map(&self, _ptr: DevicePtr, _size: usize) -> Result<u64, ReserveError> {
        unreachable!("nothing was reserved")
    }
    unsafe fn unmap(&self, _pages: &[MappedPage], _stream: Option<RawStream>) {
        unreachable!("nothing was mapped")
    }
}

#[test]
fn without_virtual_memory_management_expandable_segments_fail_plainly_and_false_still_works() {
    let a = CachingAllocator::new(
        NoVirtualMemory(CpuBackend::new(1 << 30)),
        "cuda:0",
        AllocatorConfig::parse("expandable_segments:True").unwrap(),
    );
    let err = a.malloc(40 * MIB, S0).unwrap_err();
    assert!(matches!(err, Error::BadSetting { .. }), "{err:?}");
    let message = err.to_string();
    for part in [
        "expandable_segments",
        "cuda:0",
        "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
        "expandable_segments:False",
    ] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
    assert_eq!(a.reserved_bytes(), 0);
    a.set_allocator_settings("expandable_segments:False")
        .unwrap();
    let block = a
        .malloc(40 * MIB, S0)
        .expect("fixed segments need no virtual memory");
    assert_eq!(a.reserved_bytes(), 40 * MIB as u64);
    a.free(block, vec![]);
}
