//! Replaying a trace through a fresh caching allocator: the peaks, the device reservations and the
//! time per event, and the snapshot the replay recorded.

use super::events::{AllocTrace, Step, TraceError, TraceSummary, compile};
use crate::policy::allocator::{Allocation, CachingAllocator};
use crate::policy::history::{Snapshot, TraceAction};
use crate::raw::backend::RawMemory;
use std::time::{Duration, Instant};

/// What a replay measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReplayStats {
    /// Events replayed.
    pub events: usize,
    /// The trace's counts.
    pub summary: TraceSummary,
    /// `requested_bytes.all.peak`: the most bytes the program held at once, as asked for.
    pub peak_requested: u64,
    /// `allocated_bytes.all.peak`: the same in blocks (rounded up).
    pub peak_allocated: u64,
    /// `reserved_bytes.all.peak`: the most memory reserved from the device at once.
    pub peak_reserved: u64,
    /// Segments reserved from the device (`num_device_alloc`).
    pub num_device_alloc: u64,
    /// Segments returned to the device (`num_device_free`).
    pub num_device_free: u64,
    /// Reservations retried after releasing the cache (`num_alloc_retries`).
    pub num_alloc_retries: u64,
    /// Wall time of the replay loop (every malloc and free, nothing else).
    #[serde(skip)]
    pub elapsed: Duration,
}

impl ReplayStats {
    /// `peak_reserved / peak_requested`: how much more the device gave than the program used at
    /// its peak (1.0: no overhead; 0.0 for an empty trace).
    pub fn overhead(&self) -> f64 {
        if self.peak_requested == 0 {
            0.0
        } else {
            self.peak_reserved as f64 / self.peak_requested as f64
        }
    }

    /// Nanoseconds per event of the replay loop.
    pub fn ns_per_event(&self) -> f64 {
        if self.events == 0 {
            0.0
        } else {
            self.elapsed.as_nanos() as f64 / self.events as f64
        }
    }
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The trace is not valid.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The allocator refused an allocation (out of memory on a device too small for the trace).
    // The allocator's message is the error's source: `{:#}` prints it after the event.
    #[error("event {index}")]
    Alloc {
        /// The event's position in the trace.
        index: usize,
        /// The allocator's error.
        source: crate::error::Error,
    },
}

/// Replays `trace` through `allocator`, which should hold nothing (a fresh one): every alloc is a
/// `malloc` on the event's stream, every free a `free`. Afterwards the blocks still live are freed
/// and the cache emptied, so the allocator reserves nothing once this returns.
pub fn replay<B: RawMemory>(
    allocator: &CachingAllocator<B>,
    trace: &AllocTrace,
) -> Result<ReplayStats, ReplayError> {
    replay_inner(allocator, trace, false).0
}

/// [`replay`] with the allocator's history recorded, and its snapshot taken before the blocks
/// still live are freed (at the failing event, if one fails): the state after the replay, its
/// trace included, for `workbook replay --snapshot-out`.
pub fn replay_recorded<B: RawMemory>(
    allocator: &CachingAllocator<B>,
    trace: &AllocTrace,
) -> (Result<ReplayStats, ReplayError>, Option<Snapshot>) {
    replay_inner(allocator, trace, true)
}

fn replay_inner<B: RawMemory>(
    allocator: &CachingAllocator<B>,
    trace: &AllocTrace,
    record: bool,
) -> (Result<ReplayStats, ReplayError>, Option<Snapshot>) {
    let (steps, summary) = match compile(&trace.events) {
        Ok(compiled) => compiled,
        Err(e) => return (Err(e.into()), None),
    };
    if record {
        allocator.record_history(true);
    }
    let before = allocator.device_stats();
    allocator.reset_peak_stats();
    let mut slots: Vec<Option<Allocation>> = vec![None; summary.allocs];
    let mut failure = None;
    let start = Instant::now();
    for (index, step) in steps.iter().enumerate() {
        match *step {
            Step::Alloc { slot, size, stream } => match allocator.malloc(size, stream) {
                Ok(block) => slots[slot] = Some(block),
                Err(source) => {
                    failure = Some((index, source));
                    break;
                }
            },
            Step::Free { slot } => {
                if let Some(block) = slots[slot].take() {
                    allocator.free(block, Vec::new());
                }
            }
            Step::EmptyCache => allocator.empty_cache(),
        }
    }
    let elapsed = start.elapsed();
    let after = allocator.device_stats();
    let snapshot = record.then(|| {
        let mut snapshot = allocator.snapshot();
        with_frames_of(&mut snapshot, trace);
        // At a failure the snapshot is the state at the failing event: its `oom` entry last.
        if failure.is_some()
            && snapshot.trace.last().map(|e| e.action) == Some(TraceAction::Snapshot)
        {
            snapshot.trace.pop();
        }
        snapshot
    });
    for block in slots.into_iter().flatten() {
        allocator.free(block, Vec::new());
    }
    allocator.empty_cache();
    if record {
        allocator.record_history(false);
    }
    if let Some((index, source)) = failure {
        return (Err(ReplayError::Alloc { index, source }), snapshot);
    }
    let stats = ReplayStats {
        events: steps.len(),
        summary,
        peak_requested: after.requested_bytes.all.peak,
        peak_allocated: after.allocated_bytes.all.peak,
        peak_reserved: after.reserved_bytes.all.peak,
        num_device_alloc: after.num_device_alloc - before.num_device_alloc,
        num_device_free: after.num_device_free - before.num_device_free,
        num_alloc_retries: after.num_alloc_retries - before.num_alloc_retries,
        elapsed,
    };
    (Ok(stats), snapshot)
}

/// Gives the entries a replay recorded the frames of the allocation they belong to in the trace
/// (an alloc, and the segment_alloc, segment_map or oom entry its `malloc` recorded), in place of
/// the replayer's own call site; none when the trace has no frames (a trace file).
fn with_frames_of(snapshot: &mut Snapshot, trace: &AllocTrace) {
    let mut next_alloc = 0;
    for entry in &mut snapshot.trace {
        let stack = trace.alloc_stacks.get(next_alloc).copied().unwrap_or(0);
        match entry.action {
            TraceAction::Alloc
            | TraceAction::SegmentAlloc
            | TraceAction::SegmentMap
            | TraceAction::Oom => {
                entry.frames = trace.stacks.frames(stack).cloned().collect();
                if entry.action == TraceAction::Alloc {
                    next_alloc += 1;
                }
            }
            _ => entry.frames.clear(),
        }
    }
}
