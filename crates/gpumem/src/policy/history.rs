//! `record_memory_history` and `snapshot`: what the allocator holds now and how it got there.

use crate::policy::stats::{DeviceStats, Pool};
use crate::policy::streams::StreamId;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::panic::Location;

/// How many trace entries are kept by default: all of them, as torch's `max_entries=sys.maxsize`.
pub const MAX_TRACE_ENTRIES: usize = usize::MAX;

/// What `record_memory_history` keeps: torch's `enabled` argument (`None` turns recording off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryLevel {
    /// torch's `"state"`: information about the memory allocated now; the trace keeps one entry.
    State,
    /// torch's `"all"`: additionally a trace of every allocator event.
    All,
}

/// Which events keep the stack of the call that caused them: torch's `context` argument
/// (`None` keeps none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ContextLevel {
    /// torch's `"state"`: stacks of the memory allocated now only; trace entries carry none.
    State,
    /// torch's `"alloc"`: also the trace's alloc entries.
    Alloc,
    /// torch's `"all"`: also the frees (gpumem knows no stack for a free: `Drop` has no caller).
    All,
}

/// Which frames a stack holds: torch's `stacks` argument. gpumem's frames are Rust call sites
/// (`#[track_caller]`), so both give the same frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stacks {
    /// torch's `"python"`: Python, TorchScript and inductor frames.
    Python,
    /// torch's `"all"`: also C++ frames.
    All,
}

/// A set of trace actions: `record_memory_history`'s `skip_actions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActionSet(u16);

impl ActionSet {
    /// The actions named, with torch's names (`"alloc"`, `"free_requested"`, ...). torch 2.15
    /// also accepts `"annotate"` (metadata attached to a live allocation), which gpumem never
    /// records, so naming it skips nothing; any other name is torch's error,
    /// `Unknown TraceEntry action: <name>` (`parseTraceEntryAction`,
    /// c10/core/CachingDeviceAllocator.h in the 2.15.0 wheel).
    pub fn parse(names: &[&str]) -> crate::error::Result<ActionSet> {
        let mut set = ActionSet::default();
        for name in names {
            match TraceAction::from_torch_name(name) {
                Some(action) => set = set.with(action),
                None if *name == "annotate" => {}
                None => {
                    return Err(crate::error::Error::HistoryOption {
                        message: format!("Unknown TraceEntry action: {name}"),
                    });
                }
            }
        }
        Ok(set)
    }

    /// The set with `action` added.
    pub fn with(self, action: TraceAction) -> ActionSet {
        ActionSet(self.0 | 1 << action as u16)
    }

    /// Whether `action` is in the set.
    pub fn contains(self, action: TraceAction) -> bool {
        self.0 & (1 << action as u16) != 0
    }
}

/// The options of `record_memory_history`, as torch 2.15's `_record_memory_history(enabled,
/// context, stacks, max_entries, clear_history, skip_actions, record_pinned_host_memory,
/// record_cuda)` (torch/cuda/memory.py in the 2.15.0 wheel; `compile_context`,
/// `global_record_annotations` and `device` have no counterpart here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryOptions {
    /// `None` stops recording (and, as torch's device allocator, drops the device trace).
    pub enabled: Option<HistoryLevel>,
    /// Which entries keep their call's stack (torch's default `"all"`).
    pub context: Option<ContextLevel>,
    /// Which frames (torch's default `"all"`; no difference in gpumem).
    pub stacks: Stacks,
    /// The most trace entries kept, the oldest dropped first (torch's ring buffer); at least 1.
    pub max_entries: usize,
    /// Empties the trace (device and host) before recording goes on.
    pub clear_history: bool,
    /// Actions not recorded in the device trace (torch 2.15's host trace ignores them).
    pub skip_actions: ActionSet,
    /// Also records the pinned host allocator: the snapshot's `host_segments` and
    /// `host_traces`. Needs `enabled`.
    pub record_pinned_host_memory: bool,
    /// Records the device allocator (`false` with `record_pinned_host_memory` records only
    /// pinned host memory and leaves the device allocator's recording as it was).
    pub record_cuda: bool,
}

impl Default for HistoryOptions {
    /// torch's defaults: `enabled="all"`, `context="all"`, `stacks="all"`,
    /// `max_entries=sys.maxsize`, nothing cleared or skipped, device only.
    fn default() -> Self {
        HistoryOptions {
            enabled: Some(HistoryLevel::All),
            context: Some(ContextLevel::All),
            stacks: Stacks::All,
            max_entries: MAX_TRACE_ENTRIES,
            clear_history: false,
            skip_actions: ActionSet::default(),
            record_pinned_host_memory: false,
            record_cuda: true,
        }
    }
}

impl HistoryOptions {
    /// Recording off (torch's `enabled=None`).
    pub fn off() -> Self {
        HistoryOptions {
            enabled: None,
            ..HistoryOptions::default()
        }
    }

    /// The defaults with `enabled`, `context` and `stacks` given as torch's strings, and
    /// `record_pinned_host_memory`, checked in torch 2.15's order with its messages (pinned
    /// recording without `enabled` first, then `expected state to be 'state', 'all', or None`,
    /// the context's, the stacks').
    pub fn from_torch(
        enabled: Option<&str>,
        context: Option<&str>,
        stacks: &str,
        record_pinned_host_memory: bool,
    ) -> crate::error::Result<HistoryOptions> {
        let bad = |message: &str| crate::error::Error::HistoryOption {
            message: message.to_string(),
        };
        HistoryOptions {
            enabled: enabled.map(|_| HistoryLevel::All),
            record_pinned_host_memory,
            ..HistoryOptions::default()
        }
        .check()?;
        let enabled = match enabled {
            None => None,
            Some("state") => Some(HistoryLevel::State),
            Some("all") => Some(HistoryLevel::All),
            Some(_) => return Err(bad("expected state to be 'state', 'all', or None")),
        };
        let context = match context {
            None => None,
            Some("state") => Some(ContextLevel::State),
            Some("alloc") => Some(ContextLevel::Alloc),
            Some("all") => Some(ContextLevel::All),
            Some(_) => {
                return Err(bad(
                    "expected context to be 'state', 'alloc', 'all', or None",
                ));
            }
        };
        let stacks = match stacks {
            "python" => Stacks::Python,
            "all" => Stacks::All,
            _ => return Err(bad("expected stacks to be 'python', or 'all'")),
        };
        Ok(HistoryOptions {
            enabled,
            context,
            stacks,
            record_pinned_host_memory,
            ..HistoryOptions::default()
        })
    }

    /// torch 2.15's check before anything changes: pinned recording needs recording on.
    pub fn check(&self) -> crate::error::Result<()> {
        if self.record_pinned_host_memory && self.enabled.is_none() {
            return Err(crate::error::Error::HistoryOption {
                message: "record_pinned_host_memory requires memory history recording to be \
                          enabled"
                    .into(),
            });
        }
        Ok(())
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    /// A block was handed out.
    Alloc,
    /// A block was freed by the program (torch's `free_requested`); with pending uses on other
    /// streams it stays active until `free_completed`.
    #[serde(alias = "free")]
    FreeRequested,
    /// A freed block went back to the cache (torch's `free_completed`).
    FreeCompleted,
    /// A segment was reserved from the device.
    SegmentAlloc,
    /// A segment was returned to the device.
    SegmentFree,
    /// Pages were mapped into an expandable segment (torch's `segment_map`).
    SegmentMap,
    /// Pages of an expandable segment were unmapped and returned (torch's `segment_unmap`).
    SegmentUnmap,
    /// An allocation failed for lack of memory; `addr` holds the device's free bytes (torch
    /// writes it as `device_free`).
    Oom,
    /// A snapshot was taken; `size` is the active bytes then.
    Snapshot,
    /// A named marker the program put into the history ([`History::annotate`]); `label` holds
    /// its name. torch keeps these apart from the trace, in the snapshot's
    /// `external_annotations` (`record_function` ranges while history is recorded:
    /// torch/csrc/cuda/memory_snapshot.cpp at pytorch/pytorch 127b7ad), so the pickle writes
    /// them there.
    Annotation,
}

impl TraceAction {
    /// torch's name for the action in a snapshot's `device_traces`.
    pub fn torch_name(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Oom => "oom",
            TraceAction::Snapshot => "snapshot",
            TraceAction::Annotation => "annotation",
        }
    }

    /// The action torch calls `name` in `device_traces`, if any (never [`TraceAction::Annotation`]:
    /// torch writes annotations elsewhere).
    pub fn from_torch_name(name: &str) -> Option<TraceAction> {
        [
            TraceAction::Alloc,
            TraceAction::FreeRequested,
            TraceAction::FreeCompleted,
            TraceAction::SegmentAlloc,
            TraceAction::SegmentFree,
            TraceAction::SegmentMap,
            TraceAction::SegmentUnmap,
            TraceAction::Oom,
            TraceAction::Snapshot,
        ]
        .into_iter()
        .find(|a| a.torch_name() == name)
    }
}

/// Where in the program an event happened: torch's `frames` item (`filename`, `line`, `name`).
/// gpumem knows the caller of `malloc` through `#[track_caller]`: a file and a line, no function
/// name (`name` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Frame {
    /// The source file.
    pub filename: Cow<'static, str>,
    /// The line in it.
    pub line: u64,
    /// The function (empty: `#[track_caller]` gives none).
    pub name: Cow<'static, str>,
}

impl Frame {
    /// The frame of a call site.
    pub fn at(site: &'static Location<'static>) -> Frame {
        Frame {
            filename: Cow::Borrowed(site.file()),
            line: u64::from(site.line()),
            name: Cow::Borrowed(""),
        }
    }
}

/// One event, with the totals right after it (so a timeline can be drawn from the trace alone).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// The block's or segment's address; for an OOM the device's free bytes (torch's
    /// `device_free`).
    pub addr: u64,
    /// Bytes: for alloc and free the size that was asked for (as torch's trace), for segments
    /// their size, for an OOM the segment that could not be reserved.
    pub size: u64,
    /// The stream it belongs to.
    pub stream: u64,
    /// `allocated_bytes.all.current` after the event.
    pub allocated: u64,
    /// `reserved_bytes.all.current` after the event.
    pub reserved: u64,
    /// Microseconds since the Unix epoch when it happened (torch's `time_us`).
    #[serde(default)]
    pub time_us: u64,
    /// The stack that led to it, innermost first (torch's `frames`): gpumem records one frame,
    /// the call of `malloc` (alloc, segment_alloc, segment_map and oom entries recorded during a
    /// `malloc`; none for frees); a replay writes the frames of the snapshot it replays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
    /// The name of an annotation entry (none for the allocator's own events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The trace recorder.
#[derive(Debug)]
pub struct History {
    enabled: bool,
    context: Option<ContextLevel>,
    skip: ActionSet,
    max_entries: usize,
    entries: VecDeque<TraceEntry>,
    call_site: Option<&'static Location<'static>>,
}

impl Default for History {
    fn default() -> Self {
        History {
            enabled: false,
            context: None,
            skip: ActionSet::default(),
            max_entries: MAX_TRACE_ENTRIES,
            entries: VecDeque::new(),
            call_site: None,
        }
    }
}

impl History {
    /// Applies `record_memory_history`'s options to the device trace with torch's semantics
    /// (`recordHistory` in c10/cuda/CUDACachingAllocator.cpp, torch 2.x): turning recording off
    /// drops the trace, and so does `clear_history`; turning it on again, or on while on, keeps
    /// what is recorded and sets the bound; `"state"` keeps one entry (torch's
    /// `max_entries = enabled == "all" ? max_entries : 1`). `record_cuda: false` with recording
    /// on leaves the device trace as it is.
    pub fn set_options(&mut self, options: HistoryOptions) {
        if options.enabled.is_some() && !options.record_cuda {
            return;
        }
        self.enabled = options.enabled.is_some();
        self.context = options.enabled.and(options.context);
        self.skip = options.skip_actions;
        self.max_entries = match options.enabled {
            Some(HistoryLevel::All) => options.max_entries.max(1),
            Some(HistoryLevel::State) | None => 1,
        };
        if !self.enabled || options.clear_history {
            self.entries.clear();
        }
        while self.entries.len() > self.max_entries {
            self.entries.pop_front();
        }
    }

    /// The call of `malloc` now running: the alloc, segment_alloc, segment_map and oom entries it
    /// records carry it as their frame (only `malloc` records those).
    #[inline]
    pub fn set_call_site(&mut self, site: Option<&'static Location<'static>>) {
        self.call_site = site;
    }

    /// Whether events are being recorded.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Adds an entry when recording.
    #[inline]
    pub fn record(
        &mut self,
        action: TraceAction,
        addr: u64,
        size: usize,
        stream: StreamId,
        stats: &DeviceStats,
    ) {
        if !self.enabled || self.skip.contains(action) {
            return;
        }
        if self.entries.len() >= self.max_entries {
            self.entries.pop_front();
        }
        self.entries.push_back(TraceEntry {
            action,
            addr,
            size: size as u64,
            stream: stream.0,
            allocated: stats.allocated_bytes.all.current,
            reserved: stats.reserved_bytes.all.current,
            time_us: now_us(),
            frames: match action {
                TraceAction::Alloc
                | TraceAction::SegmentAlloc
                | TraceAction::SegmentMap
                | TraceAction::Oom
                    if self.context >= Some(ContextLevel::Alloc) =>
                {
                    self.call_site.map(Frame::at).into_iter().collect()
                }
                _ => Vec::new(),
            },
            label: None,
        });
    }

    /// Adds an annotation entry named `label` when recording (torch's `recordAnnotation`): it
    /// marks a point in the program and changes nothing; the totals are those of the moment.
    pub fn annotate(&mut self, label: &str, stats: &DeviceStats) {
        if !self.enabled || self.skip.contains(TraceAction::Annotation) {
            return;
        }
        self.record(TraceAction::Annotation, 0, 0, StreamId(0), stats);
        if let Some(e) = self.entries.back_mut() {
            e.label = Some(label.to_string());
        }
    }

    /// The recorded entries, oldest first.
    pub fn entries(&self) -> Vec<TraceEntry> {
        self.entries.iter().cloned().collect()
    }
}

/// Microseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The state of one block in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Live: handed out and not yet freed.
    ActiveAllocated,
    /// Freed, but another stream may still use it.
    ActivePendingFree,
    /// Cached and free.
    Inactive,
}

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BlockInfo {
    /// Start address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes asked for (0 when free).
    pub requested_size: u64,
    /// Live, pending or free.
    pub state: BlockState,
}

/// One reserved segment and its blocks, in address order.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SegmentInfo {
    /// Start address.
    pub address: u64,
    /// Size in bytes.
    pub total_size: u64,
    /// The stream its blocks serve.
    pub stream: u64,
    /// `small` or `large`.
    pub segment_type: String,
    /// Bytes in live blocks.
    pub allocated_size: u64,
    /// Bytes in live or pending blocks.
    pub active_size: u64,
    /// Whether this is a mapped range of an expandable segment (torch reports one segment per
    /// contiguous mapped range).
    #[serde(default)]
    pub is_expandable: bool,
    /// The blocks, in address order.
    pub blocks: Vec<BlockInfo>,
}

impl SegmentInfo {
    /// A segment from its blocks (address order).
    pub fn new(
        address: u64,
        stream: StreamId,
        pool: Pool,
        is_expandable: bool,
        blocks: Vec<BlockInfo>,
    ) -> Self {
        let sum = |f: fn(&BlockInfo) -> bool| blocks.iter().filter(|b| f(b)).map(|b| b.size).sum();
        SegmentInfo {
            address,
            total_size: blocks.iter().map(|b| b.size).sum(),
            stream: stream.0,
            segment_type: match pool {
                Pool::Small => "small".into(),
                Pool::Large => "large".into(),
            },
            allocated_size: sum(|b| b.state == BlockState::ActiveAllocated),
            active_size: sum(|b| b.state != BlockState::Inactive),
            is_expandable,
            blocks,
        }
    }
}

/// One block of the pinned host allocator in a snapshot (torch 2.15's `HostSegmentInfo`: the host
/// allocator never splits a block, so each is a segment of its own).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostSegmentInfo {
    /// Its address.
    pub address: u64,
    /// Its size in bytes (a power of two).
    pub size: u64,
    /// Handed out now.
    pub allocated: bool,
    /// Handed out, or freed with copies that may still use it.
    pub active: bool,
}

/// `torch.cuda.memory._snapshot()`: segments now, and the trace since recording began.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Every reserved segment, by address.
    pub segments: Vec<SegmentInfo>,
    /// Recorded events, oldest first (empty unless `record_memory_history(true)`).
    pub trace: Vec<TraceEntry>,
    /// The allocator's settings when the snapshot was taken (torch's `allocator_settings`).
    #[serde(skip)]
    pub allocator_settings: crate::policy::config::AllocatorConfig,
    /// The pinned host allocator's blocks, when `record_pinned_host_memory` is on (torch 2.15's
    /// `host_segments`; empty otherwise, as torch's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_segments: Vec<HostSegmentInfo>,
    /// The pinned host allocator's trace (torch 2.15's `host_traces`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_traces: Vec<TraceEntry>,
}

impl Snapshot {
    /// The snapshot as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a snapshot always serialises")
    }

    /// Reads a snapshot written by `to_json`.
    pub fn from_json(text: &str) -> Result<Snapshot, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// The variable with which `workbook pictures` asks a walkthrough for its allocator snapshot.
pub const SNAPSHOT_VAR: &str = "GPUMEM_SNAPSHOT";
