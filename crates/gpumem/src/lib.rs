//! `gpumem`: the GPU Memory Workbook's runtime — devices, a caching allocator that follows
//! PyTorch's CUDA caching allocator, transfers, pinned memory and a few compute kernels.
//!
//! Layers (the README's "Inside gpumem" says more):
//! - raw: [`backend`] with [`backend_cpu`] and [`backend_cuda`] — reserve, release, copy;
//! - policy: [`allocator`] — pools, blocks, splitting, stats; it knows nothing of CUDA;
//! - safe surface: [`Device`], [`Buffer`], [`PinnedBuffer`], [`Stream`], stats;
//! - compute: [`ops`] — GEMM, element-wise kernels and a tiny model, on both devices;
//! - [`autograd`] — tensors that record a graph, save what torch saves, and free it in backward;
//! - [`optim`] — SGD, Adam and AdamW with their state on the device, as torch keeps it;
//! - [`kv_cache`] and [`serving`] — a served model's KV cache, contiguous or paged, and a
//!   request stream served with continuous batching.

#![warn(missing_docs)]

pub mod activity;
pub mod allocator;
pub mod autograd;
pub mod backend;
pub mod backend_cpu;
pub mod backend_cuda;
pub mod buffer;
pub mod config;
pub mod cuda;
pub mod device;
pub mod error;
pub mod format;
pub mod history;
pub mod kv_cache;
pub mod ops;
pub mod optim;
pub mod pinned;
pub mod serving;
pub mod snapshot_pickle;
pub mod stats;
pub mod stream;
pub mod testing;
pub mod trace;
pub mod transfer;

pub use activity::Activity;
pub use allocator::{Allocation, CachingAllocator, StreamId};
pub use backend::DeviceProperties;
pub use buffer::{Buffer, Element};
pub use config::AllocatorConfig;
pub use device::{Device, DeviceKind};
pub use error::{Error, Result};
pub use format::format_bytes;
pub use history::{
    ActionSet, ContextLevel, HistoryLevel, HistoryOptions, Snapshot, SnapshotRequest, Stacks,
    TraceAction, TraceEntry,
};
pub use kv_cache::{BlockPool, BlockTable, ContiguousCache, KvConfig};
pub use pinned::{HostMemoryStats, HostSegmentInfo, PinnedBuffer};
pub use stats::{MemoryStats, Pool};
pub use stream::{Event, Stream};
pub use transfer::{CopyCount, TransferStats};

/// Half-precision element types (`f16`, `bf16`), re-exported from the `half` crate.
pub use half::{bf16, f16};
