//! Serving a model: its KV cache, contiguous or paged, and a request stream served with
//! continuous batching.

pub mod kv_cache;
pub mod serving;
