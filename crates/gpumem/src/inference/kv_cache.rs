//! The KV cache of a served language model, held two ways through the caching allocator:
//! [`ContiguousCache`] reserves one region per request for its maximum length (what serving
//! systems did before vLLM), [`BlockPool`] and [`BlockTable`] keep a pool of fixed-size blocks
//! and give each request a table of the blocks it holds, filled on demand, freed on completion,
//! shared copy-on-write between the samples of one prompt (vLLM's PagedAttention, Kwon et al.,
//! SOSP 2023). [`crate::serving`] drives either with a stream of requests.

use crate::error::{Error, Result};
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;
use crate::ops::DType;
use crate::policy::allocator::round_size;
use std::collections::{BTreeMap, VecDeque};

/// The shape of a model's KV cache: what its `config.json` says about attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvConfig {
    /// Transformer layers (`num_hidden_layers`); each keeps its own keys and values.
    pub layers: usize,
    /// Query heads (`num_attention_heads`).
    pub heads: usize,
    /// Key/value heads (`num_key_value_heads`): fewer than `heads` with grouped-query attention.
    pub kv_heads: usize,
    /// Elements per head (`head_dim`, else `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// The element type the cache is kept in.
    pub dtype: DType,
}

impl KvConfig {
    /// OPT-13B in f16, the vLLM paper's model: 40 layers, 40 heads of 128, no grouping.
    pub fn opt_13b() -> KvConfig {
        KvConfig {
            layers: 40,
            heads: 40,
            kv_heads: 40,
            head_dim: 128,
            dtype: DType::F16,
        }
    }

    /// Checks that the shape is one a model can have: nothing zero, `kv_heads` divides `heads`.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Error::BadSetting {
            setting: format!("KV cache config {self:?}"),
            reason: message,
        };
        if self.layers == 0 || self.heads == 0 || self.kv_heads == 0 || self.head_dim == 0 {
            return Err(bad(
                "layers, heads, kv_heads and head_dim must all be at least 1".into(),
            ));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(bad(format!(
                "kv_heads ({}) must divide heads ({}): each KV head serves a whole group of query heads",
                self.kv_heads, self.heads
            )));
        }
        Ok(())
    }

    /// Bytes one token's keys and values take in one layer: `2 · kv_heads · head_dim · dtype`.
    pub fn bytes_per_token_per_layer(&self) -> usize {
        2 * self.kv_heads * self.head_dim * self.dtype.size()
    }

    /// Bytes one token takes in the whole cache: `2 · layers · kv_heads · head_dim · dtype`.
    pub fn bytes_per_token(&self) -> usize {
        self.layers * self.bytes_per_token_per_layer()
    }
}

/// Which request (or which sample of a request) something belongs to.
pub type RequestId = u64;

/// One region per request, reserved for `max_len` tokens when the request is admitted and freed
/// when it completes: one allocator block of `max_len · bytes_per_token` each.
///
/// A budget caps what the allocator may reserve (`set_per_process_memory_fraction`, as torch
/// would cap it); a request that does not fit is refused, not an error. The cap is lifted again
/// when the cache is dropped.
pub struct ContiguousCache {
    dev: Device,
    config: KvConfig,
    max_len: usize,
    budget: u64,
    slots: BTreeMap<RequestId, Buffer<u8>>,
}

impl ContiguousCache {
    /// A cache for requests of at most `max_len` tokens; the allocator may reserve at most
    /// `budget` bytes (a multiple of 2 MiB, as every reservation of a slot is) while it lives.
    pub fn new(dev: &Device, config: KvConfig, max_len: usize, budget: u64) -> Result<Self> {
        config.validate()?;
        if max_len == 0 || budget == 0 || !budget.is_multiple_of(2 << 20) {
            return Err(Error::BadSetting {
                setting: format!("contiguous KV cache (max_len {max_len}, budget {budget} B)"),
                reason: "max_len must be at least 1 and the budget a positive multiple of 2 MiB"
                    .into(),
            });
        }
        let (_, total) = dev.mem_get_info()?;
        // Half a MiB of slack: the allocator's limit is `total · fraction` in floating point,
        // and every reservation is a multiple of 2 MiB, so the slack admits nothing more.
        let fraction = (budget + (1 << 19)) as f64 / total as f64;
        dev.set_per_process_memory_fraction(fraction.min(1.0))?;
        Ok(ContiguousCache {
            dev: dev.clone(),
            config,
            max_len,
            budget,
            slots: BTreeMap::new(),
        })
    }

    /// Bytes of one request's region: `max_len · bytes_per_token`.
    pub fn slot_bytes(&self) -> usize {
        self.max_len * self.config.bytes_per_token()
    }

    /// The longest request (prompt and output) a region holds.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Reserves `request`'s region; `Ok(false)` when the budget cannot hold it: when the live
    /// blocks and this region would pass the budget (a server counts that without asking), or
    /// when the allocator, asked, finds no room even after releasing its cache (its
    /// out-of-memory, caught: fragmentation).
    pub fn reserve(&mut self, request: RequestId) -> Result<bool> {
        let region = round_size(self.slot_bytes(), &self.dev.allocator().config()) as u64;
        if self.dev.memory_allocated() + region > self.budget {
            return Ok(false);
        }
        match self.dev.alloc::<u8>(self.slot_bytes()) {
            Ok(slot) => {
                self.slots.insert(request, slot);
                Ok(true)
            }
            Err(e) if e.is_out_of_memory() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Frees `request`'s region (back to the allocator's cache); false if it held none.
    pub fn release(&mut self, request: RequestId) -> bool {
        self.slots.remove(&request).is_some()
    }

    /// How many regions are held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no region is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl Drop for ContiguousCache {
    fn drop(&mut self) {
        self.slots.clear();
        self.dev.clear_per_process_memory_fraction();
    }
}

/// The number of a block in a [`BlockPool`], from 0.
pub type BlockId = u32;

/// A pool of `num_blocks` blocks of `block_size` tokens: one allocator block per layer, as vLLM
/// allocates its KV cache (so `memory_stats` shows `layers` blocks, whatever the requests do),
/// with a free list and a reference count per block.
pub struct BlockPool {
    layers: Vec<Buffer<u8>>,
    block_size: usize,
    block_bytes: usize,
    free: VecDeque<BlockId>,
    refs: Vec<u32>,
    copies: u64,
}

impl BlockPool {
    /// Allocates the pool: `layers` buffers of `num_blocks · block_size · bytes_per_token_per_layer`.
    pub fn new(
        dev: &Device,
        config: KvConfig,
        block_size: usize,
        num_blocks: usize,
    ) -> Result<Self> {
        config.validate()?;
        if block_size == 0 || num_blocks == 0 || num_blocks > BlockId::MAX as usize {
            return Err(Error::BadSetting {
                setting: format!("block pool ({num_blocks} blocks of {block_size} tokens)"),
                reason: "block_size and num_blocks must be at least 1 (and fewer than 2^32 blocks)"
                    .into(),
            });
        }
        let per_layer = num_blocks * block_size * config.bytes_per_token_per_layer();
        let layers = (0..config.layers)
            .map(|_| dev.alloc::<u8>(per_layer))
            .collect::<Result<Vec<_>>>()?;
        Ok(BlockPool {
            layers,
            block_size,
            block_bytes: block_size * config.bytes_per_token(),
            free: (0..num_blocks as BlockId).collect(),
            refs: vec![0; num_blocks],
            copies: 0,
        })
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Bytes of one block across all layers: `block_size · bytes_per_token`.
    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.refs.len()
    }

    /// Blocks on the free list.
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Bytes the pool holds on the device (all layers).
    pub fn pool_bytes(&self) -> usize {
        self.layers.iter().map(|l| l.size_bytes()).sum()
    }

    /// How many tables refer to `block` (0: free).
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.refs[block as usize]
    }

    /// Blocks copied on write so far.
    pub fn copies(&self) -> u64 {
        self.copies
    }

    /// Takes the block at the head of the free list (the one freed longest ago), or `None`.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let block = self.free.pop_front()?;
        self.refs[block as usize] = 1;
        Some(block)
    }

    /// One more table refers to `block`.
    pub fn share(&mut self, block: BlockId) {
        self.refs[block as usize] += 1;
    }

    /// One table fewer refers to `block`; the last one puts it at the tail of the free list.
    pub fn release(&mut self, block: BlockId) {
        let refs = &mut self.refs[block as usize];
        debug_assert!(*refs > 0, "block {block} released more often than taken");
        *refs -= 1;
        if *refs == 0 {
            self.free.push_back(block);
        }
    }
}

/// The pool has no free block: the caller preempts a request or waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBlocks;

/// What appending one token to a [`BlockTable`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The token went into the free slot of the last block.
    InLastBlock,
    /// The last block was full (or there was none): a new block was taken.
    NewBlock,
    /// The last block was shared and not full: it was copied to a new block first.
    CopiedOnWrite,
}

/// One request's (one sequence's) blocks, in token order, and how many tokens it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTable {
    /// The physical blocks, in the order of the tokens they hold.
    pub blocks: Vec<BlockId>,
    /// Tokens held; the last block holds `tokens − (blocks − 1) · block_size` of them.
    pub tokens: usize,
}

impl BlockTable {
    /// An empty table.
    pub fn new() -> BlockTable {
        BlockTable::default()
    }

    /// Appends one token, taking a block when the last is full and copying the last when it is
    /// shared; on [`OutOfBlocks`] the table is as it was.
    pub fn append_token(
        &mut self,
        pool: &mut BlockPool,
    ) -> std::result::Result<Appended, OutOfBlocks> {
        let filled = self.tokens % pool.block_size();
        let appended = match self.blocks.last() {
            Some(_) if filled == 0 => {
                self.blocks.push(pool.allocate().ok_or(OutOfBlocks)?);
                Appended::NewBlock
            }
            None => {
                self.blocks.push(pool.allocate().ok_or(OutOfBlocks)?);
                Appended::NewBlock
            }
            Some(&last) if pool.ref_count(last) > 1 => {
                let copy = pool.allocate().ok_or(OutOfBlocks)?;
                pool.release(last);
                pool.copies += 1;
                *self.blocks.last_mut().expect("a last block") = copy;
                Appended::CopiedOnWrite
            }
            Some(_) => Appended::InLastBlock,
        };
        self.tokens += 1;
        Ok(appended)
    }

    /// Appends `n` tokens (a prompt); on [`OutOfBlocks`] gives back what it took, leaving the
    /// table as it was.
    pub fn append_tokens(
        &mut self,
        pool: &mut BlockPool,
        n: usize,
    ) -> std::result::Result<(), OutOfBlocks> {
        let before = self.clone();
        for _ in 0..n {
            if let Err(e) = self.append_token(pool) {
                for &block in &self.blocks[before.blocks.len()..] {
                    pool.release(block);
                }
                self.blocks.truncate(before.blocks.len());
                self.tokens = before.tokens;
                return Err(e);
            }
        }
        Ok(())
    }

    /// A second table on the same blocks (a sample of the same prompt): every block shared.
    pub fn fork(&self, pool: &mut BlockPool) -> BlockTable {
        for &block in &self.blocks {
            pool.share(block);
        }
        self.clone()
    }

    /// Gives every block back (the request completed or was preempted).
    pub fn release(&mut self, pool: &mut BlockPool) {
        for block in self.blocks.drain(..) {
            pool.release(block);
        }
        self.tokens = 0;
    }

    /// Blocks `tokens` tokens need: `ceil(tokens / block_size)`.
    pub fn blocks_for(tokens: usize, block_size: usize) -> usize {
        tokens.div_ceil(block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn tiny() -> KvConfig {
        KvConfig {
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            dtype: DType::F16,
        }
    }

    #[test]
    fn bytes_per_token_follow_the_formula() {
        assert_eq!(KvConfig::opt_13b().bytes_per_token(), 819_200);
        assert_eq!(tiny().bytes_per_token_per_layer(), 512);
        assert_eq!(tiny().bytes_per_token(), 1024);
    }

    #[test]
    fn a_config_whose_kv_heads_do_not_divide_heads_is_refused() {
        let bad = KvConfig {
            kv_heads: 3,
            ..tiny()
        };
        let message = bad.validate().unwrap_err().to_string();
        assert!(
            message.contains("kv_heads (3) must divide heads (4)"),
            "{message}"
        );
    }

    #[test]
    fn pool_is_one_allocator_block_per_layer() {
        let dev = testing::device();
        let pool = BlockPool::new(&dev, tiny(), 16, 64).unwrap();
        assert_eq!(pool.block_bytes(), 16 * 1024);
        assert_eq!(pool.pool_bytes(), 64 * 16 * 1024);
        let stats = dev.memory_stats();
        assert_eq!(stats.get("allocation.all.current"), Some(2));
        assert_eq!(dev.memory_allocated(), 1 << 20);
        drop(pool);
        assert_eq!(dev.memory_allocated(), 0);
    }

    #[test]
    fn tokens_fill_blocks_and_take_new_ones_at_the_boundary() {
        let dev = testing::device();
        let mut pool = BlockPool::new(&dev, tiny(), 4, 3).unwrap();
        let mut table = BlockTable::new();
        table.append_tokens(&mut pool, 5).unwrap();
        assert_eq!(table.blocks, vec![0, 1]);
        assert_eq!(pool.num_free(), 1);
        assert_eq!(table.append_token(&mut pool), Ok(Appended::InLastBlock));
        table.append_tokens(&mut pool, 2).unwrap();
        assert_eq!(table.append_token(&mut pool), Ok(Appended::NewBlock));
        assert_eq!((table.blocks.clone(), table.tokens), (vec![0, 1, 2], 9));
        // Full: a prompt that does not fit leaves the table as it was.
        let mut other = BlockTable::new();
        assert_eq!(other.append_tokens(&mut pool, 1), Err(OutOfBlocks));
        assert_eq!(other, BlockTable::new());
        table.release(&mut pool);
        assert_eq!(pool.num_free(), 3);
        // Freed blocks go to the tail of the free list, in the order freed.
        assert_eq!(pool.allocate(), Some(0));
    }

    #[test]
    fn a_failed_prompt_gives_back_the_blocks_it_took() {
        let dev = testing::device();
        let mut pool = BlockPool::new(&dev, tiny(), 4, 2).unwrap();
        let mut table = BlockTable::new();
        assert_eq!(table.append_tokens(&mut pool, 9), Err(OutOfBlocks));
        assert_eq!((table.tokens, pool.num_free()), (0, 2));
    }

    #[test]
    fn forked_samples_share_the_prompt_and_copy_its_last_block_on_write() {
        let dev = testing::device();
        let mut pool = BlockPool::new(&dev, tiny(), 4, 8).unwrap();
        let mut first = BlockTable::new();
        first.append_tokens(&mut pool, 6).unwrap(); // blocks 0 (full), 1 (2 of 4)
        let mut second = first.fork(&mut pool);
        assert_eq!(
            (pool.ref_count(0), pool.ref_count(1), pool.num_free()),
            (2, 2, 6)
        );
        assert_eq!(first.append_token(&mut pool), Ok(Appended::CopiedOnWrite));
        assert_eq!(first.blocks, vec![0, 2]);
        // The other sample is now the only one on block 1: it writes in place.
        assert_eq!(second.append_token(&mut pool), Ok(Appended::InLastBlock));
        assert_eq!(second.blocks, vec![0, 1]);
        assert_eq!(
            (pool.ref_count(0), pool.ref_count(1), pool.copies()),
            (2, 1, 1)
        );
        first.release(&mut pool);
        second.release(&mut pool);
        assert_eq!(pool.num_free(), 8);
    }

    #[test]
    fn contiguous_cache_reserves_max_len_and_refuses_past_its_budget() {
        let dev = testing::device();
        // 2048 tokens of 1 KiB: 2 MiB regions, ten in each 20 MiB segment of the large pool.
        let mut cache = ContiguousCache::new(&dev, tiny(), 2048, 40 << 20).unwrap();
        assert_eq!(cache.slot_bytes(), 2 << 20);
        let mut admitted = 0;
        while cache.reserve(admitted).unwrap() {
            admitted += 1;
        }
        assert_eq!(admitted, 20);
        assert_eq!(dev.memory_reserved(), 40 << 20);
        assert!(cache.release(3));
        assert!(!cache.release(3));
        assert!(cache.reserve(99).unwrap());
        drop(cache);
        assert_eq!(dev.get_per_process_memory_fraction(), 1.0);
    }
}
