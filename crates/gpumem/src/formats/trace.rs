//! Allocation traces: a program's allocations and frees by id (not address), so that the same
//! pattern can be replayed through any caching allocator — gpumem's on either device, or PyTorch's
//! (`bench/torch_replay.py`). The file format is documented in `bench/README.md`.
//!
//! A trace comes from a [`Snapshot`]'s recorded history ([`AllocTrace::from_snapshot`]), from a
//! program that builds one ([`TraceBuilder`]), or from a file ([`AllocTrace::from_json`], which
//! checks every event and names the first bad one). [`replay`] runs it through a caching allocator
//! and reports the peaks, the device reservations and the time per event.

use crate::policy::allocator::{Allocation, CachingAllocator, StreamId};
use crate::policy::history::{Frame, Snapshot, TraceAction, TraceEntry};
use crate::raw::backend::RawMemory;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

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
    /// An event whose `op` is neither `alloc` nor `free`.
    #[error("event {index}: unknown op {op:?} (expected \"alloc\" or \"free\")")]
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

    /// Reads a trace file's text and checks every event (the first problem is named by index).
    pub fn from_json(text: &str) -> Result<AllocTrace, TraceError> {
        let raw: RawTrace = serde_json::from_str(text).map_err(|e| TraceError::Malformed {
            message: e.to_string(),
        })?;
        match &raw.format {
            Some(Value::String(f)) if f == FORMAT => {}
            Some(other) => {
                return Err(TraceError::NotATrace {
                    reason: format!("\"format\" is {}, expected \"{FORMAT}\"", short(other)),
                });
            }
            None => {
                return Err(TraceError::NotATrace {
                    reason: format!("no \"format\": \"{FORMAT}\" field"),
                });
            }
        }
        match &raw.version {
            Some(v) if v.as_u64() == Some(VERSION) => {}
            Some(v) => {
                return Err(TraceError::UnsupportedVersion {
                    found: short(v).to_string(),
                });
            }
            None => {
                return Err(TraceError::NotATrace {
                    reason: "no \"version\" field".into(),
                });
            }
        }
        let description = match raw.description {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(TraceError::NotATrace {
                    reason: format!("\"description\" must be a string, found {}", short(&other)),
                });
            }
        };
        let Some(EventList(values)) = raw.events else {
            return Err(TraceError::NotATrace {
                reason: "no \"events\" list".into(),
            });
        };
        let events = values
            .iter()
            .enumerate()
            .map(|(index, value)| parse_event(index, value))
            .collect::<Result<Vec<_>, _>>()?;
        let trace = AllocTrace {
            description,
            events,
            ..AllocTrace::default()
        };
        trace.validate()?;
        Ok(trace)
    }

    /// The trace as JSON text: one event per line, so that files diff well.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + self.events.len() * 48);
        out.push_str("{\n");
        out.push_str(&format!("  \"format\": \"{FORMAT}\",\n"));
        out.push_str(&format!("  \"version\": {VERSION},\n"));
        out.push_str(&format!(
            "  \"description\": {},\n",
            serde_json::to_string(&self.description).expect("a string serialises")
        ));
        out.push_str("  \"events\": [");
        for (i, event) in self.events.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            out.push_str(&serde_json::to_string(event).expect("an event serialises"));
        }
        out.push_str(if self.events.is_empty() {
            "]\n}\n"
        } else {
            "\n  ]\n}\n"
        });
        out
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
#[derive(Debug)]
pub struct EntryConverter {
    trace: AllocTrace,
    live: HashMap<u64, u64>,
    streams: HashMap<u64, u64>,
    next_id: u64,
}

impl EntryConverter {
    /// An empty trace with a description.
    pub fn new(description: impl Into<String>) -> EntryConverter {
        EntryConverter {
            trace: AllocTrace::new(description),
            live: HashMap::new(),
            streams: HashMap::from([(0, 0)]),
            next_id: 0,
        }
    }

    /// Adds one history entry, its frames kept with an alloc.
    pub fn push(&mut self, entry: &TraceEntry) {
        let stack = if entry.action == TraceAction::Alloc && !entry.frames.is_empty() {
            self.trace.stacks.intern(&entry.frames)
        } else {
            0
        };
        self.push_with_stack(entry, stack);
    }

    /// Adds one history entry; an alloc's frames are `stack`, an id in the table that the trace
    /// holds (or is given, [`EntryConverter::finish_with`]).
    pub fn push_with_stack(&mut self, entry: &TraceEntry, stack: u32) {
        match entry.action {
            TraceAction::Alloc => {
                // A complete history frees an address before handing it out again; if not,
                // the older block is freed first so that the trace stays replayable.
                if let Some(old) = self.live.remove(&entry.addr) {
                    self.trace.events.push(TraceEvent::Free { id: old });
                }
                let next_stream = self.streams.len() as u64;
                let stream = *self.streams.entry(entry.stream).or_insert(next_stream);
                self.trace.events.push(TraceEvent::Alloc {
                    id: self.next_id,
                    size: entry.size,
                    stream,
                });
                self.trace.alloc_stacks.push(stack);
                self.live.insert(entry.addr, self.next_id);
                self.next_id += 1;
            }
            TraceAction::FreeRequested => {
                if let Some(id) = self.live.remove(&entry.addr) {
                    self.trace.events.push(TraceEvent::Free { id });
                }
            }
            TraceAction::FreeCompleted
            | TraceAction::Snapshot
            | TraceAction::SegmentAlloc
            | TraceAction::SegmentFree
            | TraceAction::SegmentMap
            | TraceAction::SegmentUnmap
            | TraceAction::Oom
            | TraceAction::Annotation => {}
        }
    }

    /// The trace so far, its stacks' ids naming frames in `stacks` (a snapshot reader's table).
    pub fn finish_with(mut self, stacks: &Stacks) -> AllocTrace {
        self.trace.stacks = stacks.clone();
        self.finish()
    }

    /// The trace so far (no stacks kept when no alloc had frames).
    pub fn finish(mut self) -> AllocTrace {
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

/// A trace event with ids turned into dense slots, ready to replay.
#[derive(Debug, Clone, Copy)]
enum Step {
    Alloc {
        slot: usize,
        size: usize,
        stream: StreamId,
    },
    Free {
        slot: usize,
    },
}

/// Checks the events and turns ids into slots.
fn compile(events: &[TraceEvent]) -> Result<(Vec<Step>, TraceSummary), TraceError> {
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
        }
    }
    summary.live_at_end = summary.allocs - summary.frees;
    summary.streams = streams.len();
    Ok((steps, summary))
}

/// A JSON value for a message, cut short.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

/// One event from its JSON value.
fn parse_event(index: usize, value: &Value) -> Result<TraceEvent, TraceError> {
    let bad = |reason: String| TraceError::BadEvent { index, reason };
    let object = value.as_object().ok_or_else(|| {
        bad(format!(
            "expected an object such as {{\"op\":\"free\",\"id\":3}}, found {}",
            short(value)
        ))
    })?;
    let op = match object.get("op") {
        Some(Value::String(op)) => op.as_str(),
        Some(other) => {
            return Err(bad(format!(
                "\"op\" must be a string, found {}",
                short(other)
            )));
        }
        None => return Err(bad("no \"op\" (\"alloc\" or \"free\")".into())),
    };
    let allowed: &[&str] = match op {
        "alloc" => &["op", "id", "size", "stream"],
        "free" => &["op", "id"],
        _ => {
            return Err(TraceError::UnknownOp {
                index,
                op: op.to_string(),
            });
        }
    };
    let article = if op == "alloc" { "an" } else { "a" };
    if let Some(key) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown field {key:?} in {article} {op} event (it has {})",
            allowed[1..].join(", ")
        )));
    }
    let number = |name: &str, default: Option<u64>| -> Result<u64, TraceError> {
        match (object.get(name), default) {
            (Some(v), _) => v.as_u64().ok_or_else(|| {
                bad(format!(
                    "\"{name}\" must be a whole number ≥ 0, found {}",
                    short(v)
                ))
            }),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(bad(format!("{article} {op} event needs \"{name}\""))),
        }
    };
    let id = number("id", None)?;
    Ok(if op == "alloc" {
        TraceEvent::Alloc {
            id,
            size: number("size", None)?,
            stream: number("stream", Some(0))?,
        }
    } else {
        TraceEvent::Free { id }
    })
}

/// The top level of a trace file, read leniently so that the checks above can name what is wrong.
struct RawTrace {
    format: Option<Value>,
    version: Option<Value>,
    description: Option<Value>,
    events: Option<EventList>,
}

/// The `events` list, as JSON values; a syntax error inside it names the event it is in.
struct EventList(Vec<Value>);

/// serde_json appends " at line L column C" to errors; an error re-raised one level up gets its
/// position again, so the inner one is dropped.
fn without_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => &message[..i],
        _ => message,
    }
}

impl<'de> serde::Deserialize<'de> for EventList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = EventList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of events")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EventList, A::Error> {
                let mut values = Vec::new();
                loop {
                    match seq.next_element::<Value>() {
                        Ok(Some(value)) => values.push(value),
                        Ok(None) => return Ok(EventList(values)),
                        Err(e) => {
                            let message = e.to_string();
                            return Err(de::Error::custom(format!(
                                "event {}: {}",
                                values.len(),
                                without_position(&message)
                            )));
                        }
                    }
                }
            }
        }
        deserializer.deserialize_seq(ListVisitor)
    }
}

impl<'de> serde::Deserialize<'de> for RawTrace {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = RawTrace;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a trace object {{\"format\": \"{FORMAT}\", \"version\": {VERSION}, \"events\": [...]}}"
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTrace, A::Error> {
                let mut raw = RawTrace {
                    format: None,
                    version: None,
                    description: None,
                    events: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "format" => raw.format = Some(map.next_value()?),
                        "version" => raw.version = Some(map.next_value()?),
                        "description" => raw.description = Some(map.next_value()?),
                        "events" => raw.events = Some(map.next_value()?),
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(raw)
            }
        }
        deserializer.deserialize_map(TopVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::AllocatorConfig;
    use crate::raw::cpu::CpuBackend;

    const HEAD: &str = r#"{"format":"gpumem-alloc-trace","version":1,"events":"#;

    fn with_events(events: &str) -> String {
        format!("{HEAD}{events}}}")
    }

    fn error(text: &str) -> TraceError {
        AllocTrace::from_json(text).expect_err("the trace should be rejected")
    }

    #[test]
    fn a_written_trace_reads_back_equal() {
        let mut b = TraceBuilder::new();
        let x = b.alloc(512, 0);
        let y = b.alloc(3 << 20, 1);
        b.free(x);
        let _live = b.alloc(1, 0);
        b.free(y);
        let trace = b.finish("a \"quoted\" description");
        let read = AllocTrace::from_json(&trace.to_json()).expect("valid");
        assert_eq!(read, trace);
        let summary = read.validate().expect("valid");
        assert_eq!(
            (summary.allocs, summary.frees, summary.live_at_end),
            (3, 2, 1)
        );
        assert_eq!(summary.streams, 2);
        assert_eq!(summary.total_bytes, 512 + (3 << 20) + 1);
    }

    #[test]
    fn the_stream_defaults_to_zero() {
        let trace =
            AllocTrace::from_json(&with_events(r#"[{"op":"alloc","id":7,"size":10}]"#)).unwrap();
        assert_eq!(
            trace.events,
            vec![TraceEvent::Alloc {
                id: 7,
                size: 10,
                stream: 0
            }]
        );
    }

    #[test]
    fn an_unknown_op_names_the_event() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":0,"size":8},{"op":"realloc","id":0}]"#,
        ));
        assert_eq!(
            e,
            TraceError::UnknownOp {
                index: 1,
                op: "realloc".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "event 1: unknown op \"realloc\" (expected \"alloc\" or \"free\")"
        );
    }

    #[test]
    fn a_free_of_an_unknown_id_names_the_event() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":0,"size":8},{"op":"free","id":5}]"#,
        ));
        assert_eq!(e, TraceError::UnknownId { index: 1, id: 5 });
        assert_eq!(
            e.to_string(),
            "event 1: free of id 5, which no earlier event allocated"
        );
    }

    #[test]
    fn a_double_free_names_both_events() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":3,"size":8},{"op":"free","id":3},{"op":"free","id":3}]"#,
        ));
        assert_eq!(
            e,
            TraceError::DoubleFree {
                index: 2,
                id: 3,
                first: 1
            }
        );
    }

    #[test]
    fn a_reused_id_is_rejected() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":3,"size":8},{"op":"free","id":3},{"op":"alloc","id":3,"size":8}]"#,
        ));
        assert_eq!(
            e,
            TraceError::DuplicateId {
                index: 2,
                id: 3,
                first: 0
            }
        );
    }

    #[test]
    fn malformed_json_inside_the_events_names_the_event() {
        // Event 1 lacks the comma between two fields.
        let text = "{\"format\":\"gpumem-alloc-trace\",\"version\":1,\"events\":[\n\
                    {\"op\":\"alloc\",\"id\":0,\"size\":8},\n\
                    {\"op\":\"free\" \"id\":0}\n]}";
        let e = error(text);
        let TraceError::Malformed { message } = &e else {
            panic!("expected Malformed, got {e:?}");
        };
        assert!(message.starts_with("event 1: expected"), "{message}");
        assert!(message.ends_with("at line 3 column 13"), "{message}");
        assert_eq!(message.matches(" at line ").count(), 1, "{message}");
    }

    #[test]
    fn a_truncated_file_is_malformed() {
        let e = error(&format!("{HEAD}[{{\"op\":\"alloc\",\"id\":0,\"size\":8}},"));
        assert!(
            matches!(&e, TraceError::Malformed { message } if message.starts_with("event 1: ")),
            "{e}"
        );
    }

    #[test]
    fn missing_and_mistyped_fields_name_the_event() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":0,"size":8},{"op":"alloc","id":1}]"#,
        ));
        assert_eq!(e.to_string(), "event 1: an alloc event needs \"size\"");
        let e = error(&with_events(r#"[{"op":"alloc","id":0,"size":-8}]"#));
        assert_eq!(
            e.to_string(),
            "event 0: \"size\" must be a whole number ≥ 0, found -8"
        );
        let e = error(&with_events(r#"[{"op":"alloc","id":0,"size":0}]"#));
        assert_eq!(
            e.to_string(),
            "event 0: \"size\" must be at least 1 byte, found 0"
        );
        let e = error(&with_events(r#"[{"op":"free","id":0,"size":8}]"#));
        assert_eq!(
            e.to_string(),
            "event 0: unknown field \"size\" in a free event (it has id)"
        );
        let e = error(&with_events(r#"[[1,2]]"#));
        assert!(
            e.to_string().starts_with("event 0: expected an object"),
            "{e}"
        );
    }

    #[test]
    fn the_header_is_checked() {
        let e = error(r#"[{"op":"alloc","id":0,"size":8}]"#);
        assert!(
            matches!(&e, TraceError::Malformed { message } if message.contains("expected a trace object")),
            "{e}"
        );
        let e = error(r#"{"format":"something-else","version":1,"events":[]}"#);
        assert!(matches!(e, TraceError::NotATrace { .. }), "{e}");
        let e = error(r#"{"format":"gpumem-alloc-trace","version":2,"events":[]}"#);
        assert_eq!(
            e.to_string(),
            "trace format version 2 is not supported (this build reads version 1)"
        );
        let e = error(r#"{"format":"gpumem-alloc-trace","version":1}"#);
        assert_eq!(
            e.to_string(),
            "not a gpumem allocation trace: no \"events\" list"
        );
    }

    #[test]
    fn a_snapshot_trace_exports_by_id_and_skips_frees_of_older_blocks() {
        let entry = |action, addr, size, stream| TraceEntry {
            action,
            addr,
            size,
            stream,
            allocated: 0,
            reserved: 0,
            time_us: 0,
            frames: Vec::new(),
            label: None,
        };
        let entries = [
            entry(TraceAction::FreeRequested, 0x900, 512, 0), // allocated before recording began
            entry(TraceAction::SegmentAlloc, 0x1000, 2 << 20, 0),
            entry(TraceAction::Alloc, 0x1000, 512, 0),
            entry(TraceAction::Alloc, 0x1200, 1024, 77),
            entry(TraceAction::FreeRequested, 0x1000, 512, 0),
            entry(TraceAction::Alloc, 0x1000, 512, 0), // the same address, a new block
            entry(TraceAction::FreeRequested, 0x1200, 1024, 77),
        ];
        let trace = AllocTrace::from_entries(&entries, "test");
        use TraceEvent::{Alloc, Free};
        assert_eq!(
            trace.events,
            vec![
                Alloc {
                    id: 0,
                    size: 512,
                    stream: 0
                },
                Alloc {
                    id: 1,
                    size: 1024,
                    stream: 1
                },
                Free { id: 0 },
                Alloc {
                    id: 2,
                    size: 512,
                    stream: 0
                },
                Free { id: 1 },
            ]
        );
        trace.validate().expect("an exported trace is valid");
    }

    #[test]
    fn replay_reports_the_peaks_the_rules_give() {
        // 700 KiB and 300 KiB share one 2 MiB small segment; 3 MiB takes a 20 MiB large one.
        let mut b = TraceBuilder::new();
        let a = b.alloc(700 << 10, 0);
        let c = b.alloc(300 << 10, 0);
        let d = b.alloc(3 << 20, 0);
        b.free(a);
        b.free(c);
        b.free(d);
        let trace = b.finish("rules");
        let allocator =
            CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
        let stats = replay(&allocator, &trace).expect("replay");
        assert_eq!(stats.events, 6);
        assert_eq!(stats.peak_requested, (1000 << 10) + (3 << 20));
        assert_eq!(stats.peak_allocated, (1000 << 10) + (3 << 20));
        assert_eq!(stats.peak_reserved, (2 << 20) + (20 << 20));
        assert_eq!(stats.num_device_alloc, 2);
        assert_eq!(allocator.reserved_bytes(), 0, "replay empties the cache");
    }

    #[test]
    fn replay_on_a_too_small_device_names_the_event() {
        let mut b = TraceBuilder::new();
        b.alloc(1 << 20, 0);
        b.alloc(30 << 20, 0);
        let trace = b.finish("too big");
        let allocator =
            CachingAllocator::new(CpuBackend::new(16 << 20), "cpu", AllocatorConfig::default());
        let e = replay(&allocator, &trace).expect_err("out of memory");
        assert!(matches!(e, ReplayError::Alloc { index: 1, .. }), "{e}");
        assert_eq!(allocator.reserved_bytes(), 0);
    }
}
