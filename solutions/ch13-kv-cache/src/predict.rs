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
    token_bytes: u64,
    budget: u64,
    max_len: usize,
    block_size: usize,
    tokens: usize,
) -> Fit {
    const MIB: u64 = 1 << 20;
    // The allocator's rounding: a multiple of 512 bytes, at least 512.
    let region = (token_bytes * max_len as u64).max(1).div_ceil(512) * 512;
    // Its segments: 2 MiB for blocks up to 1 MiB, 20 MiB below 10 MiB, else the block itself
    // rounded up to 2 MiB.
    let segment = if region <= MIB {
        2 * MIB
    } else if region < 10 * MIB {
        20 * MIB
    } else {
        region.div_ceil(2 * MIB) * 2 * MIB
    };
    let contiguous = ((budget / segment) * (segment / region)) as usize;
    let blocks = budget / (token_bytes * block_size as u64);
    let per_request = tokens.div_ceil(block_size) as u64;
    Fit {
        contiguous,
        paged: (blocks / per_request) as usize,
    }
}
// ANCHOR_END: predict_fit
