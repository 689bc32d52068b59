//! The raw layer over host memory: the `cpu` device, a stand-in GPU with a fixed capacity.
//!
//! Each stream is a queue (`StreamQueues`): its work runs at once, when queued (the default), or
//! late, as on a GPU ([`DeviceBackend::set_late_streams`]): only when a synchronize, an event or
//! another stream's wait needs it. Copies with `asynchronous` are queued; a synchronous copy or a
//! zero-fill first runs its stream's queue, then happens on return, as the cuda backend's
//! `cuMemcpy*Async` or `cuMemsetD8Async` followed by `cuStreamSynchronize` does. Freeing memory
//! runs every queue first, as `cuMemFree` and `cuMemFreeHost` wait for the device; unmapping an
//! expandable segment's pages runs the queue of the segment's stream, as the cuda backend
//! synchronizes that stream before `cuMemUnmap`.
//!
//! Segment addresses are deterministic relative to the device: each device reserves one range of
//! address space on first use and places every segment, and every expandable segment's address
//! space, in it first fit in address order on 2 MiB boundaries (every segment size the caching
//! allocator asks for is a multiple of 2 MiB; the CUDA driver's placement policy is not documented,
//! so this one is only alike in spirit: addresses from a range of the device's own). The
//! allocator breaks ties between cached blocks of equal size by address, so the same calls on a
//! fresh device take the same decisions whatever the process did before; host `malloc` addresses
//! depend on ASLR and on earlier frees.

use crate::error::{Error, Result};
use crate::raw::backend::{
    DeviceBackend, DeviceProperties, DevicePtr, HostAllocation, MappedPage, Pinning, RawEvent,
    RawMemory, RawStream, ReserveError, StreamPoint, page_aligned_alloc, page_aligned_free,
    touch_pages,
};
use crate::raw::cpu_streams::StreamQueues;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// Segments start on multiples of this and take whole multiples of it (every segment size the
/// caching allocator asks for is a multiple of 2 MiB, torch's `kSmallBuffer`).
pub const GRANULARITY: usize = 2 << 20;
/// Address space per byte of capacity: room for segments (at most the capacity at once, but
/// scattered) and for expandable segments (9/8 of the capacity each, one per stream and pool).
const SPACE_PER_CAPACITY_BYTE: usize = 8;
/// The least address space a device reserves (a small device still fits a 20 MiB expandable page
/// per pool and stream).
const MIN_SPACE: usize = 512 << 20;
/// The most address space a device reserves (a device with no capacity limit).
const MAX_SPACE: usize = 8 << 40;

/// The cpu device's raw memory.
pub struct CpuBackend {
    capacity: usize,
    reserved: AtomicUsize,
    next_stream: AtomicU64,
    /// Numbers of destroyed streams, handed out again first, as the CUDA driver may hand a
    /// destroyed stream's handle to a new stream.
    free_streams: Mutex<BTreeSet<u64>>,
    /// The work queued on each stream.
    streams: StreamQueues,
    /// Where segments go: reserved on the first `reserve` or `reserve_address_space`.
    space: Mutex<Option<AddressSpace>>,
    /// The share of the address space left under `RLIMIT_AS` this device may take: three
    /// quarters for `cpu`, an eighth for each of `cpu:1`, `cpu:2`, ... ([`CpuBackend::extra`]).
    share: (usize, usize),
}

impl CpuBackend {
    /// A backend that lets at most `capacity` bytes be reserved at once.
    pub fn new(capacity: usize) -> CpuBackend {
        CpuBackend {
            capacity,
            reserved: AtomicUsize::new(0),
            next_stream: AtomicU64::new(1),
            free_streams: Mutex::new(BTreeSet::new()),
            streams: StreamQueues::default(),
            space: Mutex::new(None),
            share: (3, 4),
        }
    }

    /// The backend of a further cpu device (`cpu:1`, ...): under a limit on the process's address
    /// space it takes an eighth of what is left, not three quarters, so that several fit.
    pub fn extra(self) -> CpuBackend {
        CpuBackend {
            share: (1, 8),
            ..self
        }
    }

    /// The device's address space, reserved now if this is its first use.
    fn space(&self) -> std::result::Result<MutexGuard<'_, Option<AddressSpace>>, ReserveError> {
        // Placement only edits the free list after it has decided; a panic elsewhere cannot leave
        // it half-edited, so keep going with it as it is.
        let mut space = self
            .space
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if space.is_none() {
            *space = Some(AddressSpace::new(space_size(self.capacity, self.share))?);
        }
        Ok(space)
    }

    /// Takes `size` bytes (rounded up to [`GRANULARITY`]) of the device's address space, first fit
    /// in address order; nothing is accessible yet. `OutOfMemory`: no free range is large enough.
    fn place(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        let mut space = self.space()?;
        let space = space.as_mut().expect("the address space was just reserved");
        space.take(size).ok_or(ReserveError::OutOfMemory)
    }

    /// Copies `n` bytes from `src` to `dst` on `stream`: queued when `asynchronous`, else after the
    /// stream's queue has run, on return.
    ///
    /// # Safety
    /// Both ranges are valid for `n` bytes until the copy has run.
    unsafe fn copy(&self, dst: usize, src: usize, n: usize, stream: RawStream, asynchronous: bool) {
        // SAFETY: the caller's guarantee, which holds until the copy runs.
        let copy = move || unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
        if asynchronous {
            self.streams.enqueue(stream.0, copy);
        } else {
            self.streams.run_stream(stream.0);
            copy();
        }
    }

    /// Where a cpu event was recorded; an error for another device's event.
    fn point(&self, event: &RawEvent) -> Result<StreamPoint> {
        match event {
            RawEvent::Host(_, point) => Ok(*point),
            RawEvent::Cuda(..) => Err(foreign_event("event")),
        }
    }

    /// Gives `ptr..ptr+size` back to the device's address space.
    fn unplace(&self, ptr: DevicePtr, size: usize) {
        let mut space = self
            .space
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        space
            .as_mut()
            .expect("a placed range has an address space")
            .give_back(ptr, size);
    }
}

/// The error for an event of another device handed to the cpu backend.
fn foreign_event(op: &'static str) -> Error {
    Error::Driver {
        op,
        device: "cpu".into(),
        message: "an event from another device; events belong to the device that recorded them"
            .into(),
    }
}

/// The address space a cpu device reserves for a capacity: [`SPACE_PER_CAPACITY_BYTE`] times it,
/// between [`MIN_SPACE`] and [`MAX_SPACE`], in whole [`GRANULARITY`] units. Under a limit on the
/// process's address space (`RLIMIT_AS`, as `workbook grade` sets), at most the device's `part` of
/// `whole` of what the limit leaves, so that the rest of the process keeps room.
fn space_size(capacity: usize, (part, whole): (usize, usize)) -> usize {
    let wanted = capacity
        .saturating_mul(SPACE_PER_CAPACITY_BYTE)
        .clamp(MIN_SPACE, MAX_SPACE);
    let size = match address_space_left() {
        Some(left) => wanted.min(left / whole * part),
        None => wanted,
    };
    (size / GRANULARITY).max(1) * GRANULARITY
}

/// Address space the cpu devices of this process hold now (every [`AddressSpace`] alive).
static SPACE_HELD: AtomicUsize = AtomicUsize::new(0);

/// Bytes of address space this process may still map under `RLIMIT_AS`; `None` without a limit.
/// Where `/proc` is absent (as in `workbook grade`'s sandbox) the mapped size is unknown: what the
/// cpu devices already hold is taken from the limit, so that a further device (`cpu:1`, ...)
/// takes its share of what is left, not of the whole limit, and leaves the process room.
fn address_space_left() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let limit = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    // The first field of /proc/self/statm is the process's mapped size in pages.
    let mapped = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().next()?.parse::<usize>().ok())
        .map_or(SPACE_HELD.load(Ordering::Relaxed), |pages| {
            // SAFETY: sysconf only reads system configuration.
            let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            pages.saturating_mul(usize::try_from(page_size).unwrap_or(4096))
        });
    Some(limit.saturating_sub(mapped))
}

/// One range of address space (`mmap` of `PROT_NONE` with `MAP_NORESERVE`: no memory behind it)
/// and which parts of it are free. Parts in use are made accessible by the caller.
struct AddressSpace {
    /// The whole mapping, as `mmap` returned it (its start may not be aligned).
    mapping: usize,
    /// Length of the mapping.
    mapping_len: usize,
    /// Free ranges: start address to length, in address order; adjacent ranges are merged.
    free: BTreeMap<DevicePtr, usize>,
}

impl AddressSpace {
    /// Reserves `size` bytes of address space starting on a [`GRANULARITY`] boundary; where the
    /// system refuses that much (a small virtual address space, a limit), a quarter less each
    /// time, down to [`GRANULARITY`].
    fn new(size: usize) -> std::result::Result<AddressSpace, ReserveError> {
        let mut size = size;
        loop {
            let mapping_len = size + GRANULARITY;
            // SAFETY: a fresh anonymous mapping that no one else knows; PROT_NONE with NORESERVE
            // takes address space only, no memory (and does not count against RLIMIT_DATA).
            let mapping = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    mapping_len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if mapping != libc::MAP_FAILED {
                SPACE_HELD.fetch_add(mapping_len, Ordering::Relaxed);
                let start = (mapping as usize).next_multiple_of(GRANULARITY);
                return Ok(AddressSpace {
                    mapping: mapping as usize,
                    mapping_len,
                    free: BTreeMap::from([(start as DevicePtr, size)]),
                });
            }
            let error = std::io::Error::last_os_error();
            if size <= GRANULARITY {
                return Err(ReserveError::Other(Error::HostAlloc {
                    size,
                    reason: format!("mmap of the cpu device's address space failed: {error}"),
                }));
            }
            size = ((size - size / 4) / GRANULARITY).max(1) * GRANULARITY;
        }
    }

    /// The lowest free range of `size` bytes (rounded up to [`GRANULARITY`]), now in use.
    fn take(&mut self, size: usize) -> Option<DevicePtr> {
        let size = size.checked_next_multiple_of(GRANULARITY)?;
        let (&start, &len) = self.free.iter().find(|&(_, &len)| len >= size)?;
        self.free.remove(&start);
        if len > size {
            self.free.insert(start + size as DevicePtr, len - size);
        }
        Some(start)
    }

    /// Frees a range from `take(size)`, merged with the free ranges beside it.
    fn give_back(&mut self, ptr: DevicePtr, size: usize) {
        let mut start = ptr;
        let mut len = size.next_multiple_of(GRANULARITY);
        if let Some((&before, &before_len)) = self.free.range(..ptr).next_back()
            && before + before_len as DevicePtr == ptr
        {
            self.free.remove(&before);
            start = before;
            len += before_len;
        }
        let end = ptr + size.next_multiple_of(GRANULARITY) as DevicePtr;
        if let Some(after_len) = self.free.remove(&end) {
            len += after_len;
        }
        self.free.insert(start, len);
    }
}

impl Drop for AddressSpace {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours; its backend is being dropped, and with it the allocator
        // that was the only one handing out its addresses.
        unsafe { libc::munmap(self.mapping as *mut libc::c_void, self.mapping_len) };
        SPACE_HELD.fetch_sub(self.mapping_len, Ordering::Relaxed);
    }
}

/// The cpu device's capacity: `GPUMEM_CPU_CAPACITY` (bytes, or with a KiB/MiB/GiB suffix) or the
/// machine's physical memory. Read once per process.
pub fn cpu_capacity() -> Result<usize> {
    static CAPACITY: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    CAPACITY
        .get_or_init(|| match std::env::var("GPUMEM_CPU_CAPACITY") {
            Ok(text) => crate::format::parse_bytes(&text)
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    format!("{text:?} is not a size; use bytes or a KiB/MiB/GiB suffix, e.g. 8GiB")
                }),
            Err(_) => Ok(physical_memory()),
        })
        .clone()
        .map_err(|reason| Error::BadSetting {
            setting: "GPUMEM_CPU_CAPACITY".into(),
            reason,
        })
}

/// Whether the cpu device's streams run work late from the start: `GPUMEM_CPU_STREAMS=late`
/// (`at-once`, the default when unset, runs it when queued). Read once per process.
pub fn cpu_streams_late() -> Result<bool> {
    static LATE: OnceLock<std::result::Result<bool, String>> = OnceLock::new();
    LATE.get_or_init(|| match std::env::var("GPUMEM_CPU_STREAMS") {
        Err(_) => Ok(false),
        Ok(text) => match text.trim() {
            "late" => Ok(true),
            "at-once" | "" => Ok(false),
            _ => Err(format!(
                "{text:?} is not a stream mode; use `late` (as a GPU runs work) or `at-once`"
            )),
        },
    })
    .clone()
    .map_err(|reason| Error::BadSetting {
        setting: "GPUMEM_CPU_STREAMS".into(),
        reason,
    })
}

/// The machine's physical memory in bytes.
pub fn physical_memory() -> usize {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && page_size > 0 {
        pages as usize * page_size as usize
    } else {
        8 << 30
    }
}

fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Claims `size` bytes of the capacity; false when that would pass it.
fn claim(reserved: &AtomicUsize, capacity: usize, size: usize) -> bool {
    reserved
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
            r.checked_add(size).filter(|&total| total <= capacity)
        })
        .is_ok()
}

/// Below this many bytes zeroing writes them; from it on, whole pages are handed back instead.
const DISCARD_FROM: usize = 64 << 10;

/// Zeros `start..start + n` of the device's mapping. Large ranges hand their whole pages back to
/// the kernel (`MADV_DONTNEED` on a private anonymous mapping: the next touch reads a fresh zero
/// page), so a workload that allocates hundreds of MiB and never reads them costs no page faults,
/// as on a GPU where `cudaMemset` runs on the device.
///
/// # Safety
/// The caller owns the range, and it lies in the device's mapping.
unsafe fn zero(start: usize, n: usize) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let first = start.next_multiple_of(page);
    let last = (start + n) / page * page;
    // SAFETY (all three): inside the caller's range; madvise only on whole pages of it, which
    // no other block shares.
    if n >= DISCARD_FROM
        && last > first
        && unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_DONTNEED,
            )
        } == 0
    {
        unsafe {
            std::ptr::write_bytes(start as *mut u8, 0, first - start);
            std::ptr::write_bytes(last as *mut u8, 0, start + n - last);
        }
    } else {
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, n) };
    }
}

impl RawMemory for CpuBackend {
    fn reserve(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        if !claim(&self.reserved, self.capacity, size) {
            return Err(ReserveError::OutOfMemory);
        }
        let ptr = match self.place(size) {
            Ok(ptr) => ptr,
            Err(e) => {
                self.reserved.fetch_sub(size, Ordering::SeqCst);
                return Err(e);
            }
        };
        // SAFETY: the range was just placed in our PROT_NONE mapping and no one else uses it;
        // making it readable and writable commits its pages, zeros, on first touch.
        let rc = unsafe {
            libc::mprotect(
                ptr as *mut libc::c_void,
                size,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            self.unplace(ptr, size);
            self.reserved.fetch_sub(size, Ordering::SeqCst);
            return Err(ReserveError::OutOfMemory);
        }
        Ok(ptr)
    }

    unsafe fn release(&self, ptr: DevicePtr, size: usize) {
        self.streams.run_all();
        // SAFETY: the caller guarantees ptr came from reserve(size) and is unused: its pages are
        // dropped (the next reserve of the range reads zeros) and it becomes inaccessible again.
        unsafe {
            libc::madvise(ptr as *mut libc::c_void, size, libc::MADV_DONTNEED);
            libc::mprotect(ptr as *mut libc::c_void, size, libc::PROT_NONE);
        }
        self.unplace(ptr, size);
        self.reserved.fetch_sub(size, Ordering::SeqCst);
    }

    fn mem_get_info(&self) -> Result<(usize, usize)> {
        let reserved = self.reserved.load(Ordering::SeqCst);
        Ok((self.capacity.saturating_sub(reserved), self.capacity))
    }

    fn reserve_address_space(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        // Inside the device's own range, so that expandable segments too get the same addresses
        // on every run. No pages are accessible until `map`.
        self.place(size)
    }

    unsafe fn release_address_space(&self, ptr: DevicePtr, size: usize) {
        // The caller guarantees the range came from reserve_address_space(size) and that no page
        // of it is mapped: it is inaccessible already.
        self.unplace(ptr, size);
    }

    unsafe fn map(&self, ptr: DevicePtr, size: usize) -> std::result::Result<u64, ReserveError> {
        if !claim(&self.reserved, self.capacity, size) {
            return Err(ReserveError::OutOfMemory);
        }
        // SAFETY: the range lies in our PROT_NONE mapping (the caller's guarantee); making it
        // readable and writable commits its pages on first touch.
        let rc = unsafe {
            libc::mprotect(
                ptr as *mut libc::c_void,
                size,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            self.reserved.fetch_sub(size, Ordering::SeqCst);
            return Err(ReserveError::OutOfMemory);
        }
        Ok(0)
    }

    unsafe fn unmap(&self, pages: &[MappedPage], stream: Option<RawStream>) {
        // As the cuda backend: the segment's stream's work (and what it waits for), or all.
        match stream {
            Some(s) => self.streams.run_stream(s.0),
            None => self.streams.run_all(),
        }
        for page in pages {
            let (ptr, size) = (page.ptr as *mut libc::c_void, page.size);
            // SAFETY: the caller guarantees the page was mapped by `map` and is unused: its
            // memory is dropped (the next map reads zeros) and it becomes inaccessible again.
            unsafe {
                libc::madvise(ptr, size, libc::MADV_DONTNEED);
                libc::mprotect(ptr, size, libc::PROT_NONE);
            }
            self.reserved.fetch_sub(size, Ordering::SeqCst);
        }
    }
}

impl DeviceBackend for CpuBackend {
    fn properties(&self) -> Result<DeviceProperties> {
        Ok(DeviceProperties {
            name: cpu_model_name(),
            total_memory: self.capacity as u64,
            multi_processor_count: std::thread::available_parallelism()
                .map_or(1, |n| n.get() as u32),
            compute_capability: (0, 0),
        })
    }

    fn create_stream(&self) -> Result<RawStream> {
        let mut free = self.free_streams.lock().unwrap_or_else(|p| p.into_inner());
        Ok(RawStream(free.pop_first().unwrap_or_else(|| {
            self.next_stream.fetch_add(1, Ordering::Relaxed)
        })))
    }

    fn destroy_stream(&self, stream: RawStream) {
        self.streams.remove(stream.0);
        let mut free = self.free_streams.lock().unwrap_or_else(|p| p.into_inner());
        free.insert(stream.0);
    }

    fn synchronize(&self) -> Result<()> {
        self.streams.run_all();
        Ok(())
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        self.streams.run_stream(stream.0);
        Ok(())
    }

    unsafe fn memset_zero(&self, dst: DevicePtr, n: usize, stream: RawStream) -> Result<()> {
        self.streams.run_stream(stream.0);
        // SAFETY: the caller owns dst..dst+n.
        unsafe { zero(dst as usize, n) };
        Ok(())
    }

    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges are valid for n bytes until the copy runs.
        unsafe { self.copy(dst as usize, src as usize, n, stream, asynchronous) };
        Ok(())
    }

    unsafe fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()> {
        // SAFETY: as above.
        unsafe { self.copy(dst as usize, src as usize, n, stream, asynchronous) };
        Ok(())
    }

    unsafe fn copy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()> {
        // SAFETY: as above.
        unsafe { self.copy(dst as usize, src as usize, n, stream, asynchronous) };
        Ok(())
    }

    fn record_event(&self, stream: RawStream, timing: bool) -> Result<RawEvent> {
        let recorded = timing.then(Instant::now);
        Ok(RawEvent::Host(recorded, self.streams.record(stream.0)))
    }

    fn stream_wait_event(&self, stream: RawStream, event: &RawEvent) -> Result<()> {
        self.streams.wait(stream.0, self.point(event)?);
        Ok(())
    }

    fn event_query(&self, event: &RawEvent) -> Result<bool> {
        Ok(self.streams.reached(self.point(event)?))
    }

    fn event_synchronize(&self, event: &RawEvent) -> Result<()> {
        self.streams.run_until(self.point(event)?);
        Ok(())
    }

    fn event_elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32> {
        match (start, end) {
            (RawEvent::Host(Some(a), _), RawEvent::Host(Some(b), _)) => {
                Ok(b.saturating_duration_since(*a).as_secs_f32() * 1000.0)
            }
            (RawEvent::Host(..), RawEvent::Host(..)) => Err(Error::Driver {
                op: "event_elapsed_ms",
                device: "cpu".into(),
                message: "an event recorded without timing cannot be timed (as \
                          cudaEventElapsedTime refuses an event made with cudaEventDisableTiming)"
                    .into(),
            }),
            _ => Err(foreign_event("event_elapsed_ms")),
        }
    }

    fn destroy_event(&self, _event: RawEvent) {}

    fn late_streams(&self) -> bool {
        self.streams.late()
    }

    fn set_late_streams(&self, late: bool) {
        self.streams.set_late(late);
    }

    fn host_alloc(&self, size: usize, pinning: Pinning) -> Result<HostAllocation> {
        let ptr = page_aligned_alloc(size)?;
        if let Pinning::Register { threads } = pinning {
            // SAFETY: ptr..ptr+size was just allocated, page-aligned, and is ours alone.
            unsafe { touch_pages(ptr, size, threads) };
        }
        // Page-locking may be refused (RLIMIT_MEMLOCK); the buffer then says it is pageable.
        // SAFETY: ptr..ptr+size is memory we own.
        let page_locked = unsafe { libc::mlock(ptr as *const libc::c_void, size.max(1)) } == 0;
        Ok(HostAllocation {
            ptr,
            page_locked,
            pinning,
        })
    }

    unsafe fn host_free(&self, alloc: HostAllocation, size: usize) {
        self.streams.run_all();
        // SAFETY: the caller guarantees alloc came from host_alloc(size).
        unsafe {
            if alloc.page_locked {
                libc::munlock(alloc.ptr as *const libc::c_void, size.max(1));
            }
            page_aligned_free(alloc.ptr, size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::zero;

    /// A private anonymous mapping of `len` bytes filled with `0xAB`, as the device's is.
    fn filled(len: usize) -> *mut u8 {
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        unsafe {
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(ptr, libc::MAP_FAILED);
            std::ptr::write_bytes(ptr as *mut u8, 0xAB, len);
            ptr as *mut u8
        }
    }

    #[test]
    fn zeroing_clears_exactly_the_range_whether_pages_are_discarded_or_written() {
        let len = 1 << 20;
        // Unaligned at both ends, above and below the size from which pages are discarded.
        for (offset, n) in [(100, 600_000), (4096, 8192), (513, 1000), (0, len)] {
            let base = filled(len);
            // SAFETY: offset..offset+n lies in the mapping, which this test alone uses.
            let bytes = unsafe {
                zero(base as usize + offset, n);
                std::slice::from_raw_parts(base, len)
            };
            assert!(
                bytes[..offset].iter().all(|&b| b == 0xAB),
                "before {offset}"
            );
            assert!(
                bytes[offset..offset + n].iter().all(|&b| b == 0),
                "in {offset}+{n}"
            );
            assert!(
                bytes[offset + n..].iter().all(|&b| b == 0xAB),
                "after {offset}+{n}"
            );
            // SAFETY: the mapping is ours and no longer used.
            unsafe { libc::munmap(base as *mut libc::c_void, len) };
        }
    }
}
