//! Chapter 13: serving — the KV cache, and why vLLM pages it.
//!
//! Size a served model's KV cache from its config, predict how many requests fit a budget when
//! each reserves its maximum length and when blocks are handed out on demand, write the block
//! pool and the block table (with a shared prefix, copied on write), measure where the memory
//! goes, and preempt instead of running out of memory.
//!
//! Replace each `todo!()` (look for `// TODO`), then run `cargo test -p ch13-kv-cache`.
//!
//! Parameters start with `_` only so that the unsolved crate builds without warnings: remove the
//! `_` when you use one.

use gpumem::serving::{Scheme, StepView};
use gpumem::{Buffer, Device, Result};
use std::collections::VecDeque;

pub use ch13_predict::{Fit, predict_fit};
pub use gpumem::kv_cache::{Appended, KvConfig, OutOfBlocks};
pub use gpumem::ops::DType;
pub use gpumem::serving::Waste;

// ANCHOR: given
/// A model small enough for any machine's tests: 2 layers, 4 heads, 2 KV heads of 64, f16
/// (1 KiB per token).
pub fn tiny_model() -> KvConfig {
    KvConfig {
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        dtype: DType::F16,
    }
}
// ANCHOR_END: given

// ANCHOR: size_kv_cache
/// Mistral-7B-v0.1's attention, from its `config.json` (`num_hidden_layers`,
/// `num_attention_heads`, `num_key_value_heads`, `hidden_size / num_attention_heads`), its KV cache
/// kept in bf16.
pub fn mistral_7b() -> KvConfig {
    // TODO: Fill in the four numbers from Mistral-7B-v0.1's config.json, and the dtype.
    todo!()
}

/// Bytes the keys and values of `tokens` tokens take, every layer:
/// `2 · layers · kv_heads · head_dim · bytes per element · tokens`.
pub fn kv_bytes(_config: &KvConfig, _tokens: usize) -> u64 {
    // TODO: Keys and values, every layer, every KV head.
    todo!()
}
// ANCHOR_END: size_kv_cache

// ANCHOR: pool
/// The KV cache as vLLM keeps it: one allocator block per layer holding `num_blocks` blocks of
/// `block_size` tokens, a free list and a reference count per block.
pub struct Pool {
    /// One buffer per layer, `num_blocks · block_size · bytes per token per layer` each.
    pub layers: Vec<Buffer<u8>>,
    /// Tokens per block.
    pub block_size: usize,
    /// Free blocks: taken from the front, given back at the back.
    pub free: VecDeque<u32>,
    /// How many sequences hold each block (0: free).
    pub refs: Vec<u32>,
}

impl Pool {
    /// Allocates the layers on `dev` and puts every block, 0 first, on the free list.
    pub fn new(
        _dev: &Device,
        _config: &KvConfig,
        _block_size: usize,
        _num_blocks: usize,
    ) -> Result<Pool> {
        // TODO: One buffer per layer on dev; every block free, 0 first.
        todo!()
    }

    /// Takes the block at the front of the free list (held once), or `None` when none is free.
    pub fn allocate(&mut self) -> Option<u32> {
        // TODO: Take from the front of the free list.
        todo!()
    }

    /// One holder fewer; the last puts the block at the back of the free list.
    pub fn release(&mut self, _block: u32) {
        // TODO: One holder fewer; free at zero.
        todo!()
    }
}
// ANCHOR_END: pool

// ANCHOR: block_table
/// One sequence's block table: its blocks in token order, and the tokens it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sequence {
    /// Which request it is.
    pub id: u64,
    /// Its blocks, in the order of its tokens.
    pub blocks: Vec<u32>,
    /// Tokens it holds (after a preemption: tokens to recompute).
    pub tokens: usize,
}

impl Sequence {
    /// Appends one token: into the last block if it has room and is this sequence's alone; into a
    /// copy of it if it has room but is shared; into a new block if it is full or there is none.
    /// Out of blocks, the sequence is left as it was.
    pub fn append_token(&mut self, _pool: &mut Pool) -> std::result::Result<Appended, OutOfBlocks> {
        // TODO: New block, copy on write, or in place.
        todo!()
    }

    /// A second sample of the same prompt, named `id`: the same blocks, each held once more.
    pub fn fork(&self, _pool: &mut Pool, _id: u64) -> Sequence {
        // TODO: Share every block once more.
        todo!()
    }

    /// Gives every block back; `tokens` stays, as what a recompute must write again.
    pub fn release(&mut self, _pool: &mut Pool) {
        // TODO: Release every block; keep `tokens`.
        todo!()
    }
}
// ANCHOR_END: block_table

// ANCHOR: step_waste
/// Where the KV memory of one step of `gpumem::serving::serve` went, by kind, in bytes, for a
/// `scheme` with regions of `max_len` tokens and `bytes_per_token`.
pub fn step_waste(
    _step: &StepView,
    _scheme: Scheme,
    _max_len: usize,
    _bytes_per_token: u64,
) -> Waste {
    // TODO: Token states, reservation, internal, external: they add up to what is held.
    todo!()
}
// ANCHOR_END: step_waste

// ANCHOR: decode_step
/// One decoding step: every running sequence, in order, gains one token. When the pool has no
/// block for one, the sequence admitted last (the back of `running`, perhaps this one) is
/// preempted: its blocks released, and it goes to the front of `waiting` to be recomputed later.
/// Returns the ids preempted, in order.
pub fn decode_step(
    _pool: &mut Pool,
    _running: &mut Vec<Sequence>,
    _waiting: &mut VecDeque<Sequence>,
) -> Vec<u64> {
    // TODO: Grow each running sequence by one token; preempt from the back when out of blocks.
    todo!()
}
// ANCHOR_END: decode_step
