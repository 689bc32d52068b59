//! Snapshots as PyTorch writes them: `torch.cuda.memory._dump_snapshot("snap.pickle")` pickles the
//! dict of `torch.cuda.memory._snapshot()` (keys as in torch/csrc/cuda/memory_snapshot.cpp, torch
//! 2.x): `segments` (each with `device`, `address`, `total_size`, `allocated_size`, `active_size`,
//! `requested_size`, `stream`, `segment_type`, `segment_pool_id`, `is_expandable`, `frames`,
//! `blocks`), `device_traces` (one list of entries per device: `action`, `addr` or, for `oom`,
//! `device_free`, `size`, `stream`, `time_us`, `frames`), `allocator_settings` and `external_annotations` (the program's annotations).
//!
//! [`write_snapshot`] writes a gpumem [`Snapshot`](crate::history::Snapshot) in that schema as a protocol-4 pickle, which
//! Python's `pickle.load` and PyTorch's viewer (pytorch.org/memory_viz) read. [`read_snapshot`]
//! reads such a pickle — one written by PyTorch or by gpumem — as a stream: the entries of
//! `device_traces` are handed to a callback one by one and never held all at once, so a real job's
//! snapshot with millions of events is read in the memory of its segments plus one batch of
//! entries (Python writes them in batches of 1000).
//!
//! Frames: gpumem records no stacks. An entry recorded during a `malloc` gets one frame, the call
//! site that `#[track_caller]` gives (file and line, no function name); a segment and a live block
//! are written with the frames of the trace entry that reserved or allocated them, as torch
//! writes them. The frames of a PyTorch snapshot's trace entries are read into a [`Stacks`](crate::trace::Stacks) table (each
//! distinct frame and each distinct stack kept once: torch shares the frame dicts between
//! entries, so the pickle refers back to them) and each entry is handed over with its stack's id;
//! the frames of segments and blocks are read past.

mod opcodes;
mod read;
mod write;

pub use read::{
    SnapshotContents, is_pickle, load_device_snapshot, load_snapshot, read_alloc_traces,
    read_snapshot, read_snapshot_file, read_snapshot_file_stacks, read_snapshot_stacks,
};
pub use write::{dump_snapshot, write_snapshot};

use std::io;

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
    #[error(
        "truncated pickle: the file ends before the pickle's STOP (while reading at byte {offset})"
    )]
    Truncated {
        /// Where the read that ran past the end began.
        offset: u64,
    },
    /// A genuine snapshot with no history to replay (state-only, or recorded before any
    /// allocation).
    #[error("{reason}")]
    NoHistory {
        /// What the file holds and how to record a history.
        reason: String,
    },
    /// A valid pickle, but not shaped like torch's snapshot.
    #[error("not a PyTorch memory snapshot: {reason}")]
    WrongSchema {
        /// What is missing or mistyped.
        reason: String,
    },
}
