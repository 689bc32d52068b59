//! The files gpumem reads and writes about an allocator's life: allocation traces and their
//! replay, and PyTorch's snapshot pickles.

pub mod snapshot_pickle;
pub mod trace;
