//! A trace's events and what it is made of: allocations and frees by id, each with its stream;
//! the interned call stacks of a snapshot's allocations; the checks that turn ids into slots; and
//! the two ways to make a trace (from a snapshot's history, or event by event).

use crate::policy::allocator::StreamId;
use crate::policy::history::{Frame, Snapshot, TraceAction, TraceEntry};
use std::collections::HashMap;

/// The `format` field every trace file carries.
pub const FORMAT: &str = "gpumem-alloc-trace";
/// The version of the format this build writes and reads.
pub const VERSION: u64 = 1;

/// One event of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TraceEvent {
    /// Allocate `size` bytes on `stream` (0: the default stream) and call the block `id`.
    Alloc {
        /// A name for the block, unique in the trace.
        id: u64,
        /// Bytes requested.
        size: u64,
        /// The stream, as a small number (0: the default stream).
        stream: u64,
    },
    /// Free the block called `id`.
    Free {
        /// The block, named by its `alloc` event.
        id: u64,
    },
    /// `empty_cache()`: give every cached segment that holds no live block back to the device.
    EmptyCache,
}

/// A trace: what it records, and its events in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocTrace {
    /// What program or pattern the trace records, and how it was made.
    pub description: String,
    /// The events, in program order.
    pub events: Vec<TraceEvent>,
    /// The stacks of a snapshot's allocations (none for a trace file, which records no frames).
    pub stacks: Stacks,
    /// Each `alloc` event's stack in `stacks`, in order (empty: no frames known).
    pub alloc_stacks: Vec<u32>,
    /// How many of the first events allocate blocks that a snapshot's program held before its
    /// recording began (0 for a trace file): they are replayed first, in address order, so that
    /// the replay starts where the recording did.
    pub recorded_before: usize,
    /// The `alloc` events that failed in the recording (a snapshot's `oom` entries: the request
    /// that ran out of memory), by index in `events`.
    pub failed_in_recording: Vec<usize>,
    /// The allocator settings the recording ran with (a snapshot's `allocator_settings`, in
    /// `PYTORCH_CUDA_ALLOC_CONF` syntax); `None` for a trace file.
    pub recorded_settings: Option<String>,
}

/// Why a trace cannot be read or replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The text is not valid JSON, or not shaped like a trace.
    #[error("malformed trace JSON: {message}")]
    Malformed {
        /// What serde_json found, with the event index and the line and column.
        message: String,
    },
    /// The JSON is an object, but not a gpumem allocation trace.
    #[error("not a gpumem allocation trace: {reason}")]
    NotATrace {
        /// What is missing or wrong.
        reason: String,
    },
    /// A version this build cannot read.
    #[error("trace format version {found} is not supported (this build reads version {VERSION})")]
    UnsupportedVersion {
        /// The version in the file.
        found: String,
    },
    /// An event with a missing, mistyped or unknown field.
    #[error("event {index}: {reason}")]
    BadEvent {
        /// The event's position in `events` (from 0).
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// An event whose `op` is not `alloc`, `free` or `empty_cache`.
    #[error("event {index}: unknown op {op:?} (expected \"alloc\", \"free\" or \"empty_cache\")")]
    UnknownOp {
        /// The event's position in `events`.
        index: usize,
        /// The op found.
        op: String,
    },
    /// A free of an id that no earlier event allocated.
    #[error("event {index}: free of id {id}, which no earlier event allocated")]
    UnknownId {
        /// The event's position in `events`.
        index: usize,
        /// The id.
        id: u64,
    },
    /// A second free of the same id.
    #[error("event {index}: double free of id {id} (event {first} already freed it)")]
    DoubleFree {
        /// The event's position in `events`.
        index: usize,
        /// The id.
        id: u64,
        /// The event that freed it first.
        first: usize,
    },
    /// An alloc that reuses an id.
    #[error("event {index}: id {id} was already allocated by event {first} (ids are never reused)")]
    DuplicateId {
        /// The event's position in `events`.
        index: usize,
        /// The id.
        id: u64,
        /// The event that allocated it first.
        first: usize,
    },
}

/// The frames of a snapshot's trace entries, each distinct frame and each distinct stack (a list
/// of frames, innermost first) kept once, named by an id; stack 0 is the empty stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stacks {
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, u32>,
    stacks: Vec<Box<[u32]>>,
    stack_ids: HashMap<Box<[u32]>, u32>,
}

impl Default for Stacks {
    fn default() -> Self {
        Stacks {
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: vec![Box::new([])],
            stack_ids: HashMap::from([(Box::from([]), 0)]),
        }
    }
}

impl Stacks {
    /// The id of `frame`, added if new.
    pub fn frame_id(&mut self, frame: Frame) -> u32 {
        let next = self.frames.len() as u32;
        *self.frame_ids.entry(frame.clone()).or_insert_with(|| {
            self.frames.push(frame);
            next
        })
    }

    /// The id of the stack made of these frame ids, added if new.
    pub fn stack_id(&mut self, frame_ids: &[u32]) -> u32 {
        if let Some(&id) = self.stack_ids.get(frame_ids) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(frame_ids.into());
        self.stack_ids.insert(frame_ids.into(), id);
        id
    }

    /// The id of a stack given as frames.
    pub fn intern(&mut self, frames: &[Frame]) -> u32 {
        let ids: Vec<u32> = frames.iter().map(|f| self.frame_id(f.clone())).collect();
        self.stack_id(&ids)
    }

    /// The frames of stack `id`, innermost first (none for an unknown id).
    pub fn frames(&self, id: u32) -> impl Iterator<Item = &Frame> {
        self.stacks
            .get(id as usize)
            .into_iter()
            .flat_map(|s| s.iter().map(|&f| &self.frames[f as usize]))
    }

    /// How many distinct stacks (the empty one included).
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Whether only the empty stack is known.
    pub fn is_empty(&self) -> bool {
        self.stacks.len() == 1
    }
}

/// Counts of a valid trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct TraceSummary {
    /// `alloc` events.
    pub allocs: usize,
    /// `free` events.
    pub frees: usize,
    /// Blocks never freed (still live at the end).
    pub live_at_end: usize,
    /// Distinct streams.
    pub streams: usize,
    /// Sum of all `alloc` sizes.
    pub total_bytes: u64,
}

impl AllocTrace {
    /// An empty trace with a description.
    pub fn new(description: impl Into<String>) -> AllocTrace {
        AllocTrace {
            description: description.into(),
            ..AllocTrace::default()
        }
    }

    /// Checks that every free names a live id and ids are never reused; returns the counts.
    pub fn validate(&self) -> Result<TraceSummary, TraceError> {
        compile(&self.events).map(|(_, summary)| summary)
    }

    /// The alloc and free events of a snapshot's recorded history (see [`AllocTrace::from_entries`]).
    pub fn from_snapshot(snapshot: &Snapshot, description: impl Into<String>) -> AllocTrace {
        AllocTrace::from_entries(&snapshot.trace, description)
    }

    /// Turns history entries into a trace: allocs get ids in order, frees are matched to them by
    /// address, streams are numbered 0 (the default stream), 1, 2… in order of appearance.
    ///
    /// A free is the program's `free_requested` (its `free_completed`, later when other streams
    /// still used the block, is the allocator's doing). Frees of blocks allocated before recording
    /// began are left out (they cannot be replayed); segment, snapshot and OOM entries are the
    /// allocator's own doing and are left out too. Sizes are the
    /// entries' sizes: the history records block sizes, so a request's rounding is already in them.
    pub fn from_entries(entries: &[TraceEntry], description: impl Into<String>) -> AllocTrace {
        let mut builder = EntryConverter::new(description);
        entries.iter().for_each(|e| builder.push(e));
        builder.finish()
    }
}

/// [`AllocTrace::from_entries`] one entry at a time, so that a snapshot's trace can be turned
/// into a replayable one as it is read (the entries are never all held).
///
/// What the history shows besides allocs and frees is kept where a replay can act on it:
/// - a block freed in the trace but allocated before recording began is allocated at the start
///   of the trace ([`AllocTrace::recorded_before`]), and so is a block the final segments hold
///   that the trace never mentions ([`EntryConverter::finish_from`]);
/// - an `oom` entry becomes an alloc of the size that failed ([`AllocTrace::failed_in_recording`]);
/// - segments freed (or unmapped) with no alloc waiting on them are an `empty_cache()`: the
///   allocator frees segments of its own only to serve a request (release and retry), and then a
///   new segment or the `oom` entry follows. An `empty_cache()` followed at once by an alloc that
///   needs a new segment looks the same, and is not seen; under `garbage_collection_threshold`
///   the allocator's own collection before an alloc is taken for one.
#[derive(Debug)]
pub struct EntryConverter {
    trace: AllocTrace,
    live: HashMap<u64, u64>,
    streams: HashMap<u64, u64>,
    next_id: u64,
    /// Blocks freed in the trace that it never allocated: (address, id, size, stream).
    before: Vec<(u64, u64, u64, u64)>,
    /// Segments were released, and no reservation, alloc or oom has followed yet.
    released: bool,
    /// Whether blocks older than the entries are allocated first (else their frees are left out:
    /// a replay of a window starts from an empty cache).
    keep_older: bool,
}

impl EntryConverter {
    /// An empty trace with a description.
    pub fn new(description: impl Into<String>) -> EntryConverter {
        EntryConverter {
            trace: AllocTrace::new(description),
            live: HashMap::new(),
            streams: HashMap::from([(0, 0)]),
            next_id: 0,
            before: Vec::new(),
            released: false,
            keep_older: true,
        }
    }

    /// [`EntryConverter::new`] for a window of a history, replayed from an empty cache: frees of
    /// blocks allocated before the window are left out.
    pub fn window(description: impl Into<String>) -> EntryConverter {
        EntryConverter {
            keep_older: false,
            ..EntryConverter::new(description)
        }
    }

    /// Adds one history entry, its frames kept with an alloc.
    pub fn push(&mut self, entry: &TraceEntry) {
        let stack = if matches!(entry.action, TraceAction::Alloc | TraceAction::Oom)
            && !entry.frames.is_empty()
        {
            self.trace.stacks.intern(&entry.frames)
        } else {
            0
        };
        self.push_with_stack(entry, stack);
    }

    fn stream(&mut self, stream: u64) -> u64 {
        let next = self.streams.len() as u64;
        *self.streams.entry(stream).or_insert(next)
    }

    fn alloc(&mut self, size: u64, stream: u64, stack: u32) -> u64 {
        let stream = self.stream(stream);
        let id = self.next_id;
        self.next_id += 1;
        self.trace
            .events
            .push(TraceEvent::Alloc { id, size, stream });
        self.trace.alloc_stacks.push(stack);
        id
    }

    /// Segments released with no request waiting on them were an `empty_cache()`.
    fn settle_release(&mut self) {
        if std::mem::take(&mut self.released) {
            self.trace.events.push(TraceEvent::EmptyCache);
        }
    }

    /// Adds one history entry; an alloc's frames are `stack`, an id in the table that the trace
    /// holds (or is given, [`EntryConverter::finish_with`]).
    pub fn push_with_stack(&mut self, entry: &TraceEntry, stack: u32) {
        match entry.action {
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => self.released = true,
            // A reservation after a release, or an oom entry: the allocator released segments
            // to serve a request (release and retry), as a replay's allocator will.
            TraceAction::SegmentAlloc | TraceAction::SegmentMap | TraceAction::Oom => {
                self.released = false
            }
            // Anything else after a release: no request was waiting on it.
            _ => self.settle_release(),
        }
        match entry.action {
            TraceAction::Alloc => {
                // A complete history frees an address before handing it out again; if not,
                // the older block is freed first so that the trace stays replayable.
                if let Some(old) = self.live.remove(&entry.addr) {
                    self.trace.events.push(TraceEvent::Free { id: old });
                }
                let id = self.alloc(entry.size, entry.stream, stack);
                self.live.insert(entry.addr, id);
            }
            TraceAction::Oom => {
                // The request that failed: its size, on its stream (never freed: it never was).
                self.trace.failed_in_recording.push(self.trace.events.len());
                self.alloc(entry.size, entry.stream, stack);
            }
            TraceAction::FreeRequested => {
                if let Some(id) = self.live.remove(&entry.addr) {
                    self.trace.events.push(TraceEvent::Free { id });
                } else if self.keep_older {
                    // Allocated before recording began: allocated at the start, freed here.
                    let id = self.next_id;
                    self.next_id += 1;
                    let stream = self.stream(entry.stream);
                    self.before.push((entry.addr, id, entry.size, stream));
                    self.trace.events.push(TraceEvent::Free { id });
                }
            }
            TraceAction::FreeCompleted
            | TraceAction::Snapshot
            | TraceAction::SegmentAlloc
            | TraceAction::SegmentFree
            | TraceAction::SegmentMap
            | TraceAction::SegmentUnmap
            | TraceAction::Annotation => {}
        }
    }

    /// The trace so far, its stacks' ids naming frames in `stacks` (a snapshot reader's table).
    pub fn finish_with(mut self, stacks: &Stacks) -> AllocTrace {
        self.trace.stacks = stacks.clone();
        self.finish()
    }

    /// [`EntryConverter::finish_with`], given the blocks the snapshot's final segments hold
    /// allocated, as (address, size, stream): those the trace never allocated were allocated
    /// before recording began, and are allocated at its start too.
    pub fn finish_from(mut self, stacks: &Stacks, live_at_end: &[(u64, u64, u64)]) -> AllocTrace {
        let in_trace: std::collections::HashSet<u64> = self.live.keys().copied().collect();
        for &(addr, size, stream) in live_at_end {
            if !in_trace.contains(&addr) {
                let id = self.next_id;
                self.next_id += 1;
                let stream = self.stream(stream);
                self.before.push((addr, id, size, stream));
            }
        }
        self.finish_with(stacks)
    }

    /// The trace so far (no stacks kept when no alloc had frames).
    pub fn finish(mut self) -> AllocTrace {
        self.settle_release();
        if !self.before.is_empty() {
            self.before.sort_unstable();
            let prelude: Vec<TraceEvent> = self
                .before
                .iter()
                .map(|&(_, id, size, stream)| TraceEvent::Alloc { id, size, stream })
                .collect();
            let n = prelude.len();
            self.trace.recorded_before = n;
            for index in &mut self.trace.failed_in_recording {
                *index += n;
            }
            self.trace.events.splice(0..0, prelude);
            self.trace
                .alloc_stacks
                .splice(0..0, std::iter::repeat_n(0, n));
        }
        if self.trace.stacks.is_empty() {
            self.trace.alloc_stacks.clear();
        }
        self.trace
    }
}

/// Builds a trace in program order: `alloc` hands out ids, `free` takes them back.
#[derive(Debug, Default)]
pub struct TraceBuilder {
    next_id: u64,
    events: Vec<TraceEvent>,
}

impl TraceBuilder {
    /// An empty builder.
    pub fn new() -> TraceBuilder {
        TraceBuilder::default()
    }

    /// Records an allocation of `size` bytes on `stream`; returns its id.
    pub fn alloc(&mut self, size: u64, stream: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.events.push(TraceEvent::Alloc { id, size, stream });
        id
    }

    /// Records the free of `id`.
    pub fn free(&mut self, id: u64) {
        self.events.push(TraceEvent::Free { id });
    }

    /// Events so far.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The trace, with its description.
    pub fn finish(self, description: impl Into<String>) -> AllocTrace {
        AllocTrace {
            description: description.into(),
            events: self.events,
            ..AllocTrace::default()
        }
    }
}

/// A trace event with ids turned into dense slots, ready to replay.
#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    Alloc {
        slot: usize,
        size: usize,
        stream: StreamId,
    },
    Free {
        slot: usize,
    },
    EmptyCache,
}

/// Checks the events and turns ids into slots.
pub(super) fn compile(events: &[TraceEvent]) -> Result<(Vec<Step>, TraceSummary), TraceError> {
    // id -> (slot, event that allocated it, event that freed it)
    let mut ids: HashMap<u64, (usize, usize, Option<usize>)> = HashMap::new();
    let mut streams: HashMap<u64, ()> = HashMap::new();
    let mut summary = TraceSummary::default();
    let mut steps = Vec::with_capacity(events.len());
    for (index, event) in events.iter().enumerate() {
        match *event {
            TraceEvent::Alloc { id, size, stream } => {
                if let Some(&(_, first, _)) = ids.get(&id) {
                    return Err(TraceError::DuplicateId { index, id, first });
                }
                let size = usize::try_from(size)
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| TraceError::BadEvent {
                        index,
                        reason: format!("\"size\" must be at least 1 byte, found {size}"),
                    })?;
                let slot = summary.allocs;
                ids.insert(id, (slot, index, None));
                streams.insert(stream, ());
                summary.allocs += 1;
                summary.total_bytes += size as u64;
                steps.push(Step::Alloc {
                    slot,
                    size,
                    stream: StreamId(stream),
                });
            }
            TraceEvent::Free { id } => {
                let Some((slot, _, freed)) = ids.get_mut(&id) else {
                    return Err(TraceError::UnknownId { index, id });
                };
                if let Some(first) = *freed {
                    return Err(TraceError::DoubleFree { index, id, first });
                }
                *freed = Some(index);
                summary.frees += 1;
                steps.push(Step::Free { slot: *slot });
            }
            TraceEvent::EmptyCache => steps.push(Step::EmptyCache),
        }
    }
    summary.live_at_end = summary.allocs - summary.frees;
    summary.streams = streams.len();
    Ok((steps, summary))
}
