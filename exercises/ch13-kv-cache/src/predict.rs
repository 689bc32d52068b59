//! Chapter 13's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: predict_fit
/// How many requests a KV budget holds at once, each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// Regions of `max_len` tokens, one allocator block each, while the allocator may reserve
    /// `budget` bytes.
    pub contiguous: usize,
    /// Requests of `tokens` tokens in a pool of `budget / block_bytes` blocks.
    pub paged: usize,
}

/// Predicts [`Fit`] for a model whose keys and values take `token_bytes` bytes per token (what
/// `kv_bytes(config, 1)` gives), requests that will hold `tokens` tokens, a context of `max_len`,
/// blocks of `block_size` tokens, and `budget` bytes (a multiple of 2 MiB) for the KV cache, with
/// the allocator's default settings. The tests try the page's cases and cases drawn on every run.
pub fn predict_fit(
    _token_bytes: u64,
    _budget: u64,
    _max_len: usize,
    _block_size: usize,
    _tokens: usize,
) -> Fit {
    // TODO: Contiguous: a region is one allocator block (rounded as the allocator rounds) in a
    // segment (sized as the allocator sizes them): how many regions a segment holds, times how
    // many segments the budget holds. Paged: blocks ÷ blocks per request.
    todo!()
}
// ANCHOR_END: predict_fit
