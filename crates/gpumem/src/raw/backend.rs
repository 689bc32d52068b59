//! The raw layer: what a device must offer the runtime. No caching, no statistics, no policy.
//!
//! Two implementations: [`crate::backend_cpu`] over host memory and [`crate::backend_cuda`] over the
//! CUDA driver. The caching allocator only sees [`RawMemory`]; buffers, streams and transfers use the
//! rest of [`DeviceBackend`].

use crate::error::{Error, Result};
use std::time::Instant;

/// An address in a device's memory space (a `CUdeviceptr` on cuda, a host address on cpu).
pub type DevicePtr = u64;

/// Why a reservation failed.
#[derive(Debug)]
pub enum ReserveError {
    /// The device (or its capacity) has not enough free memory: the allocator may free cache and retry.
    OutOfMemory,
    /// Anything else: reported to the caller as it is.
    Other(crate::error::Error),
}

/// Reserve and release whole segments of device memory. The caching allocator is generic over this.
pub trait RawMemory: Send + Sync {
    /// Reserves `size` bytes (never 0) and returns the segment's address.
    fn reserve(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError>;
    /// Returns a segment to the device.
    ///
    /// # Safety
    /// `ptr` came from `reserve(size)` on this backend and no one uses it any more.
    unsafe fn release(&self, ptr: DevicePtr, size: usize);
    /// The device's own view: (free, total) bytes, as `cudaMemGetInfo` and nvidia-smi see them.
    fn mem_get_info(&self) -> Result<(usize, usize)>;
    /// Whether the device can put memory behind reserved address space (`cuMemCreate` +
    /// `cuMemMap`: the driver's `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`), which
    /// expandable segments need. Always on cpu.
    fn virtual_memory_management(&self) -> bool {
        true
    }
    /// Reserves `size` bytes of address space with no memory behind it, for an expandable
    /// segment (`cuMemAddressReserve`; on cpu an inaccessible `mmap`).
    fn reserve_address_space(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError>;
    /// Gives back address space from `reserve_address_space`.
    ///
    /// # Safety
    /// `ptr` came from `reserve_address_space(size)` and no page of it is mapped any more.
    unsafe fn release_address_space(&self, ptr: DevicePtr, size: usize);
    /// Puts `size` bytes of memory behind `ptr..ptr+size` (one page of an expandable segment:
    /// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`); returns the backend's handle for `unmap`.
    /// Counts against the device like `reserve`.
    ///
    /// # Safety
    /// The range lies inside address space from `reserve_address_space` and is not mapped.
    unsafe fn map(&self, ptr: DevicePtr, size: usize) -> std::result::Result<u64, ReserveError>;
    /// Takes the memory from behind pages mapped by `map` (`cuMemUnmap` + `cuMemRelease` each),
    /// after waiting once for `stream`, the stream whose segment they belong to (torch's
    /// `ExpandableSegment::unmapHandles`: one `cudaStreamSynchronize` of the segment's stream per
    /// range it unmaps, not one per page). `None`: the segment's stream is gone or unknown, and the
    /// wait is for the whole device (torch's `cudaDeviceSynchronize` for a segment without a
    /// stream).
    ///
    /// # Safety
    /// Each page's `ptr`, `size` and `handle` are those of one `map` call, and no one uses it;
    /// `stream`, when given, is alive.
    unsafe fn unmap(&self, pages: &[MappedPage], stream: Option<RawStream>);
}

/// One page of an expandable segment, as `map` put it behind its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedPage {
    /// Start of the page.
    pub ptr: DevicePtr,
    /// Its bytes.
    pub size: usize,
    /// The backend's handle from `map`.
    pub handle: u64,
}

/// A raw stream handle: the `CUstream` as an integer on cuda (0 = the legacy default stream), a
/// counter on cpu.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawStream(pub u64);

/// Where a cpu event was recorded: after the first `position` items of work queued on `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPoint {
    /// The stream's number.
    pub stream: u64,
    /// Items queued on it before the event.
    pub position: u64,
}

/// A raw event: marks a point in a stream's work.
#[derive(Debug)]
pub enum RawEvent {
    /// A `CUevent` as an integer, and whether it keeps timing.
    Cuda(u64, bool),
    /// A cpu event: when it was recorded (`None` without timing), and after which of its
    /// stream's work.
    Host(Option<Instant>, StreamPoint),
}

/// Static facts about a device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceProperties {
    /// Marketing name (`NVIDIA H200`) or the host CPU's model name.
    pub name: String,
    /// Total memory in bytes (the cpu device: its capacity).
    pub total_memory: u64,
    /// Streaming multiprocessors (cpu: logical cores).
    pub multi_processor_count: u32,
    /// Compute capability `(major, minor)`; `(0, 0)` on cpu.
    pub compute_capability: (u32, u32),
}

/// How pinned host memory is made (torch's `pinned_use_cuda_host_register`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinning {
    /// Page-locked memory in one call (`cuMemHostAlloc`; torch's `cudaHostAlloc`, the default).
    HostAlloc,
    /// Ordinary memory whose pages `threads` threads touch first, then page-locked where it is
    /// (`cuMemHostRegister`; torch's `allocWithCudaHostRegister`, with
    /// `pinned_num_register_threads`).
    Register {
        /// Threads that touch the pages (1: the calling thread alone).
        threads: usize,
    },
}

/// Bytes per page that [`touch_pages`] touches (torch's 4 KiB `pageSize`).
pub const TOUCH_PAGE: usize = 4096;

/// The part of `0..size` that each thread touches: torch's `mapPagesForRegister` split, thread
/// `i` from `size * i / threads` for `size / threads` bytes, the last one to the end (the floor
/// divisions can leave a few bytes between two parts, as in torch). Threads are used only when
/// there are at least [`TOUCH_PAGE`] bytes per thread (torch's condition); else one does it all.
pub fn touch_ranges(size: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let threads = if threads > 1 && size >= TOUCH_PAGE * threads {
        threads
    } else {
        1
    };
    (0..threads)
        .map(|i| {
            let start = size * i / threads;
            let end = if i == threads - 1 {
                size
            } else {
                start + size / threads
            };
            start..end
        })
        .collect()
}

/// Writes a zero into the first byte of every page of `ptr..ptr+size` that starts in one of the
/// [`touch_ranges`], on one thread per range, so that the kernel maps the pages before they are
/// registered (torch's pre-faulting before `cudaHostRegister`).
///
/// # Safety
/// `ptr` is page-aligned and `ptr..ptr+size` is memory the caller owns and no one else uses.
pub unsafe fn touch_pages(ptr: *mut u8, size: usize, threads: usize) {
    let base = ptr as usize;
    let touch = move |range: std::ops::Range<usize>| {
        let first = range.start.next_multiple_of(TOUCH_PAGE);
        for offset in (first..range.end).step_by(TOUCH_PAGE) {
            // SAFETY: offset < size, inside the caller's memory; each page is touched by one
            // thread (the ranges do not overlap).
            unsafe { ((base + offset) as *mut u8).write_volatile(0) };
        }
    };
    let ranges = touch_ranges(size, threads);
    if ranges.len() == 1 {
        touch(ranges[0].clone());
        return;
    }
    std::thread::scope(|scope| {
        for range in ranges {
            scope.spawn(move || touch(range));
        }
    });
}

/// `size` bytes (at least 1) of zeroed host memory on a page boundary, freed by
/// `dealloc` with the same layout.
pub fn page_aligned_alloc(size: usize) -> Result<*mut u8> {
    let layout = std::alloc::Layout::from_size_align(size.max(1), TOUCH_PAGE).map_err(|e| {
        Error::HostAlloc {
            size,
            reason: e.to_string(),
        }
    })?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(Error::HostAlloc {
            size,
            reason: "the system allocator refused".into(),
        });
    }
    Ok(ptr)
}

/// Frees memory from [`page_aligned_alloc`]`(size)`.
///
/// # Safety
/// `ptr` came from `page_aligned_alloc(size)` and no one uses it any more.
pub unsafe fn page_aligned_free(ptr: *mut u8, size: usize) {
    // SAFETY: the caller's guarantee; the layout is the one it was allocated with.
    unsafe {
        std::alloc::dealloc(
            ptr,
            std::alloc::Layout::from_size_align_unchecked(size.max(1), TOUCH_PAGE),
        )
    };
}

/// Host memory handed out for pinned buffers.
#[derive(Debug, Clone, Copy)]
pub struct HostAllocation {
    /// Start of the memory.
    pub ptr: *mut u8,
    /// Whether the memory is page-locked (the OS may refuse, e.g. under a low `ulimit -l`).
    pub page_locked: bool,
    /// How it was made, so that it is freed the same way whatever the settings are by then.
    pub pinning: Pinning,
}

// SAFETY: a HostAllocation is a plain address; whoever owns it decides who touches the memory.
unsafe impl Send for HostAllocation {}
// SAFETY: as above.
unsafe impl Sync for HostAllocation {}

/// Everything the safe layer needs from a device beyond reserving memory.
///
/// Copies take raw addresses; callers guarantee the ranges are valid for `n` bytes. With
/// `asynchronous = false` a copy has finished when the call returns.
pub trait DeviceBackend: RawMemory {
    /// Static facts about the device.
    fn properties(&self) -> Result<DeviceProperties>;
    /// Creates a new stream.
    fn create_stream(&self) -> Result<RawStream>;
    /// Destroys a stream made by `create_stream`.
    fn destroy_stream(&self, stream: RawStream);
    /// Waits until all work on the device has finished.
    fn synchronize(&self) -> Result<()>;
    /// Waits until all work queued on `stream` has finished.
    fn stream_synchronize(&self, stream: RawStream) -> Result<()>;
    /// Fills `n` bytes at `dst` with zeros, after the work queued on `stream`; finished on return.
    ///
    /// # Safety
    /// `dst..dst+n` is device memory owned by the caller.
    unsafe fn memset_zero(&self, dst: DevicePtr, n: usize, stream: RawStream) -> Result<()>;
    /// Copies `n` bytes from host `src` to device `dst`.
    ///
    /// # Safety
    /// Both ranges are valid; with `asynchronous`, `src` stays valid and unchanged until the stream
    /// reaches this copy (only pinned memory may be used asynchronously).
    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()>;
    /// Copies `n` bytes from device `src` to host `dst`.
    ///
    /// # Safety
    /// As for `copy_htod`, with `dst` the host side.
    unsafe fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()>;
    /// Copies `n` bytes within the device.
    ///
    /// # Safety
    /// Both ranges are device memory valid for `n` bytes.
    unsafe fn copy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()>;
    /// Records an event at the current end of `stream`'s work; with `timing`, one that
    /// `event_elapsed_ms` can time (torch's `enable_timing=True`), else a cheaper one, which the
    /// cuda backend takes from a pool of the device's events and gives back to it when destroyed.
    fn record_event(&self, stream: RawStream, timing: bool) -> Result<RawEvent>;
    /// Makes future work on `stream` wait for `event`, on the device (the host does not wait).
    fn stream_wait_event(&self, stream: RawStream, event: &RawEvent) -> Result<()>;
    /// Whether all work before the event has finished.
    fn event_query(&self, event: &RawEvent) -> Result<bool>;
    /// Waits for the event.
    fn event_synchronize(&self, event: &RawEvent) -> Result<()>;
    /// Milliseconds between two events recorded with timing.
    fn event_elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32>;
    /// Frees an event.
    fn destroy_event(&self, event: RawEvent);
    /// Allocates host memory for pinned buffers, made as `pinning` says (`cuMemHostAlloc`, or
    /// aligned ordinary memory + `cuMemHostRegister` on cuda; on cpu the memory is locked with
    /// `mlock` either way, after its pages were touched for `Register`).
    fn host_alloc(&self, size: usize, pinning: Pinning) -> Result<HostAllocation>;
    /// Frees memory from `host_alloc`.
    ///
    /// # Safety
    /// `alloc` came from `host_alloc(size)` on this backend and no one uses it any more.
    unsafe fn host_free(&self, alloc: HostAllocation, size: usize);
    /// Whether work queued on a stream may run after the call that queued it returns: always on
    /// cuda; on cpu when [`set_late_streams`](DeviceBackend::set_late_streams) asked for it.
    fn late_streams(&self) -> bool {
        true
    }
    /// On cpu: run stream work late, as a GPU does, or at once (the default). Nothing on cuda.
    fn set_late_streams(&self, _late: bool) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_ranges_split_as_torch_does_without_overlap() {
        // torch: thread i starts at size * i / n and runs size / n bytes; the last to the end.
        let size = 10 * TOUCH_PAGE + 100;
        assert_eq!(
            touch_ranges(size, 4),
            [0..10265, 10265..20530, 20530..30795, 30795..size]
        );
        // The floor divisions can leave fewer than `threads` bytes between two ranges, as in
        // torch (a page starting there is faulted in by the registration itself).
        let size = 8 * TOUCH_PAGE + 2;
        assert_eq!(
            touch_ranges(size, 4),
            [0..8192, 8192..16384, 16385..24577, 24577..size]
        );
        for (size, threads) in [(size, 4), (size, 1), (3 * TOUCH_PAGE, 8), (0, 2), (1, 1)] {
            let ranges = touch_ranges(size, threads);
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(size));
            assert!(
                ranges
                    .windows(2)
                    .all(|w| w[0].end <= w[1].start && w[1].start - w[0].end < threads)
            );
        }
        assert_eq!(
            touch_ranges(3 * TOUCH_PAGE, 8).len(),
            1,
            "too small for 8 threads"
        );
        assert_eq!(touch_ranges(8 * TOUCH_PAGE, 8).len(), 8);
    }

    #[test]
    fn touch_pages_writes_the_first_byte_of_every_page_and_nothing_else() {
        let size = 37 * TOUCH_PAGE + 123;
        let ptr = page_aligned_alloc(size).unwrap();
        // SAFETY: ptr..ptr+size is ours.
        let bytes = unsafe {
            std::ptr::write_bytes(ptr, 0xAB, size);
            touch_pages(ptr, size, 4);
            std::slice::from_raw_parts(ptr, size)
        };
        for (offset, &byte) in bytes.iter().enumerate() {
            let want = if offset % TOUCH_PAGE == 0 { 0 } else { 0xAB };
            assert_eq!(byte, want, "byte {offset}");
        }
        // SAFETY: allocated above, no longer used.
        unsafe { page_aligned_free(ptr, size) };
    }
}
