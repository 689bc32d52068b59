//! `Device`: the handle learners hold, with torch.cuda's memory functions as methods.

use crate::error::{Error, Result};
use crate::memory::host_cache::{HostAllocator, HostMemoryStats};
use crate::memory::transfer::{TransferCounters, TransferStats};
use crate::policy::allocator::CachingAllocator;
use crate::policy::config::AllocatorConfig;
use crate::policy::history::Snapshot;
use crate::policy::stats::MemoryStats;
use crate::raw::backend::{
    DeviceBackend, DeviceProperties, DevicePtr, MappedPage, RawMemory, RawStream, ReserveError,
};
use crate::raw::cpu::{CpuBackend, cpu_capacity, cpu_streams_late, physical_memory};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

/// Which device: the host-memory stand-in or a CUDA GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// The `cpu` device (also named `cpu:0`): the same allocator over host memory.
    Cpu,
    /// `cpu:N` for N from 1 to [`MAX_CPU_DEVICES`]` - 1`: more cpu devices in the same process,
    /// each with its own caching allocator and statistics, as torch keeps one allocator state per
    /// GPU; the ranks of a [`crate::collective::ProcessGroup`] (`cpu:0` is [`DeviceKind::Cpu`]).
    CpuN(usize),
    /// `cuda:N`.
    Cuda(usize),
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::CpuN(n) => write!(f, "cpu:{n}"),
            DeviceKind::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A shared backend is a backend: the allocator and the buffers use the same one.
impl<T: RawMemory + ?Sized> RawMemory for Arc<T> {
    fn reserve(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        (**self).reserve(size)
    }
    unsafe fn release(&self, ptr: DevicePtr, size: usize) {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { (**self).release(ptr, size) }
    }
    fn mem_get_info(&self) -> Result<(usize, usize)> {
        (**self).mem_get_info()
    }
    fn virtual_memory_management(&self) -> bool {
        (**self).virtual_memory_management()
    }
    fn reserve_address_space(&self, size: usize) -> std::result::Result<DevicePtr, ReserveError> {
        (**self).reserve_address_space(size)
    }
    unsafe fn release_address_space(&self, ptr: DevicePtr, size: usize) {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { (**self).release_address_space(ptr, size) }
    }
    unsafe fn map(&self, ptr: DevicePtr, size: usize) -> std::result::Result<u64, ReserveError> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { (**self).map(ptr, size) }
    }
    unsafe fn unmap(&self, pages: &[MappedPage], stream: Option<RawStream>) {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { (**self).unmap(pages, stream) }
    }
}

pub(crate) struct DeviceInner {
    pub(crate) kind: DeviceKind,
    pub(crate) backend: Arc<dyn DeviceBackend>,
    pub(crate) allocator: CachingAllocator<Arc<dyn DeviceBackend>>,
    pub(crate) host: HostAllocator,
    pub(crate) transfers: TransferCounters,
    /// Pinned host blocks, copies and kernels, while `record_activity` is on.
    pub(crate) activity: crate::memory::activity::ActivityLog,
    /// The CUDA backend itself, for the compute layer (cuBLAS, NVRTC); `None` on cpu.
    pub(crate) cuda: Option<Arc<crate::raw::cuda::CudaBackend>>,
    /// A malformed setting found when the device was opened, reported by every allocation.
    setup_error: Option<(String, String)>,
    /// The next stream's [`StreamId`](crate::policy::allocator::StreamId) (0 is the default
    /// stream's).
    pub(crate) next_stream_id: AtomicU64,
}

/// A cheap, clonable handle to one device. Every handle to the same device shares one allocator.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.kind.fmt(f)
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.inner.kind)
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.inner.kind == other.inner.kind
    }
}

impl Eq for Device {}

/// How many times [`Device::by_name`] has been called in this process: an exercise told to build
/// the same choice without it is checked not to call it (`gpumem::testing::by_name_calls`).
static BY_NAME_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times [`Device::by_name`] has been called in this process.
pub(crate) fn by_name_calls() -> u64 {
    BY_NAME_CALLS.load(std::sync::atomic::Ordering::Relaxed)
}

thread_local! {
    /// Properties a test fed this thread ([`feed_properties`]), answered for every device.
    static FED_PROPERTIES: std::cell::RefCell<Option<DeviceProperties>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes [`Device::properties`] answer `properties` on this thread until the guard is dropped.
pub(crate) fn feed_properties(properties: DeviceProperties) -> FedProperties {
    let previous = FED_PROPERTIES.with(|fed| fed.replace(Some(properties)));
    FedProperties { previous }
}

/// Puts back what [`Device::properties`] answered before [`feed_properties`] when dropped.
pub(crate) struct FedProperties {
    previous: Option<DeviceProperties>,
}

impl Drop for FedProperties {
    fn drop(&mut self) {
        let previous = self.previous.take();
        FED_PROPERTIES.with(|fed| fed.replace(previous));
    }
}

/// How many cpu devices one process may open (`cpu`, `cpu:1`, ... `cpu:63`): the ZeRO paper's 64
/// GPUs. Each reserves its own range of address space on first use.
pub const MAX_CPU_DEVICES: usize = 64;

fn registry() -> &'static Mutex<HashMap<DeviceKind, Device>> {
    static REGISTRY: OnceLock<Mutex<HashMap<DeviceKind, Device>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl Device {
    /// The `cpu` device (always there).
    pub fn cpu() -> Device {
        Device::open(DeviceKind::Cpu).expect("the cpu device always opens")
    }

    /// `cpu:index`: the cpu device numbered `index` (0 is [`Device::cpu`]), with its own caching
    /// allocator and statistics; an error from [`MAX_CPU_DEVICES`] on.
    pub fn cpu_n(index: usize) -> Result<Device> {
        match index {
            0 => Ok(Device::cpu()),
            n if n < MAX_CPU_DEVICES => Device::open(DeviceKind::CpuN(n)),
            n => Err(Error::NoSuchCpuDevice {
                index: n,
                count: MAX_CPU_DEVICES,
            }),
        }
    }

    /// `cuda:ordinal`; an error when CUDA is unavailable or there is no such device.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        if crate::raw::driver::fed_status().is_some() {
            // A status a test fed: its errors, and never a device that is not really there.
            if let Some(reason) = crate::raw::driver::unavailable_reason() {
                return Err(Error::CudaUnavailable { reason });
            }
            let count = crate::raw::driver::device_count();
            if ordinal >= count {
                return Err(Error::NoSuchDevice { ordinal, count });
            }
            let real = crate::raw::driver::probe_device_count();
            if ordinal >= real {
                return Err(Error::CudaUnavailable {
                    reason: format!(
                        "cuda:{ordinal} exists only in the CUDA status a test fed \
                         (gpumem::testing::with_cuda_status); this machine has {real} CUDA \
                         device(s)"
                    ),
                });
            }
        }
        Device::open(DeviceKind::Cuda(ordinal))
    }

    /// `cuda:0` when the CUDA driver, cuBLAS and NVRTC all load, else `cpu`; where the driver
    /// works but a library does not, the reason is printed once, on stderr
    /// ([`auto_cpu_reason`](crate::raw::driver::auto_cpu_reason) gives it).
    pub fn best() -> Device {
        match crate::raw::driver::auto_cpu_reason() {
            None => {
                if let Ok(dev) = Device::cuda(0) {
                    return dev;
                }
            }
            Some(reason) if crate::raw::driver::is_available() => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| eprintln!("gpumem: using the cpu device: {reason}"));
            }
            Some(_) => {}
        }
        Device::cpu()
    }

    /// The device named by `GPUMEM_DEVICE` (`auto`, `cpu`, `cuda`, `cuda:N`; unset means `auto`).
    /// Asking for cuda where there is none is an error, never a silent fallback.
    pub fn from_env() -> Result<Device> {
        match std::env::var("GPUMEM_DEVICE") {
            Ok(name) => Device::by_name(&name),
            Err(_) => Ok(Device::best()),
        }
    }

    /// The device for a name: `auto`, `cpu` (= `cpu:0`), `cpu:N`, `cuda` (= `cuda:0`) or `cuda:N`.
    pub fn by_name(name: &str) -> Result<Device> {
        BY_NAME_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let trimmed = name.trim();
        let bad = || Error::BadDeviceName {
            value: name.to_string(),
        };
        match trimmed.to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Device::best()),
            "cpu" => Ok(Device::cpu()),
            "cuda" => Device::cuda(0),
            other => {
                if let Some(n) = other.strip_prefix("cpu:") {
                    return Device::cpu_n(n.parse().map_err(|_| bad())?);
                }
                let n = other.strip_prefix("cuda:").ok_or_else(bad)?;
                Device::cuda(n.parse().map_err(|_| bad())?)
            }
        }
    }

    fn open(kind: DeviceKind) -> Result<Device> {
        let mut devices = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(dev) = devices.get(&kind) {
            return Ok(dev.clone());
        }
        let mut setup_error = None;
        let mut cuda = None;
        let backend: Arc<dyn DeviceBackend> = match kind {
            DeviceKind::Cpu | DeviceKind::CpuN(_) => {
                let mut backend = CpuBackend::new(cpu_capacity().unwrap_or_else(|e| {
                    setup_error = Some(setting_parts(e));
                    physical_memory()
                }));
                if kind != DeviceKind::Cpu {
                    backend = backend.extra();
                }
                backend.set_late_streams(cpu_streams_late().unwrap_or_else(|e| {
                    setup_error.get_or_insert(setting_parts(e));
                    false
                }));
                Arc::new(backend)
            }
            DeviceKind::Cuda(n) => {
                let backend = Arc::new(crate::raw::cuda::CudaBackend::new(n)?);
                cuda = Some(backend.clone());
                backend
            }
        };
        let config = AllocatorConfig::from_env().unwrap_or_else(|e| {
            setup_error.get_or_insert(setting_parts(e));
            AllocatorConfig::default()
        });
        let dev = Device {
            inner: Arc::new(DeviceInner {
                kind,
                allocator: CachingAllocator::new(backend.clone(), kind.to_string(), config),
                host: HostAllocator::default(),
                backend,
                transfers: TransferCounters::default(),
                activity: crate::memory::activity::ActivityLog::new(kind.to_string()),
                cuda,
                setup_error,
                next_stream_id: AtomicU64::new(1),
            }),
        };
        devices.insert(kind, dev.clone());
        Ok(dev)
    }

    /// Which device this is.
    pub fn kind(&self) -> DeviceKind {
        self.inner.kind
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(&self) -> bool {
        matches!(self.inner.kind, DeviceKind::Cuda(_))
    }

    /// Name, memory, multiprocessors and compute capability (cpu: model name, capacity, cores).
    pub fn properties(&self) -> Result<DeviceProperties> {
        if let Some(fed) = FED_PROPERTIES.with(|fed| fed.borrow().clone()) {
            return Ok(fed);
        }
        self.inner.backend.properties()
    }

    /// Fails with the setting's error if `GPUMEM_ALLOC_CONF` or `GPUMEM_CPU_CAPACITY` is malformed.
    pub(crate) fn check_setup(&self) -> Result<()> {
        match &self.inner.setup_error {
            Some((setting, reason)) => Err(Error::BadSetting {
                setting: setting.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The CUDA backend of a `cuda:N` device (its context serves cuBLAS and NVRTC); `None` on cpu.
    pub fn cuda_backend(&self) -> Option<&crate::raw::cuda::CudaBackend> {
        self.inner.cuda.as_deref()
    }

    /// The caching allocator of this device.
    pub fn allocator(&self) -> &CachingAllocator<Arc<dyn DeviceBackend>> {
        &self.inner.allocator
    }

    /// Bytes in live buffers (`torch.cuda.memory_allocated`).
    pub fn memory_allocated(&self) -> u64 {
        self.inner.allocator.allocated_bytes()
    }

    /// Peak of `memory_allocated` since the last reset (`torch.cuda.max_memory_allocated`).
    pub fn max_memory_allocated(&self) -> u64 {
        self.inner.allocator.device_stats().allocated_bytes.all.peak
    }

    /// Bytes reserved from the device by the allocator (`torch.cuda.memory_reserved`).
    pub fn memory_reserved(&self) -> u64 {
        self.inner.allocator.reserved_bytes()
    }

    /// Peak of `memory_reserved` since the last reset (`torch.cuda.max_memory_reserved`).
    pub fn max_memory_reserved(&self) -> u64 {
        self.inner.allocator.device_stats().reserved_bytes.all.peak
    }

    /// Sets every peak to the current value (`torch.cuda.reset_peak_memory_stats`).
    pub fn reset_peak_memory_stats(&self) {
        self.inner.allocator.reset_peak_stats();
    }

    /// Zeroes running totals and event counters (`torch.cuda.reset_accumulated_memory_stats`).
    pub fn reset_accumulated_memory_stats(&self) {
        self.inner.allocator.reset_accumulated_stats();
    }

    /// Releases every cached segment with no live block (`torch.cuda.empty_cache`).
    pub fn empty_cache(&self) {
        self.inner.allocator.empty_cache();
    }

    /// The driver's view: `(free, total)` bytes of the whole device (`torch.cuda.mem_get_info`).
    pub fn mem_get_info(&self) -> Result<(u64, u64)> {
        let (free, total) = self.inner.backend.mem_get_info()?;
        Ok((free as u64, total as u64))
    }

    /// Every allocator counter under torch's keys (`torch.cuda.memory_stats`).
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.allocator.memory_stats()
    }

    /// The allocator's state as torch's table (`torch.cuda.memory_summary`).
    pub fn memory_summary(&self) -> String {
        self.inner.allocator.memory_summary()
    }

    /// Starts or stops recording allocator events (`torch.cuda.memory._record_memory_history`;
    /// `false` is `enabled=None`, which also stops the pinned host allocator's recording).
    pub fn record_memory_history(&self, enabled: bool) {
        self.inner.allocator.record_history(enabled);
        if !enabled {
            self.inner
                .host
                .record_history(&crate::policy::history::HistoryOptions::off());
        }
    }

    /// Marks a point of the program in the recorded history with a name (an `annotation` entry;
    /// torch's `record_function` range start, kept in the snapshot's `external_annotations`).
    /// Does nothing while history is not recorded.
    pub fn record_annotation(&self, label: &str) {
        self.inner.allocator.record_annotation(label);
        self.inner.activity.mark(label);
    }

    /// Starts (`true`) or stops and forgets (`false`) recording the pinned host allocator's
    /// events and the copies and kernels with their streams ([`crate::activity`] says which).
    /// gpumem's own record, beside the memory history: torch's snapshot holds no copies or
    /// kernels (its pinned host blocks: `record_pinned_host_memory` in
    /// [`crate::HistoryOptions`]).
    pub fn record_activity(&self, enabled: bool) {
        self.inner.activity.set_enabled(enabled);
    }

    /// What was recorded since `record_activity(true)`.
    pub fn activity(&self) -> crate::memory::activity::Activity {
        self.inner.activity.activity()
    }

    /// Segments, blocks and the recorded trace (`torch.cuda.memory._snapshot`), with the pinned
    /// host allocator's blocks and trace while `record_pinned_host_memory` records them (torch
    /// 2.15's `host_segments`, `host_traces`).
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = self.inner.allocator.snapshot();
        // As torch 2.15's `_snapshot`: the host's segments and trace only while the host records
        // (a host trace kept after recording stopped shows again when it restarts).
        if self.inner.host.is_recording() {
            snapshot.host_segments = self.inner.host.segments();
            snapshot.host_traces = self.inner.host.traces();
        }
        snapshot
    }

    /// `record_memory_history` with torch 2.15's options (see [`crate::HistoryOptions`]):
    /// checked first (`record_pinned_host_memory` needs `enabled`, torch's message), then
    /// applied to the device trace and the pinned host allocator's.
    pub fn record_memory_history_options(
        &self,
        options: crate::policy::history::HistoryOptions,
    ) -> Result<()> {
        options.check()?;
        self.inner.allocator.record_history_options(options);
        self.inner.host.record_history(&options);
        Ok(())
    }

    /// Writes the snapshot as torch's `_dump_snapshot` does: a pickle that PyTorch's viewer
    /// (pytorch.org/memory_viz) and `python -m torch.cuda._memory_viz` read.
    pub fn dump_snapshot(
        &self,
        path: impl AsRef<std::path::Path>,
    ) -> std::result::Result<(), crate::formats::snapshot_pickle::SnapshotPickleError> {
        crate::formats::snapshot_pickle::dump_snapshot(&self.snapshot(), path.as_ref())
    }

    /// Caps this process's reserved memory at `fraction` of the device's total memory.
    pub fn set_per_process_memory_fraction(&self, fraction: f64) -> Result<()> {
        self.inner.allocator.set_memory_fraction(fraction)
    }

    /// The fraction set by `set_per_process_memory_fraction`, 1.0 when none is set
    /// (`torch.cuda.get_per_process_memory_fraction`).
    pub fn get_per_process_memory_fraction(&self) -> f64 {
        self.inner.allocator.memory_fraction()
    }

    /// Removes the cap set by `set_per_process_memory_fraction`.
    pub fn clear_per_process_memory_fraction(&self) {
        self.inner.allocator.clear_memory_fraction();
    }

    /// Changes allocator settings at run time with `GPUMEM_ALLOC_CONF`'s syntax
    /// (`torch.cuda.memory._set_allocator_settings`).
    pub fn set_allocator_settings(&self, text: &str) -> Result<()> {
        self.inner.allocator.set_allocator_settings(text)
    }

    /// Replaces the allocator's settings (what `GPUMEM_ALLOC_CONF` sets at start-up).
    pub fn set_allocator_config(&self, config: AllocatorConfig) {
        self.inner.allocator.set_config(config);
    }

    /// Whether the device can map memory behind reserved address space (CUDA virtual memory
    /// management), which `expandable_segments:True` needs; always on cpu.
    pub fn virtual_memory_management(&self) -> bool {
        self.inner.backend.virtual_memory_management()
    }

    /// Waits for all work on the device (`torch.cuda.synchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.inner.backend.synchronize()
    }

    /// Whether work queued on a stream may still be running when the call that queued it returns
    /// (a copy with `_async`): always on cuda; on cpu after [`set_late_streams`](Self::set_late_streams).
    pub fn late_streams(&self) -> bool {
        self.inner.backend.late_streams()
    }

    /// On cpu: makes streams run their work late, as a GPU does (`true`), so that a missing
    /// [`Stream::wait_stream`](crate::memory::stream::Stream::wait_stream) or `synchronize` shows:
    /// an asynchronous copy then runs only when a synchronize, an event or another stream's wait
    /// needs it, and whoever reads its memory before that sees the memory as it was. `false` (the
    /// default, unless `GPUMEM_CPU_STREAMS=late`) runs every copy when it is queued. Nothing on
    /// cuda, whose streams always run late.
    pub fn set_late_streams(&self, late: bool) {
        self.inner.backend.set_late_streams(late);
    }

    /// Copies made on this device so far, by direction.
    pub fn transfer_stats(&self) -> TransferStats {
        self.inner.transfers.read()
    }

    /// Sets the copy counters back to zero.
    pub fn reset_transfer_stats(&self) {
        self.inner.transfers.reset();
    }

    /// The pinned host allocator's counters (`torch.cuda.host_memory_stats`).
    pub fn host_memory_stats(&self) -> HostMemoryStats {
        self.inner.host.stats()
    }

    /// Returns cached pinned host memory to the system (`torch._C._host_emptyCache`).
    pub fn empty_host_cache(&self) {
        self.inner
            .host
            .empty_cache(self.inner.backend.as_ref(), &self.inner.activity);
    }

    /// Zeroes the pinned host allocator's peaks and totals.
    pub fn reset_host_memory_stats(&self) {
        self.inner.host.reset_stats();
    }
}

fn setting_parts(e: Error) -> (String, String) {
    match e {
        Error::BadSetting { setting, reason } => (setting, reason),
        other => ("device settings".into(), other.to_string()),
    }
}
