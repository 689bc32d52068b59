//! The raw layer over host memory: the `cpu` device, a stand-in GPU with a fixed capacity.
//!
//! Every operation is synchronous, so streams are just names and events are complete when recorded.

use crate::backend::{
    DeviceBackend, DeviceProperties, DevicePtr, HostAllocation, RawEvent, RawMemory, RawStream,
    ReserveError,
};
use crate::error::{Error, Result};
use std::alloc::Layout;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Alignment of reserved segments (CUDA's is 256 B; every block size is a multiple of 512 B).
const SEGMENT_ALIGN: usize = 512;

/// The cpu device's raw memory.
pub struct CpuBackend {
    capacity: usize,
    reserved: AtomicUsize,
    next_stream: AtomicU64,
}

impl CpuBackend {
    /// A backend that lets at most `capacity` bytes be reserved at once.
    pub fn new(capacity: usize) -> CpuBackend {
        CpuBackend {
            capacity,
            reserved: AtomicUsize::new(0),
            next_stream: AtomicU64::new(1),
        }
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

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, SEGMENT_ALIGN).expect("segment sizes fit a Layout")
}

impl RawMemory for CpuBackend {
    fn reserve(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        let claimed = self
            .reserved
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                r.checked_add(size).filter(|&total| total <= self.capacity)
            });
        if claimed.is_err() || Layout::from_size_align(size, SEGMENT_ALIGN).is_err() {
            return Err(ReserveError::OutOfMemory);
        }
        // SAFETY: size is non-zero (the allocator never reserves 0 bytes).
        let ptr = unsafe { std::alloc::alloc(layout(size)) };
        if ptr.is_null() {
            self.reserved.fetch_sub(size, Ordering::SeqCst);
            return Err(ReserveError::OutOfMemory);
        }
        Ok(ptr as DevicePtr)
    }

    unsafe fn release(&self, ptr: DevicePtr, size: usize) {
        // SAFETY: the caller guarantees ptr came from reserve(size).
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout(size)) };
        self.reserved.fetch_sub(size, Ordering::SeqCst);
    }

    fn mem_get_info(&self) -> Result<(usize, usize)> {
        let reserved = self.reserved.load(Ordering::SeqCst);
        Ok((self.capacity.saturating_sub(reserved), self.capacity))
    }

    fn reserve_address_space(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        // SAFETY: a fresh anonymous mapping that no one else knows; PROT_NONE with NORESERVE
        // takes address space only, no memory (and does not count against RLIMIT_DATA).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(ReserveError::Other(Error::HostAlloc {
                size,
                reason: format!(
                    "mmap of address space for an expandable segment failed: {}",
                    std::io::Error::last_os_error()
                ),
            }));
        }
        Ok(ptr as DevicePtr)
    }

    unsafe fn release_address_space(&self, ptr: DevicePtr, size: usize) {
        // SAFETY: the caller guarantees the range came from reserve_address_space(size).
        unsafe { libc::munmap(ptr as *mut libc::c_void, size) };
    }

    unsafe fn map(&self, ptr: DevicePtr, size: usize) -> std::result::Result<u64, ReserveError> {
        let claimed = self
            .reserved
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                r.checked_add(size).filter(|&total| total <= self.capacity)
            });
        if claimed.is_err() {
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

    unsafe fn unmap(&self, ptr: DevicePtr, size: usize, _handle: u64) {
        // SAFETY: the caller guarantees the range was mapped by `map` and is unused: its pages
        // are dropped (the next map reads zeros) and it becomes inaccessible again.
        unsafe {
            libc::madvise(ptr as *mut libc::c_void, size, libc::MADV_DONTNEED);
            libc::mprotect(ptr as *mut libc::c_void, size, libc::PROT_NONE);
        }
        self.reserved.fetch_sub(size, Ordering::SeqCst);
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
        Ok(RawStream(self.next_stream.fetch_add(1, Ordering::Relaxed)))
    }

    fn destroy_stream(&self, _stream: RawStream) {}

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn stream_synchronize(&self, _stream: RawStream) -> Result<()> {
        Ok(())
    }

    unsafe fn memset_zero(&self, dst: DevicePtr, n: usize, _stream: RawStream) -> Result<()> {
        // SAFETY: the caller owns dst..dst+n.
        unsafe { std::ptr::write_bytes(dst as *mut u8, 0, n) };
        Ok(())
    }

    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        n: usize,
        _s: RawStream,
        _a: bool,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges are valid for n bytes.
        unsafe { std::ptr::copy(src, dst as *mut u8, n) };
        Ok(())
    }

    unsafe fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        n: usize,
        _s: RawStream,
        _a: bool,
    ) -> Result<()> {
        // SAFETY: as above.
        unsafe { std::ptr::copy(src as *const u8, dst, n) };
        Ok(())
    }

    unsafe fn copy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        n: usize,
        _s: RawStream,
        _a: bool,
    ) -> Result<()> {
        // SAFETY: as above.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
        Ok(())
    }

    fn record_event(&self, _stream: RawStream) -> Result<RawEvent> {
        Ok(RawEvent::Host(Instant::now()))
    }

    fn stream_wait_event(&self, _stream: RawStream, _event: &RawEvent) -> Result<()> {
        Ok(())
    }

    fn event_query(&self, _event: &RawEvent) -> Result<bool> {
        Ok(true)
    }

    fn event_synchronize(&self, _event: &RawEvent) -> Result<()> {
        Ok(())
    }

    fn event_elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32> {
        match (start, end) {
            (RawEvent::Host(a), RawEvent::Host(b)) => {
                Ok(b.saturating_duration_since(*a).as_secs_f32() * 1000.0)
            }
            _ => Err(Error::Driver {
                op: "event_elapsed_ms",
                device: "cpu".into(),
                message: "events from another device".into(),
            }),
        }
    }

    fn destroy_event(&self, _event: RawEvent) {}

    fn host_alloc(&self, size: usize) -> Result<HostAllocation> {
        let layout = Layout::from_size_align(size.max(1), 4096).map_err(|e| Error::HostAlloc {
            size,
            reason: e.to_string(),
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::HostAlloc {
                size,
                reason: "the system allocator refused".into(),
            });
        }
        // Page-locking may be refused (RLIMIT_MEMLOCK); the buffer then says it is pageable.
        // SAFETY: ptr..ptr+size is memory we own.
        let page_locked = unsafe { libc::mlock(ptr as *const libc::c_void, size.max(1)) } == 0;
        Ok(HostAllocation { ptr, page_locked })
    }

    unsafe fn host_free(&self, alloc: HostAllocation, size: usize) {
        // SAFETY: the caller guarantees alloc came from host_alloc(size).
        unsafe {
            if alloc.page_locked {
                libc::munlock(alloc.ptr as *const libc::c_void, size.max(1));
            }
            std::alloc::dealloc(
                alloc.ptr,
                Layout::from_size_align_unchecked(size.max(1), 4096),
            );
        }
    }
}
