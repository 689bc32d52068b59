//! `record_memory_history` and `snapshot`: what the allocator holds now and how it got there.

use crate::allocator::StreamId;
use crate::stats::{DeviceStats, Pool};
use std::collections::VecDeque;

/// How many trace entries are kept (the oldest go first), as torch's default `max_entries`.
pub const MAX_TRACE_ENTRIES: usize = 100_000;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    /// A block was handed out.
    Alloc,
    /// A block was given back to the cache.
    Free,
    /// A segment was reserved from the device.
    SegmentAlloc,
    /// A segment was returned to the device.
    SegmentFree,
    /// Pages were mapped into an expandable segment (torch's `segment_map`).
    SegmentMap,
    /// Pages of an expandable segment were unmapped and returned (torch's `segment_unmap`).
    SegmentUnmap,
    /// An allocation failed for lack of memory.
    Oom,
}

/// One event, with the totals right after it (so a timeline can be drawn from the trace alone).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// The block's or segment's address (0 for an OOM).
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
}

/// The trace recorder.
#[derive(Debug, Default)]
pub struct History {
    enabled: bool,
    entries: VecDeque<TraceEntry>,
}

impl History {
    /// Turns recording on or off; turning it on starts a fresh trace.
    pub fn set_enabled(&mut self, enabled: bool) {
        if enabled && !self.enabled {
            self.entries.clear();
        }
        self.enabled = enabled;
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
        if !self.enabled {
            return;
        }
        if self.entries.len() == MAX_TRACE_ENTRIES {
            self.entries.pop_front();
        }
        self.entries.push_back(TraceEntry {
            action,
            addr,
            size: size as u64,
            stream: stream.0,
            allocated: stats.allocated_bytes.all.current,
            reserved: stats.reserved_bytes.all.current,
        });
    }

    /// The recorded entries, oldest first.
    pub fn entries(&self) -> Vec<TraceEntry> {
        self.entries.iter().cloned().collect()
    }
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

/// `torch.cuda.memory._snapshot()`: segments now, and the trace since recording began.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Every reserved segment, by address.
    pub segments: Vec<SegmentInfo>,
    /// Recorded events, oldest first (empty unless `record_memory_history(true)`).
    pub trace: Vec<TraceEntry>,
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

/// A snapshot asked for with `GPUMEM_SNAPSHOT=<file>`: the book's pictures are drawn from it.
#[derive(Debug, Clone, Default)]
pub struct SnapshotRequest {
    file: Option<std::path::PathBuf>,
}

impl SnapshotRequest {
    /// Reads `GPUMEM_SNAPSHOT`; when it names a file, starts recording `dev`'s history from here.
    pub fn from_env(dev: &crate::Device) -> SnapshotRequest {
        let file = std::env::var_os(SNAPSHOT_VAR)
            .filter(|f| !f.is_empty())
            .map(Into::into);
        if file.is_some() {
            dev.record_memory_history(true);
        }
        SnapshotRequest { file }
    }

    /// Whether a snapshot was asked for.
    pub fn is_requested(&self) -> bool {
        self.file.is_some()
    }

    /// Writes `dev`'s snapshot (segments now, and the history) to the file asked for, if any.
    pub fn write(&self, dev: &crate::Device) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        std::fs::write(file, dev.snapshot().to_json()).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("writing the snapshot to {}: {e}", file.display()),
            )
        })
    }
}
