//! torch's size rules: the block and segment sizes, the two pools, and how a request is rounded.

use crate::policy::config::AllocatorConfig;
use crate::policy::stats::Pool;

/// Every block size is a multiple of this (torch's `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: usize = 512;
/// Requests up to this size use the small pool (`kSmallSize`).
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`).
pub const SMALL_BUFFER: usize = 2 << 20;
/// The page size of large expandable segments (`kLargeBuffer`), and the default segment size
/// of requests between 1 and 10 MiB (`large_segment_size_mb` changes that one).
pub const LARGE_BUFFER: usize = 20 << 20;
/// Requests from this size get a segment of their own, rounded to 2 MiB (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Rounding of large segments (`kRoundLarge`).
pub const ROUND_LARGE: usize = 2 << 20;
/// The most address space one expandable segment reserves (torch reserves 9/8 of the device's
/// memory; a cpu device without a capacity limit would otherwise ask for more than exists).
pub const MAX_EXPANDABLE_ADDRESS_SPACE: usize = 1 << 40;

/// Requests of this many bytes or more are refused at once, as torch's `allocate` does (2^60).
pub const ONE_EXA_BYTE: u64 = 1 << 60;

/// Which pool a request of `size` bytes belongs to.
pub fn pool_for(size: usize) -> Pool {
    if size <= SMALL_SIZE {
        Pool::Small
    } else {
        Pool::Large
    }
}

/// Rounds a request to the block size torch would give it (`round_size`).
pub fn round_size(size: usize, config: &AllocatorConfig) -> usize {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let divisions = config.divisions_for(size);
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
        roundup_power2_next_division(size, divisions)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

fn roundup_power2_next_division(size: usize, divisions: usize) -> usize {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1usize << (usize::BITS - 1 - size.leading_zeros());
    let step = floor >> divisions.trailing_zeros();
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

/// The segment size reserved for a request of (rounded) `size` bytes (`get_allocation_size`):
/// 2 MiB up to 1 MiB, `large_segment_size_mb` (20 MiB) below 10 MiB, else the size in 2 MiB steps.
pub fn segment_size_for(size: usize, config: &AllocatorConfig) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        config.large_segment_size
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}
