//! Writing a snapshot as torch's `_dump_snapshot` does: a protocol-4 pickle of the snapshot dict.

use super::opcodes::*;
use super::{PROTOCOL, SnapshotPickleError};
use crate::policy::config::AllocatorConfig;
use crate::policy::history::{BlockState, Frame, Snapshot, TraceAction, TraceEntry};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

/// Writes `snapshot` to `path` as torch's `_dump_snapshot` does (a protocol-4 pickle).
pub fn dump_snapshot(snapshot: &Snapshot, path: &Path) -> Result<(), SnapshotPickleError> {
    let io_error = |source| SnapshotPickleError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::create(path).map_err(io_error)?;
    let mut out = io::BufWriter::new(file);
    write_snapshot(snapshot, &mut out).map_err(io_error)?;
    out.flush().map_err(io_error)
}

/// The device index of `cpu` (0) or `cuda:N` (N), for `device` and the place in `device_traces`.
fn device_index(device: &str) -> usize {
    device
        .strip_prefix("cuda:")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Writes `snapshot` in torch's schema as a protocol-4 pickle.
pub fn write_snapshot(snapshot: &Snapshot, out: &mut impl Write) -> io::Result<()> {
    let mut p = Pickler { out };
    let device = device_index(&snapshot.device);
    p.raw(&[PROTO, PROTOCOL])?;
    p.begin_dict()?;

    let (segment_frames, block_frames) = live_frames(&snapshot.trace);
    p.str("segments")?;
    p.begin_list()?;
    for s in &snapshot.segments {
        p.begin_dict()?;
        p.key_int("device", device as i128)?;
        p.key_int("address", s.address.into())?;
        p.key_int("total_size", s.total_size.into())?;
        p.key_int("allocated_size", s.allocated_size.into())?;
        p.key_int("active_size", s.active_size.into())?;
        let requested: u64 = s.blocks.iter().map(|b| b.requested_size).sum();
        p.key_int("requested_size", requested.into())?;
        p.key_int("stream", s.stream.into())?;
        p.str("segment_type")?;
        p.str(&s.segment_type)?;
        p.str("segment_pool_id")?;
        p.int(0)?;
        p.int(0)?;
        p.raw(&[TUPLE2])?;
        p.str("is_expandable")?;
        p.bool(s.is_expandable)?;
        p.frames(segment_frames.get(&s.address).copied().unwrap_or(&[]))?;
        p.str("blocks")?;
        p.begin_list()?;
        for b in &s.blocks {
            p.begin_dict()?;
            p.key_int("address", b.address.into())?;
            p.key_int("size", b.size.into())?;
            p.key_int("requested_size", b.requested_size.into())?;
            p.str("state")?;
            p.str(match b.state {
                BlockState::ActiveAllocated => "active_allocated",
                BlockState::ActivePendingFree => "active_pending_free",
                BlockState::Inactive => "inactive",
            })?;
            let frames = match b.state {
                BlockState::Inactive => None,
                _ => block_frames.get(&b.address).copied(),
            };
            p.frames(frames.unwrap_or(&[]))?;
            p.end_dict()?;
        }
        p.end_list()?;
        p.end_dict()?;
    }
    p.end_list()?;

    p.str("device_traces")?;
    p.begin_list()?;
    for _ in 0..device {
        p.raw(&[EMPTY_LIST])?;
    }
    p.begin_list()?;
    for e in snapshot
        .trace
        .iter()
        .filter(|e| e.action != TraceAction::Annotation)
    {
        p.trace_entry(e)?;
    }
    p.end_list()?;
    p.end_list()?;

    p.str("allocator_settings")?;
    write_settings(&mut p, &snapshot.allocator_settings)?;

    // Annotations as torch writes them (memory_snapshot.cpp at pytorch/pytorch 127b7ad):
    // `{name, stage, device, time_us}`, apart from the trace (a `record_function` range's start
    // has stage `START`).
    p.str("external_annotations")?;
    p.begin_list()?;
    for e in &snapshot.trace {
        if let (TraceAction::Annotation, Some(label)) = (e.action, &e.label) {
            p.begin_dict()?;
            p.str("name")?;
            p.str(label)?;
            p.str("stage")?;
            p.str("START")?;
            p.key_int("device", device as i128)?;
            p.key_int("time_us", e.time_us.into())?;
            p.end_dict()?;
        }
    }
    p.end_list()?;

    write_host(&mut p, snapshot)?;

    p.end_dict()?;
    p.raw(&[STOP])
}

/// `host_segments` and `host_traces` as torch 2.15 writes them (`THCPModule_memorySnapshot` in
/// its libtorch_python.so, read in the 2.15.0 wheel: both keys always there, empty lists unless
/// `record_pinned_host_memory` recorded): each pinned block is a segment of device -1 with one
/// block the whole size (`requested_size` is the size; state `active_allocated`, else
/// `active_pending_free` while copies may use it, else `inactive`), stream 0, type `small`, pool
/// (0, 0); the trace entries are written as the device's.
fn write_host<W: Write>(p: &mut Pickler<'_, W>, snapshot: &Snapshot) -> io::Result<()> {
    p.str("host_segments")?;
    p.begin_list()?;
    for s in &snapshot.host_segments {
        let state = match (s.allocated, s.active) {
            (true, _) => "active_allocated",
            (false, true) => "active_pending_free",
            (false, false) => "inactive",
        };
        p.begin_dict()?;
        p.key_int("device", -1)?;
        p.key_int("address", s.address.into())?;
        p.key_int("total_size", s.size.into())?;
        p.key_int(
            "allocated_size",
            if s.allocated { s.size } else { 0 }.into(),
        )?;
        p.key_int("active_size", if s.active { s.size } else { 0 }.into())?;
        p.key_int("requested_size", s.size.into())?;
        p.key_int("stream", 0)?;
        p.str("segment_type")?;
        p.str("small")?;
        p.str("segment_pool_id")?;
        p.int(0)?;
        p.int(0)?;
        p.raw(&[TUPLE2])?;
        p.str("is_expandable")?;
        p.bool(false)?;
        p.frames(&[])?;
        p.str("blocks")?;
        p.begin_list()?;
        p.begin_dict()?;
        p.key_int("address", s.address.into())?;
        p.key_int("size", s.size.into())?;
        p.key_int("requested_size", s.size.into())?;
        p.str("state")?;
        p.str(state)?;
        p.frames(&[])?;
        p.end_dict()?;
        p.end_list()?;
        p.end_dict()?;
    }
    p.end_list()?;
    p.str("host_traces")?;
    p.begin_list()?;
    for e in &snapshot.host_traces {
        p.trace_entry(e)?;
    }
    p.end_list()
}

/// `allocator_settings` with torch's keys (`max_split_size` is -1 when unset: torch writes its
/// `SIZE_MAX` as an `int64`).
fn write_settings<W: Write>(p: &mut Pickler<'_, W>, c: &AllocatorConfig) -> io::Result<()> {
    p.begin_dict()?;
    p.str("PYTORCH_CUDA_ALLOC_CONF")?;
    p.str(&c.text)?;
    let max_split = if c.max_split_size == usize::MAX {
        -1
    } else {
        c.max_split_size as i128
    };
    p.key_int("max_split_size", max_split)?;
    p.str("garbage_collection_threshold")?;
    p.float(c.garbage_collection_threshold)?;
    p.str("expandable_segments")?;
    p.bool(c.expandable_segments)?;
    p.key_int(
        "pinned_num_register_threads",
        c.pinned_num_register_threads as i128,
    )?;
    p.str("release_lock_on_cudamalloc")?;
    p.bool(c.release_lock_on_cudamalloc)?;
    p.str("pinned_use_cuda_host_register")?;
    p.bool(c.pinned_use_cuda_host_register)?;
    p.str("graph_capture_record_stream_reuse")?;
    p.bool(c.graph_capture_record_stream_reuse)?;
    p.str("roundup_power2_divisions")?;
    p.begin_dict()?;
    for (i, d) in c.roundup_power2_divisions.iter().enumerate() {
        p.key_int(&(1u64 << i).to_string(), *d as i128)?;
    }
    p.end_dict()?;
    p.end_dict()
}

/// Writes pickle opcodes. Dicts and lists are written as `EMPTY_* MARK items SETITEMS/APPENDS`.
struct Pickler<'a, W: Write> {
    out: &'a mut W,
}

impl<W: Write> Pickler<'_, W> {
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    fn begin_dict(&mut self) -> io::Result<()> {
        self.raw(&[EMPTY_DICT, MARK])
    }

    fn end_dict(&mut self) -> io::Result<()> {
        self.raw(&[SETITEMS])
    }

    fn begin_list(&mut self) -> io::Result<()> {
        self.raw(&[EMPTY_LIST, MARK])
    }

    fn end_list(&mut self) -> io::Result<()> {
        self.raw(&[APPENDS])
    }

    fn str(&mut self, s: &str) -> io::Result<()> {
        let len = s.len();
        if len < 256 {
            self.raw(&[SHORT_BINUNICODE, len as u8])?;
        } else {
            self.raw(&[BINUNICODE])?;
            self.raw(&(len as u32).to_le_bytes())?;
        }
        self.raw(s.as_bytes())
    }

    /// An int in the shortest form Python's pickler would use.
    fn int(&mut self, v: i128) -> io::Result<()> {
        if (0..256).contains(&v) {
            self.raw(&[BININT1, v as u8])
        } else if (0..65536).contains(&v) {
            self.raw(&[BININT2])?;
            self.raw(&(v as u16).to_le_bytes())
        } else if (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
            self.raw(&[BININT])?;
            self.raw(&(v as i32).to_le_bytes())
        } else {
            // LONG1: little-endian two's complement, as few bytes as keep the sign.
            let bytes = v.to_le_bytes();
            let mut n = bytes.len();
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.raw(&[LONG1, n as u8])?;
            self.raw(&bytes[..n])
        }
    }

    fn key_int(&mut self, key: &str, v: i128) -> io::Result<()> {
        self.str(key)?;
        self.int(v)
    }

    fn bool(&mut self, b: bool) -> io::Result<()> {
        self.raw(&[if b { NEWTRUE } else { NEWFALSE }])
    }

    fn float(&mut self, f: f64) -> io::Result<()> {
        self.raw(&[BINFLOAT])?;
        self.raw(&f.to_be_bytes())
    }

    /// One trace entry as torch 2.15 writes it (the trace-entry function of
    /// `THCPModule_memorySnapshot` in the 2.15.0 wheel's libtorch_python.so): `action`, `addr`
    /// (`device_free` for an OOM), `size`, `stream`, `time_us`, `compile_context` and
    /// `user_metadata` (empty strings: gpumem records neither), `pool_id` ((0, 0): gpumem has no
    /// private pools), and `frames` last, only for an entry with a stack (torch adds the key only
    /// when the entry has a recorded context).
    fn trace_entry(&mut self, e: &TraceEntry) -> io::Result<()> {
        self.begin_dict()?;
        self.str("action")?;
        self.str(e.action.torch_name())?;
        let addr_key = if e.action == TraceAction::Oom {
            "device_free"
        } else {
            "addr"
        };
        self.key_int(addr_key, e.addr.into())?;
        self.key_int("size", e.size.into())?;
        self.key_int("stream", e.stream.into())?;
        self.key_int("time_us", e.time_us.into())?;
        self.str("compile_context")?;
        self.str("")?;
        self.str("user_metadata")?;
        self.str("")?;
        self.str("pool_id")?;
        self.int(0)?;
        self.int(0)?;
        self.raw(&[TUPLE2])?;
        if !e.frames.is_empty() {
            self.frames(&e.frames)?;
        }
        self.end_dict()
    }

    /// The `frames` key and its list of `{filename, line, name}` dicts.
    fn frames(&mut self, frames: &[Frame]) -> io::Result<()> {
        self.str("frames")?;
        if frames.is_empty() {
            return self.raw(&[EMPTY_LIST]);
        }
        self.begin_list()?;
        for f in frames {
            self.begin_dict()?;
            self.str("filename")?;
            self.str(&f.filename)?;
            self.key_int("line", f.line.into())?;
            self.str("name")?;
            self.str(&f.name)?;
            self.end_dict()?;
        }
        self.end_list()
    }
}

/// The frames torch gives a snapshot's segments and live blocks: those of the call that reserved
/// the segment (`segment_alloc`, or the `segment_map` that grew an expandable one) and of the
/// call that allocated the block (`alloc`), from the trace, by address. A block or segment whose
/// event is not in the trace (recorded before history was on, or dropped by `max_entries`) gets
/// none.
#[allow(clippy::type_complexity)] // two maps of the same shape, named where they are used
fn live_frames(trace: &[TraceEntry]) -> (HashMap<u64, &[Frame]>, HashMap<u64, &[Frame]>) {
    let mut segments = HashMap::new();
    let mut blocks = HashMap::new();
    for e in trace {
        match e.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                segments.entry(e.addr).or_insert(e.frames.as_slice());
            }
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                segments.remove(&e.addr);
            }
            TraceAction::Alloc => {
                blocks.insert(e.addr, e.frames.as_slice());
            }
            TraceAction::FreeCompleted => {
                blocks.remove(&e.addr);
            }
            _ => {}
        }
    }
    (segments, blocks)
}
