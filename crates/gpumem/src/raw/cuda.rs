//! The raw layer over the CUDA driver: one device's memory, streams, copies, events and pinned host
//! memory, straight through `cuMemAlloc`, `cuMemcpy*Async`, `cuEvent*` and friends.
//!
//! No caching here: every `reserve` is a `cuMemAlloc` and every `release` a `cuMemFree` (the caching
//! allocator sits on top). Handles cross this layer as plain integers, and the device's primary
//! context is bound to the calling thread before every driver call, so any thread may call in.

use crate::error::{Error, Result};
use crate::raw::backend::{
    DeviceBackend, DeviceProperties, DevicePtr, HostAllocation, MappedPage, Pinning, RawEvent,
    RawMemory, RawStream, ReserveError, page_aligned_alloc, page_aligned_free, touch_pages,
};
use crate::raw::driver;
use cudarc::driver::{CudaContext, DriverError, result, sys};
use std::sync::{Arc, Mutex};

/// One CUDA device, reached through the driver API with its primary context.
#[derive(Debug)]
pub struct CudaBackend {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    /// Events made without timing (`CU_EVENT_DISABLE_TIMING`) and destroyed by their user: the
    /// next `record_event` without timing records one of them again, as torch pools its events
    /// per device instead of creating one per use.
    idle_events: Mutex<Vec<u64>>,
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`, read once when opened (false
    /// where the driver cannot say).
    virtual_memory_management: bool,
}

// Everything a backend holds is an ordinal and an `Arc` of a thread-safe context.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CudaBackend>();
};

impl CudaBackend {
    /// Opens device `cuda:{ordinal}` (retains its primary context).
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        if !driver::is_available() {
            return Err(Error::CudaUnavailable {
                reason: driver::unavailable_reason()
                    .unwrap_or_else(|| "the CUDA driver could not be used".to_string()),
            });
        }
        let count = driver::device_count();
        if ordinal >= count {
            return Err(Error::NoSuchDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| {
            driver::driver_error("cuDevicePrimaryCtxRetain", &format!("cuda:{ordinal}"), e)
        })?;
        // SAFETY: the device is the one the context was just made for.
        let virtual_memory_management = unsafe {
            result::device::get_attribute(
                ctx.cu_device(),
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            )
        }
        .is_ok_and(|supported| supported != 0);
        Ok(CudaBackend {
            ordinal,
            ctx,
            idle_events: Mutex::new(Vec::new()),
            virtual_memory_management,
        })
    }

    /// The device ordinal (`N` in `cuda:N`).
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The primary context, for libraries that need one (cuBLAS, NVRTC modules).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Turns a driver failure into the crate's error for this device, with what to do about it.
    fn driver_error(&self, op: &'static str, err: DriverError) -> Error {
        driver::driver_error(op, &format!("cuda:{}", self.ordinal), err)
    }

    /// Makes the primary context current on the calling thread.
    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.driver_error("cuCtxSetCurrent", e))
    }

    /// Runs `f` with the context bound, turning a failure into an error naming `op`.
    fn call<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T> {
        self.bind()?;
        f().map_err(|e| self.driver_error(op, e))
    }

    /// The error for a host-side event handed to the cuda backend.
    fn host_event_error(&self, op: &'static str) -> Error {
        Error::Driver {
            op,
            device: format!("cuda:{}", self.ordinal),
            message: "a host (cpu) event was passed to the cuda backend; events belong to the device that recorded them"
                .to_string(),
        }
    }

    /// The `CUevent` inside a raw event, or an error for a host event.
    fn cu_event(&self, event: &RawEvent, op: &'static str) -> Result<sys::CUevent> {
        match event {
            RawEvent::Cuda(handle, _) => Ok(*handle as usize as sys::CUevent),
            RawEvent::Host(..) => Err(self.host_event_error(op)),
        }
    }

    /// Waits for `stream` unless the caller asked for an asynchronous operation.
    fn finish(&self, stream: sys::CUstream, asynchronous: bool) -> Result<()> {
        if asynchronous {
            return Ok(());
        }
        // SAFETY: `stream` is null or a live stream of this context (the caller's guarantee).
        unsafe { result::stream::synchronize(stream) }
            .map_err(|e| self.driver_error("cuStreamSynchronize", e))
    }
}

/// The `CUstream` of a raw stream (`RawStream(0)` is the legacy default stream, null).
fn cu_stream(stream: RawStream) -> sys::CUstream {
    stream.0 as usize as sys::CUstream
}

impl RawMemory for CudaBackend {
    fn reserve(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        self.bind().map_err(ReserveError::Other)?;
        // SAFETY: plain cuMemAlloc; the memory is handed out uninitialised, as the trait allows.
        match unsafe { result::malloc_sync(size) } {
            Ok(ptr) => Ok(ptr as DevicePtr),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Err(ReserveError::OutOfMemory)
            }
            Err(e) => Err(ReserveError::Other(self.driver_error("cuMemAlloc", e))),
        }
    }

    unsafe fn release(&self, ptr: DevicePtr, _size: usize) {
        if self.bind().is_err() {
            return;
        }
        // SAFETY: `ptr` came from `reserve` (cuMemAlloc) and is no longer used (the caller's
        // guarantee). A failure here cannot be reported through this signature.
        let _ = unsafe { result::free_sync(ptr as sys::CUdeviceptr) };
    }

    fn mem_get_info(&self) -> Result<(usize, usize)> {
        self.call("cuMemGetInfo", result::mem_get_info)
    }

    fn virtual_memory_management(&self) -> bool {
        self.virtual_memory_management
    }

    fn reserve_address_space(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        self.bind().map_err(ReserveError::Other)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: reserves virtual address space only; `ptr` is written by the driver.
        unsafe { sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0) }
            .result()
            .map_err(|e| ReserveError::Other(self.driver_error("cuMemAddressReserve", e)))?;
        Ok(ptr as DevicePtr)
    }

    unsafe fn release_address_space(&self, ptr: DevicePtr, size: usize) {
        if self.bind().is_err() {
            return;
        }
        // SAFETY: the caller guarantees the range came from cuMemAddressReserve and is unmapped.
        // A failure here cannot be reported through this signature.
        let _ = unsafe { sys::cuMemAddressFree(ptr as sys::CUdeviceptr, size) };
    }

    unsafe fn map(&self, ptr: DevicePtr, size: usize) -> std::result::Result<u64, ReserveError> {
        self.bind().map_err(ReserveError::Other)?;
        let device = self.ctx.cu_device();
        // SAFETY: a plain C struct; all-zero is its "nothing requested" value.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `prop` describes memory on this context's device; `handle` is written.
        match unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) } {
            sys::CUresult::CUDA_SUCCESS => {}
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => return Err(ReserveError::OutOfMemory),
            other => {
                return Err(ReserveError::Other(
                    self.driver_error("cuMemCreate", DriverError(other)),
                ));
            }
        }
        let undo = |op: &'static str, e: DriverError| {
            // SAFETY: the handle was created above and is not mapped (or was just unmapped).
            let _ = unsafe { sys::cuMemRelease(handle) };
            ReserveError::Other(self.driver_error(op, e))
        };
        // SAFETY: the range is reserved address space (the caller's guarantee), unmapped.
        unsafe { sys::cuMemMap(ptr as sys::CUdeviceptr, size, 0, handle, 0) }
            .result()
            .map_err(|e| undo("cuMemMap", e))?;
        // SAFETY: a plain C struct; every field is set below.
        let mut access: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
        access.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device;
        access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        // SAFETY: the range was just mapped.
        if let Err(e) =
            unsafe { sys::cuMemSetAccess(ptr as sys::CUdeviceptr, size, &access, 1) }.result()
        {
            // SAFETY: the range was mapped above and nobody has seen it.
            let _ = unsafe { sys::cuMemUnmap(ptr as sys::CUdeviceptr, size) };
            return Err(undo("cuMemSetAccess", e));
        }
        Ok(handle as u64)
    }

    unsafe fn unmap(&self, pages: &[MappedPage], stream: Option<RawStream>) {
        if pages.is_empty() || self.bind().is_err() {
            return;
        }
        // cuMemUnmap does not wait for work that may still use the range, so wait first, once
        // for the whole range, as torch's `unmapHandles` does: for the segment's stream (work on
        // other streams reached its blocks through `record_stream`, whose events the allocator
        // has waited for already), or the whole context where the stream is gone. Failures
        // cannot be reported here.
        let _ = match stream {
            // SAFETY: the caller guarantees the stream is alive.
            Some(s) => unsafe { result::stream::synchronize(cu_stream(s)) },
            None => result::ctx::synchronize(),
        };
        for page in pages {
            // SAFETY: the caller guarantees each page and handle are one `map` call's, unused.
            unsafe {
                let _ = sys::cuMemUnmap(page.ptr as sys::CUdeviceptr, page.size);
                let _ = sys::cuMemRelease(page.handle as sys::CUmemGenericAllocationHandle);
            }
        }
    }
}

impl DeviceBackend for CudaBackend {
    fn properties(&self) -> Result<DeviceProperties> {
        let dev = self.ctx.cu_device();
        let attribute = |attrib: sys::CUdevice_attribute| -> Result<u32> {
            // SAFETY: `dev` is the device the context was made for.
            let value = unsafe { result::device::get_attribute(dev, attrib) }
                .map_err(|e| self.driver_error("cuDeviceGetAttribute", e))?;
            Ok(value.max(0) as u32)
        };
        let name = self.call("cuDeviceGetName", || result::device::get_name(dev))?;
        // SAFETY: as above.
        let total_memory = self.call("cuDeviceTotalMem", || unsafe {
            result::device::total_mem(dev)
        })?;
        use sys::CUdevice_attribute::{
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SMS,
        };
        Ok(DeviceProperties {
            name,
            total_memory: total_memory as u64,
            multi_processor_count: attribute(SMS)?,
            compute_capability: (attribute(MAJOR)?, attribute(MINOR)?),
        })
    }

    fn create_stream(&self) -> Result<RawStream> {
        let stream = self.call("cuStreamCreate", || {
            result::stream::create(result::stream::StreamKind::NonBlocking)
        })?;
        Ok(RawStream(stream as usize as u64))
    }

    fn destroy_stream(&self, stream: RawStream) {
        if stream.0 == 0 || self.bind().is_err() {
            return;
        }
        // SAFETY: the stream came from `create_stream` (the trait's contract). Work still queued
        // finishes first; the driver frees the stream afterwards. A failure cannot be reported.
        let _ = unsafe { result::stream::destroy(cu_stream(stream)) };
    }

    fn synchronize(&self) -> Result<()> {
        self.call("cuCtxSynchronize", result::ctx::synchronize)
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        // SAFETY: null or a stream from `create_stream` that is still alive.
        self.call("cuStreamSynchronize", || unsafe {
            result::stream::synchronize(cu_stream(stream))
        })
    }

    unsafe fn memset_zero(&self, dst: DevicePtr, n: usize, stream: RawStream) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let s = cu_stream(stream);
        // SAFETY: `dst..dst+n` is device memory owned by the caller (the function's contract).
        self.call("cuMemsetD8Async", || unsafe {
            result::memset_d8_async(dst, 0, n, s)
        })?;
        // Kept on purpose, though it makes every allocation wait for its stream (no kernel
        // overlaps host work; a kernel fault shows at the next allocation): side streams are
        // non-blocking, and `to_vec`, pinned copies into a fresh buffer and `Stream::alloc`'s
        // users rely on the fill having finished. Making the fill stream-ordered needs those
        // orders made explicit (waits or `record_stream`), checked on a GPU first; the cpu
        // device's late streams (`GPUMEM_CPU_STREAMS=late`) run the same contract.
        self.finish(s, false)
    }

    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let s = cu_stream(stream);
        // SAFETY: both ranges are valid for `n` bytes and `src` outlives an asynchronous copy
        // (the function's contract).
        self.call("cuMemcpyHtoDAsync", || unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), n, s).result()
        })?;
        self.finish(s, asynchronous)
    }

    unsafe fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let s = cu_stream(stream);
        // SAFETY: as for `copy_htod`, with `dst` the host side.
        self.call("cuMemcpyDtoHAsync", || unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, n, s).result()
        })?;
        self.finish(s, asynchronous)
    }

    unsafe fn copy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        n: usize,
        stream: RawStream,
        asynchronous: bool,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let s = cu_stream(stream);
        // SAFETY: both ranges are device memory valid for `n` bytes (the function's contract).
        self.call("cuMemcpyDtoDAsync", || unsafe {
            result::memcpy_dtod_async(dst, src, n, s)
        })?;
        self.finish(s, asynchronous)
    }

    fn record_event(&self, stream: RawStream, timing: bool) -> Result<RawEvent> {
        let idle = if timing {
            None
        } else {
            self.idle_events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop()
        };
        let event = match idle {
            Some(handle) => handle as usize as sys::CUevent,
            None => {
                let flags = if timing {
                    sys::CUevent_flags::CU_EVENT_DEFAULT
                } else {
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
                };
                self.call("cuEventCreate", || result::event::create(flags))?
            }
        };
        self.bind()?;
        // SAFETY: `event` is alive and ours (new, or idle in the pool); the stream is null or
        // alive. Recording an event again replaces what it marked.
        if let Err(e) = unsafe { result::event::record(event, cu_stream(stream)) } {
            // SAFETY: the event is ours and was never handed out.
            let _ = unsafe { result::event::destroy(event) };
            return Err(self.driver_error("cuEventRecord", e));
        }
        Ok(RawEvent::Cuda(event as usize as u64, timing))
    }

    fn stream_wait_event(&self, stream: RawStream, event: &RawEvent) -> Result<()> {
        let ev = self.cu_event(event, "cuStreamWaitEvent")?;
        // SAFETY: the event came from `record_event` and is alive; the stream is null or alive.
        self.call("cuStreamWaitEvent", || unsafe {
            result::stream::wait_event(
                cu_stream(stream),
                ev,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    }

    fn event_query(&self, event: &RawEvent) -> Result<bool> {
        let ev = self.cu_event(event, "cuEventQuery")?;
        self.bind()?;
        // SAFETY: the event came from `record_event` and has not been destroyed.
        match unsafe { result::event::query(ev) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(self.driver_error("cuEventQuery", e)),
        }
    }

    fn event_synchronize(&self, event: &RawEvent) -> Result<()> {
        let ev = self.cu_event(event, "cuEventSynchronize")?;
        // SAFETY: as above.
        self.call("cuEventSynchronize", || unsafe {
            result::event::synchronize(ev)
        })
    }

    fn event_elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32> {
        let a = self.cu_event(start, "cuEventElapsedTime")?;
        let b = self.cu_event(end, "cuEventElapsedTime")?;
        // SAFETY: both events came from `record_event` (with timing) and are alive.
        self.call("cuEventElapsedTime", || unsafe {
            result::event::elapsed(a, b)
        })
    }

    fn destroy_event(&self, event: RawEvent) {
        let RawEvent::Cuda(handle, timing) = event else {
            return; // a host event owns nothing
        };
        if !timing {
            // Back to the pool: whoever records it next replaces what it marks; the driver keeps
            // an event's pending record working until it completes.
            let mut idle = self.idle_events.lock().unwrap_or_else(|p| p.into_inner());
            idle.push(handle);
            return;
        }
        if self.bind().is_err() {
            return;
        }
        // SAFETY: the event came from `record_event` and is destroyed once (it is moved in). An
        // event still pending is released by the driver when it completes.
        let _ = unsafe { result::event::destroy(handle as usize as sys::CUevent) };
    }

    fn host_alloc(&self, size: usize, pinning: Pinning) -> Result<HostAllocation> {
        self.bind()?;
        let threads = match pinning {
            Pinning::HostAlloc => return self.host_alloc_pinned(size),
            Pinning::Register { threads } => threads,
        };
        // torch's `allocWithCudaHostRegister`: ordinary memory, its pages touched (on several
        // threads), then page-locked in place, which holds the driver's lock for less time.
        let ptr = page_aligned_alloc(size)?;
        // SAFETY: ptr..ptr+size was just allocated, page-aligned, and is ours alone.
        unsafe { touch_pages(ptr, size, threads) };
        let fail = |reason: String| {
            // SAFETY: allocated above; the driver does not hold it.
            unsafe { page_aligned_free(ptr, size) };
            Error::HostAlloc { size, reason }
        };
        // SAFETY: ptr..ptr+size is memory we own; flags 0 is cudaHostRegisterDefault.
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), size.max(1), 0) }
            .result()
            .map_err(|e| {
                fail(format!(
                    "cuMemHostRegister failed (pinned_use_cuda_host_register:True): {}",
                    driver::explain_driver_error(e)
                ))
            })?;
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: the memory was just registered.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, ptr.cast(), 0) };
        if mapped != sys::CUresult::CUDA_SUCCESS || device_ptr != ptr as sys::CUdeviceptr {
            // SAFETY: registered above, not used by anyone.
            let _ = unsafe { sys::cuMemHostUnregister(ptr.cast()) };
            // torch 2.15 refuses the same way (`registerPages`).
            return Err(fail(
                "the host and device addresses of registered memory differ; set \
                 pinned_use_cuda_host_register:False (the default)"
                    .to_string(),
            ));
        }
        Ok(HostAllocation {
            ptr,
            page_locked: true,
            pinning,
        })
    }

    unsafe fn host_free(&self, alloc: HostAllocation, size: usize) {
        if alloc.ptr.is_null() || self.bind().is_err() {
            return;
        }
        // SAFETY: the memory came from `host_alloc(size)` made as `alloc.pinning` says and is no
        // longer used (the caller's guarantee). A failure cannot be reported here.
        unsafe {
            match alloc.pinning {
                Pinning::HostAlloc => {
                    let _ = result::free_host(alloc.ptr.cast());
                }
                Pinning::Register { .. } => {
                    let _ = sys::cuMemHostUnregister(alloc.ptr.cast());
                    page_aligned_free(alloc.ptr, size);
                }
            }
        }
    }
}

impl CudaBackend {
    /// Page-locked host memory from `cuMemHostAlloc` (the context is bound).
    fn host_alloc_pinned(&self, size: usize) -> Result<HostAllocation> {
        // Flags 0: plain page-locked memory (not write-combined, which is slow to read from the
        // host); with unified addressing it is usable from every context. A 0-byte request still
        // gets a real allocation so that `host_free` always has something to free.
        // SAFETY: plain cuMemHostAlloc; the memory is handed out uninitialised.
        match unsafe { result::malloc_host(size.max(1), 0) } {
            Ok(ptr) => Ok(HostAllocation {
                ptr: ptr.cast(),
                page_locked: true,
                pinning: Pinning::HostAlloc,
            }),
            Err(e) => Err(Error::HostAlloc {
                size,
                reason: format!("cuMemHostAlloc failed: {}", driver::explain_driver_error(e)),
            }),
        }
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let idle = std::mem::take(
            self.idle_events
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if idle.is_empty() || self.bind().is_err() {
            return;
        }
        for handle in idle {
            // SAFETY: pooled events are alive, ours, and no one holds them.
            let _ = unsafe { result::event::destroy(handle as usize as sys::CUevent) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_without_timing_come_back_from_the_devices_pool() {
        if !driver::is_available() {
            eprintln!("skipped: no CUDA device");
            return;
        }
        let backend = CudaBackend::new(0).unwrap();
        let first = backend.record_event(RawStream(0), false).unwrap();
        let RawEvent::Cuda(handle, false) = first else {
            panic!("an untimed cuda event: {first:?}");
        };
        backend.destroy_event(first);
        let again = backend.record_event(RawStream(0), false).unwrap();
        assert!(
            matches!(again, RawEvent::Cuda(h, false) if h == handle),
            "{again:?}"
        );
        backend.event_synchronize(&again).unwrap();
        let timed = backend.record_event(RawStream(0), true).unwrap();
        assert!(matches!(timed, RawEvent::Cuda(h, true) if h != handle));
        let err = backend.event_elapsed_ms(&again, &timed).unwrap_err();
        assert!(err.to_string().contains("cuEventElapsedTime"), "{err}");
        backend.destroy_event(again);
        backend.destroy_event(timed);
    }

    #[test]
    fn unmap_waits_for_the_segments_stream_before_the_page_goes() {
        if !driver::is_available() {
            eprintln!("skipped: no CUDA device");
            return;
        }
        let backend = CudaBackend::new(0).unwrap();
        let stream = backend.create_stream().unwrap();
        let page = 2 << 20;
        let space = backend.reserve_address_space(page).unwrap();
        // SAFETY: the range was just reserved and is not mapped.
        let handle = unsafe { backend.map(space, page) }.unwrap();
        // Work on the segment's stream that uses the page, queued and not waited for.
        let half = (page / 2) as u64;
        for _ in 0..200 {
            // SAFETY: both halves lie in the page mapped above.
            unsafe { backend.copy_dtod(space + half, space, page / 2, stream, true) }.unwrap();
        }
        let queued = backend.record_event(stream, false).unwrap();
        let pages = [MappedPage {
            ptr: space,
            size: page,
            handle,
        }];
        // SAFETY: the page came from `map`; only the stream's queued work uses it, and unmap
        // waits for that stream.
        unsafe { backend.unmap(&pages, Some(stream)) };
        assert!(
            backend.event_query(&queued).unwrap(),
            "the page was unmapped before the work queued on its stream had finished"
        );
        backend.destroy_event(queued);
        backend.stream_synchronize(stream).unwrap();
        // SAFETY: reserved above; nothing of it is mapped any more.
        unsafe { backend.release_address_space(space, page) };
        backend.destroy_stream(stream);
    }

    #[test]
    fn a_gpu_that_can_run_the_suite_reports_virtual_memory_management() {
        if !driver::is_available() {
            eprintln!("skipped: no CUDA device");
            return;
        }
        // Every GPU the suite runs on (H100, H200) supports it; a device without it would make
        // expandable_segments:True fail plainly instead of mapping pages.
        assert!(CudaBackend::new(0).unwrap().virtual_memory_management());
    }

    #[test]
    fn new_fails_cleanly_without_cuda() {
        if driver::is_available() {
            return;
        }
        let err = CudaBackend::new(0).unwrap_err();
        assert!(matches!(err, Error::CudaUnavailable { .. }), "{err}");
        assert!(err.to_string().contains("CUDA"), "{err}");
    }

    #[test]
    fn a_bad_ordinal_is_no_such_device() {
        if !driver::is_available() {
            return;
        }
        let err = CudaBackend::new(driver::device_count()).unwrap_err();
        assert!(matches!(err, Error::NoSuchDevice { .. }), "{err}");
    }
}
