//! Snapshots as PyTorch writes them: `torch.cuda.memory._dump_snapshot("snap.pickle")` pickles the
//! dict of `torch.cuda.memory._snapshot()` (keys as in torch/csrc/cuda/memory_snapshot.cpp, torch
//! 2.x): `segments` (each with `device`, `address`, `total_size`, `allocated_size`, `active_size`,
//! `requested_size`, `stream`, `segment_type`, `segment_pool_id`, `is_expandable`, `frames`,
//! `blocks`), `device_traces` (one list of entries per device: `action`, `addr` or, for `oom`,
//! `device_free`, `size`, `stream`, `time_us`, `frames`) and `allocator_settings`.
//!
//! [`write_snapshot`] writes a gpumem [`Snapshot`] in that schema as a protocol-4 pickle, which
//! Python's `pickle.load` and PyTorch's viewer (pytorch.org/memory_viz) read. [`read_snapshot`]
//! reads such a pickle — one written by PyTorch or by gpumem — as a stream: the entries of
//! `device_traces` are handed to a callback one by one and never held all at once, so a real job's
//! snapshot with millions of events is read in the memory of its segments plus one batch of
//! entries (Python writes them in batches of 1000).
//!
//! Frames: gpumem records no stacks, so every `frames` it writes is an empty list; the frames of a
//! PyTorch snapshot are read past and dropped.

use crate::AllocatorConfig;
use crate::history::{BlockState, Snapshot, TraceAction};
use std::io::{self, Write};
use std::path::Path;

/// The pickle protocol gpumem writes (Python 3.8's default, as `pickle.dump` in `_dump_snapshot`).
pub const PROTOCOL: u8 = 4;

/// Why a snapshot pickle cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotPickleError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        source: io::Error,
    },
    /// The bytes are not a pickle this reader understands.
    #[error("not a readable pickle at byte {offset}: {reason}")]
    BadPickle {
        /// Where in the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The file ends before the pickle does.
    #[error("truncated pickle: the file ends at byte {offset} before the pickle's STOP")]
    Truncated {
        /// The file's length.
        offset: u64,
    },
    /// A valid pickle, but not shaped like torch's snapshot.
    #[error("not a PyTorch memory snapshot: {reason}")]
    WrongSchema {
        /// What is missing or mistyped.
        reason: String,
    },
}

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
    p.raw(&[0x80, PROTOCOL])?;
    p.begin_dict()?;

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
        p.empty_frames()?;
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
            p.empty_frames()?;
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
    for e in &snapshot.trace {
        p.begin_dict()?;
        p.str("action")?;
        p.str(e.action.torch_name())?;
        let addr_key = if e.action == TraceAction::Oom {
            "device_free"
        } else {
            "addr"
        };
        p.key_int(addr_key, e.addr.into())?;
        p.key_int("size", e.size.into())?;
        p.key_int("stream", e.stream.into())?;
        p.key_int("time_us", e.time_us.into())?;
        p.empty_frames()?;
        p.end_dict()?;
    }
    p.end_list()?;
    p.end_list()?;

    p.str("allocator_settings")?;
    write_settings(&mut p, &snapshot.allocator_settings)?;

    p.end_dict()?;
    p.raw(&[STOP])
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
    p.str("roundup_power2_divisions")?;
    p.begin_dict()?;
    for (i, d) in c.roundup_power2_divisions.iter().enumerate() {
        p.key_int(&(1u64 << i).to_string(), *d as i128)?;
    }
    p.end_dict()?;
    p.end_dict()
}

// Pickle opcodes (Lib/pickletools.py names them).
const MARK: u8 = b'(';
const STOP: u8 = b'.';
const BINFLOAT: u8 = b'G';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BINUNICODE: u8 = b'X';
const APPENDS: u8 = b'e';
const SETITEMS: u8 = b'u';
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const TUPLE2: u8 = 0x86;
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const LONG1: u8 = 0x8a;
const SHORT_BINUNICODE: u8 = 0x8c;

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

    fn empty_frames(&mut self) -> io::Result<()> {
        self.str("frames")?;
        self.raw(&[EMPTY_LIST])
    }
}
