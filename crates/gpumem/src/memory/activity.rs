//! What the pinned host allocator and the streams did, kept while [`Device::record_activity`] is on:
//! each pinned block's life (taken from the system, handed out again from the cache, freed back
//! to the cache, given back), and each copy and kernel with the stream it was issued on.
//!
//! Everything is numbered with one counter, the *tick*: a host event takes one tick, a copy or
//! kernel takes one when its call begins and one when it returns. The ticks give the order; the
//! clock times beside them (nanoseconds since recording began) say how long, and differ from run
//! to run. A span runs from its call to the call's return: on the `cpu` device the work is done
//! inside the call, so that is when it ran; on a GPU an asynchronous call returns once the work is
//! queued, and the span is the issue, not the GPU's run.
//!
//! Recorded: every copy between host and device or within the device (pinned or not), and every
//! kernel gpumem runs, on `cpu` and on cuda alike, once per launch: the zeroing fill (`zero`: of
//! `alloc`, `Stream::alloc` and `ops::zero`), GEMM, and each kernel of [`crate::ops`]. A kernel
//! span is named after the op that launched it (`relu`, `add_bias`, `addcmul`, `log_softmax`,
//! ...); its bytes are those of the buffer it writes, or for a reduction to one element (`sum`,
//! `sum_to_device`, `mse_loss`, `nll_loss`) those of the buffer it reads. A span is one launch, not
//! one call: an op that allocates its output records that buffer's `zero` first; the ops that end
//! in a one-element division on the device (`sum_to_device`, `mse_loss_to_device`, `nll_loss`)
//! record it as a second kernel, `f64_div`; and an op built on other ops (an autograd op, an
//! optimizer step, `Mlp::forward`) records nothing of its own, only their launches, so no work is
//! recorded twice.
//!
//! This record is gpumem's own: torch's memory snapshot has no pinned host memory and no kernels,
//! so it is kept beside the snapshot, never in it (a snapshot pickle stays what PyTorch's viewer
//! reads).
//!
//! [`Device::record_activity`]: crate::Device::record_activity

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What happened to a pinned host block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostAction {
    /// A new block from the system (`cudaHostAlloc`; counted by `num_host_alloc`).
    Alloc,
    /// A cached block handed out again: same rounded size, and its copies finished.
    Reuse,
    /// The program dropped its buffer: the block went back to the cache.
    Free,
    /// The block was given back to the system (`empty_host_cache`; counted by `num_host_free`).
    Release,
}

/// One event of the pinned host allocator.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostEvent {
    /// When, on the activity's counter.
    pub tick: u64,
    /// What happened.
    pub action: HostAction,
    /// The block, numbered from 1 in the order the device took blocks from the system.
    pub block: u64,
    /// The block's bytes (the request rounded up to a power of two).
    pub size: u64,
    /// Bytes asked for (alloc and reuse; 0 for free and release).
    pub requested: u64,
    /// Bytes in live pinned blocks after the event (torch 2.15's `host_memory_stats()` key
    /// `active_bytes`).
    pub allocated: u64,
    /// Bytes of pinned memory held from the system after the event, handed out or cached (torch
    /// 2.15's `allocated_bytes`: the pool).
    pub reserved: u64,
}

/// What a span of work was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    /// A copy from host memory into the device.
    HostToDevice,
    /// A copy from the device into host memory.
    DeviceToHost,
    /// A copy within the device.
    DeviceToDevice,
    /// A kernel (or a fill such as the zeroing of `alloc`).
    Kernel,
}

/// One copy or kernel: its stream, and its call's start and return.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkSpan {
    /// The tick when the call began.
    pub start: u64,
    /// The tick when the call returned.
    pub end: u64,
    /// A copy (by direction) or a kernel.
    pub kind: WorkKind,
    /// The op: `copy` for copies, the kernel's name (`zero`, `sum`) for kernels.
    pub name: String,
    /// The stream it was issued on (0: the default stream).
    pub stream: u64,
    /// Bytes copied; for a kernel, the bytes of the buffer it writes (of the buffer it reads, for a
    /// reduction to one element).
    pub bytes: u64,
    /// The pinned block a copy read or wrote (none for pageable copies and kernels).
    pub pinned_block: Option<u64>,
    /// Nanoseconds from the start of recording to the call (host clock).
    pub start_ns: u64,
    /// Nanoseconds from the start of recording to the return (host clock).
    pub end_ns: u64,
}

/// A named point of the program ([`crate::Device::record_annotation`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    /// When, on the activity's counter.
    pub tick: u64,
    /// Its name.
    pub label: String,
}

/// The recorded activity, each list in tick order.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Activity {
    /// The `cpu` device or `cuda:N`.
    pub device: String,
    /// The pinned host allocator's events.
    pub host: Vec<HostEvent>,
    /// Copies and kernels, in the order their calls returned.
    pub work: Vec<WorkSpan>,
    /// The program's marks.
    pub marks: Vec<Mark>,
}

impl Activity {
    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.host.is_empty() && self.work.is_empty() && self.marks.is_empty()
    }
}

/// A call begun while recording: its tick and clock time.
pub(crate) struct SpanStart {
    tick: u64,
    ns: u64,
}

struct LogState {
    next_tick: u64,
    epoch: Instant,
    activity: Activity,
}

/// One device's recorder. Costs one atomic load per call while off.
pub(crate) struct ActivityLog {
    enabled: AtomicBool,
    state: Mutex<LogState>,
}

impl ActivityLog {
    pub(crate) fn new(device: String) -> ActivityLog {
        ActivityLog {
            enabled: AtomicBool::new(false),
            state: Mutex::new(LogState {
                next_tick: 0,
                epoch: Instant::now(),
                activity: Activity {
                    device,
                    ..Activity::default()
                },
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// On: starts recording (keeping what is recorded when already on). Off: stops and drops it.
    pub(crate) fn set_enabled(&self, enabled: bool) {
        let mut st = self.lock();
        let was = self.enabled.swap(enabled, Ordering::SeqCst);
        if !enabled || !was {
            st.next_tick = 0;
            st.epoch = Instant::now();
            st.activity.host.clear();
            st.activity.work.clear();
            st.activity.marks.clear();
        }
    }

    fn on(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// What is recorded so far.
    pub(crate) fn activity(&self) -> Activity {
        self.lock().activity.clone()
    }

    fn tick(st: &mut LogState) -> u64 {
        st.next_tick += 1;
        st.next_tick - 1
    }

    /// Marks the beginning of a copy's or kernel's call (`None` while off).
    pub(crate) fn start(&self) -> Option<SpanStart> {
        if !self.on() {
            return None;
        }
        let mut st = self.lock();
        let ns = st.epoch.elapsed().as_nanos() as u64;
        Some(SpanStart {
            tick: Self::tick(&mut st),
            ns,
        })
    }

    /// Records the copy or kernel begun at `start`, now that its call returns.
    pub(crate) fn finish(
        &self,
        start: Option<SpanStart>,
        kind: WorkKind,
        name: &str,
        stream: u64,
        bytes: usize,
        pinned_block: Option<u64>,
    ) {
        let Some(start) = start else { return };
        let mut st = self.lock();
        let end_ns = st.epoch.elapsed().as_nanos() as u64;
        let end = Self::tick(&mut st);
        st.activity.work.push(WorkSpan {
            start: start.tick,
            end,
            kind,
            name: name.to_string(),
            stream,
            bytes: bytes as u64,
            pinned_block,
            start_ns: start.ns,
            end_ns,
        });
    }

    /// A kernel on the default stream from now until the returned guard is dropped (none while
    /// off): for ops with several ways out.
    pub(crate) fn kernel(&self, name: &'static str, bytes: usize) -> KernelSpan<'_> {
        KernelSpan {
            log: self,
            start: self.start(),
            name,
            bytes,
        }
    }

    /// Records an event of the pinned host allocator, with its allocated and reserved bytes after it.
    pub(crate) fn host(
        &self,
        action: HostAction,
        block: u64,
        size: usize,
        requested: usize,
        allocated: u64,
        reserved: u64,
    ) {
        if !self.on() {
            return;
        }
        let mut st = self.lock();
        let tick = Self::tick(&mut st);
        st.activity.host.push(HostEvent {
            tick,
            action,
            block,
            size: size as u64,
            requested: requested as u64,
            allocated,
            reserved,
        });
    }

    /// Records a named point of the program.
    pub(crate) fn mark(&self, label: &str) {
        if !self.on() {
            return;
        }
        let mut st = self.lock();
        let tick = Self::tick(&mut st);
        st.activity.marks.push(Mark {
            tick,
            label: label.to_string(),
        });
    }
}

/// A kernel being recorded: the span ends when this is dropped.
pub(crate) struct KernelSpan<'a> {
    log: &'a ActivityLog,
    start: Option<SpanStart>,
    name: &'static str,
    bytes: usize,
}

impl Drop for KernelSpan<'_> {
    fn drop(&mut self) {
        let start = self.start.take();
        self.log
            .finish(start, WorkKind::Kernel, self.name, 0, self.bytes, None);
    }
}
