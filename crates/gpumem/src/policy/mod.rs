//! The allocator's policy: PyTorch's caching allocator rules over any raw backend, its settings
//! (`GPUMEM_ALLOC_CONF`), its statistics and its memory history. It knows nothing of CUDA.

pub mod allocator;
pub mod blocks;
pub mod config;
pub mod history;
pub mod sizes;
pub mod stats;
pub mod streams;
