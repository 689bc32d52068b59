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

pub mod autograd;
pub mod error;
pub mod format;
mod formats;
mod inference;
mod memory;
pub mod ops;
pub mod optim;
mod policy;
mod raw;
pub mod testing;

// The public module paths, as learners, chapters, tests and the workbook name them.
pub use formats::{snapshot_pickle, trace};
pub use inference::{kv_cache, serving};
pub use memory::{activity, buffer, device, pinned, stream, transfer};
pub use policy::{allocator, config, stats};
pub use raw::{backend, cpu as backend_cpu, cuda as backend_cuda};

/// Whether CUDA can be used on this machine, asked without ever panicking, and NVRTC's kernels.
pub mod cuda {
    pub use crate::ops::cuda::{KernelImage, KernelTarget, compile_kernels};
    pub use crate::ops::kernel_source::kernel_names;
    pub use crate::raw::driver::*;
}

/// `record_memory_history` and `snapshot`: what the allocator holds now and how it got there.
pub mod history {
    pub use crate::memory::snapshot_request::SnapshotRequest;
    pub use crate::policy::history::*;
}

// The names learners use most, at the crate root (documented in their modules above).
#[doc(no_inline)]
pub use self::{
    activity::Activity,
    allocator::{Allocation, CachingAllocator, StreamId},
    backend::DeviceProperties,
    buffer::{Buffer, Element},
    config::AllocatorConfig,
    device::{Device, DeviceKind},
    error::{Error, Result},
    format::format_bytes,
    history::{HistoryLevel, HistoryOptions, Snapshot, SnapshotRequest, TraceAction, TraceEntry},
    kv_cache::{BlockPool, BlockTable, ContiguousCache, KvConfig},
    pinned::{HostMemoryStats, PinnedBuffer},
    stats::{MemoryStats, Pool},
    stream::{Event, Stream},
    transfer::{CopyCount, TransferStats},
};

/// Half-precision element types (`f16`, `bf16`), re-exported from the `half` crate.
pub use half::{bf16, f16};
