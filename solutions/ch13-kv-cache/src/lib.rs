//! Chapter 13: serving — the KV cache, and why vLLM pages it.
//!
//! Size a served model's KV cache from its config, predict how many requests fit a budget when
//! each reserves its maximum length and when blocks are handed out on demand, write the block
//! pool and the block table (with a shared prefix, copied on write), measure where the memory
//! goes, and preempt instead of running out of memory.

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
    KvConfig {
        layers: 32,
        heads: 32,
        kv_heads: 8,
        head_dim: 4096 / 32,
        dtype: DType::BF16,
    }
}

/// Bytes the keys and values of `tokens` tokens take, every layer:
/// `2 · layers · kv_heads · head_dim · bytes per element · tokens`.
pub fn kv_bytes(config: &KvConfig, tokens: usize) -> u64 {
    2 * (config.layers * config.kv_heads * config.head_dim * config.dtype.size()) as u64
        * tokens as u64
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
    pub fn new(dev: &Device, config: &KvConfig, block_size: usize, num_blocks: usize) -> Result<Pool> {
        let per_layer = kv_bytes(config, block_size * num_blocks) as usize / config.layers;
        let layers = (0..config.layers)
            .map(|_| dev.alloc::<u8>(per_layer))
            .collect::<Result<Vec<_>>>()?;
        Ok(Pool {
            layers,
            block_size,
            free: (0..num_blocks as u32).collect(),
            refs: vec![0; num_blocks],
        })
    }

    /// Takes the block at the front of the free list (held once), or `None` when none is free.
    pub fn allocate(&mut self) -> Option<u32> {
        let block = self.free.pop_front()?;
        self.refs[block as usize] = 1;
        Some(block)
    }

    /// One holder fewer; the last puts the block at the back of the free list.
    pub fn release(&mut self, block: u32) {
        self.refs[block as usize] -= 1;
        if self.refs[block as usize] == 0 {
            self.free.push_back(block);
        }
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
    pub fn append_token(&mut self, pool: &mut Pool) -> std::result::Result<Appended, OutOfBlocks> {
        let room = !self.tokens.is_multiple_of(pool.block_size);
        let appended = match self.blocks.last().copied() {
            Some(last) if room && pool.refs[last as usize] > 1 => {
                let copy = pool.allocate().ok_or(OutOfBlocks)?;
                pool.release(last);
                *self.blocks.last_mut().expect("a last block") = copy;
                Appended::CopiedOnWrite
            }
            Some(_) if room => Appended::InLastBlock,
            _ => {
                self.blocks.push(pool.allocate().ok_or(OutOfBlocks)?);
                Appended::NewBlock
            }
        };
        self.tokens += 1;
        Ok(appended)
    }

    /// A second sample of the same prompt, named `id`: the same blocks, each held once more.
    pub fn fork(&self, pool: &mut Pool, id: u64) -> Sequence {
        for &block in &self.blocks {
            pool.refs[block as usize] += 1;
        }
        Sequence {
            id,
            blocks: self.blocks.clone(),
            tokens: self.tokens,
        }
    }

    /// Gives every block back; `tokens` stays, as what a recompute must write again.
    pub fn release(&mut self, pool: &mut Pool) {
        for block in self.blocks.drain(..) {
            pool.release(block);
        }
    }
}
// ANCHOR_END: block_table

// ANCHOR: step_waste
/// Where the KV memory of one step of `gpumem::serving::serve` went, by kind, in bytes, for a
/// `scheme` with regions of `max_len` tokens and `bytes_per_token`.
pub fn step_waste(step: &StepView, scheme: Scheme, max_len: usize, bytes_per_token: u64) -> Waste {
    let mut waste = Waste::default();
    for r in &step.running {
        let held = (r.request.prompt + r.generated) as u64;
        let total = r.request.total() as u64;
        waste.token_states += held * bytes_per_token;
        match scheme {
            Scheme::Contiguous => {
                waste.reservation += (total - held) * bytes_per_token;
                waste.internal += (max_len as u64 - total) * bytes_per_token;
            }
            Scheme::Paged { block_size } => {
                let slots = (r.blocks.len() * block_size) as u64;
                waste.internal += (slots - held) * bytes_per_token;
            }
        }
    }
    if scheme == Scheme::Contiguous {
        let regions = step.running.len() as u64 * max_len as u64 * bytes_per_token;
        waste.internal += step.allocated - regions;
        waste.external += step.reserved - step.allocated;
    }
    waste
}
// ANCHOR_END: step_waste

// ANCHOR: decode_step
/// One decoding step: every running sequence, in order, gains one token. When the pool has no
/// block for one, the sequence admitted last (the back of `running`, perhaps this one) is
/// preempted: its blocks released, and it goes to the front of `waiting` to be recomputed later.
/// Returns the ids preempted, in order.
pub fn decode_step(
    pool: &mut Pool,
    running: &mut Vec<Sequence>,
    waiting: &mut VecDeque<Sequence>,
) -> Vec<u64> {
    let mut preempted = Vec::new();
    let mut i = 0;
    while i < running.len() {
        while running[i].append_token(pool).is_err() {
            let mut victim = running.pop().expect("running is not empty");
            victim.release(pool);
            preempted.push(victim.id);
            waiting.push_front(victim);
            if i == running.len() {
                return preempted;
            }
        }
        i += 1;
    }
    preempted
}
// ANCHOR_END: decode_step
