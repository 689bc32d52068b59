//! `gpumem`: the GPU Memory Workbook's runtime — devices, a caching allocator that follows
//! PyTorch's CUDA caching allocator, transfers, pinned memory and a few compute kernels.
//!
//! Its folders are its layers, bottom first (the README's "Inside gpumem" says more). A file
//! imports only from its own layer and the layers below it, and no files import each other in a
//! circle; `scripts/check-gpumem-layers.py` checks both, with the order below.
//!
//! ```text
//! error.rs, format.rs  the one error type and byte formatting, used by every layer
//! raw/          the raw backends: the backend trait, cpu (host memory), cuda (driver), driver probe
//! policy/       the caching allocator: sizes, streams, blocks, settings, statistics, history
//! formats/      allocation traces (events, file, replay) and torch's snapshot pickles
//! memory/       what a learner holds: Device, buffers, pinned memory, streams, events, copies, collectives
//! ops/          compute: element-wise kernels, GEMM, attention, dropout, LayerNorm, tiny model
//! autograd/     tensors, graph and saved tensors, engine, functional, checkpoint, nn, transformer
//! optim/        SGD, Adam and AdamW
//! inference/    the KV cache and the serving simulator
//! testing.rs    helpers for tests and exercises
//! ```
//!
//! The public paths stay flat, whatever the folder: [`allocator`], [`device`], [`buffer`],
//! [`pinned`], [`trace`], [`snapshot_pickle`], [`kv_cache`], ... are re-exported from their layer
//! here, and the names learners use most ([`Device`], [`Buffer`], [`PinnedBuffer`], [`Stream`],
//! [`CachingAllocator`], [`MemoryStats`], ...) sit at the root.

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
pub use memory::{activity, buffer, collective, device, pinned, stream, transfer};
pub use policy::{allocator, config, stats};
pub use raw::{backend, cpu as backend_cpu, cuda as backend_cuda};

/// Whether CUDA can be used on this machine, asked without ever panicking, and NVRTC's kernels.
pub mod cuda {
    pub use crate::ops::cuda::{
        KernelImage, KernelTarget, compile_kernels, compile_kernels_cached,
    };
    pub use crate::ops::kernel_cache::{CacheSize, KernelCache, KernelKey, Lookup};
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
    collective::ProcessGroup,
    config::AllocatorConfig,
    device::{Device, DeviceKind},
    error::{Error, Result},
    format::format_bytes,
    history::{
        ActionSet, ContextLevel, HistoryLevel, HistoryOptions, Snapshot, SnapshotRequest, Stacks,
        TraceAction, TraceEntry,
    },
    kv_cache::{BlockPool, BlockTable, ContiguousCache, KvConfig},
    pinned::{HostMemoryStats, HostSegmentInfo, PinnedBuffer},
    stats::{MemoryStats, Pool},
    stream::{Event, Stream},
    transfer::{CopyCount, TransferStats},
};

/// Half-precision element types (`f16`, `bf16`), re-exported from the `half` crate.
pub use half::{bf16, f16};
