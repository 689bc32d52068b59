//! Chapter 14's predictions and readings: built as a crate of their own, with no dependencies
//! (not even gpumem), so they are made before measuring and read only what they are given. The
//! tests measure and compare, at the page's sizes and at sizes drawn on every run: write the
//! rules, not the numbers.

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

// ANCHOR: steps
/// A loop of training steps: each allocates the same buffers, holds them all, and drops them
/// all at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    /// Buffers allocated in each step, all alive together until the step ends.
    pub buffers: u64,
    /// Bytes asked for by each buffer (at least 1).
    pub size: u64,
    /// How many steps run (at least 1).
    pub steps: u64,
    /// Whether `empty_cache()` is called after every step.
    pub empty_cache: bool,
}

/// What the loop cost, as the allocator's statistics count it from a clean start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    /// `num_device_alloc`: segments reserved from the device (torch's `cudaMalloc` calls).
    pub device_allocs: u64,
    /// `num_device_free`: segments given back to the device (torch's `cudaFree` calls).
    pub device_frees: u64,
    /// `max_memory_reserved()` at the end, in bytes.
    pub peak_reserved: u64,
}
// ANCHOR_END: steps

// ANCHOR: predict
/// Your prediction of what `steps` costs, with the allocator's default settings.
pub fn predict_refill(steps: Steps) -> Cost {
    // TODO: how many segments does one step reserve (a block is a multiple of 512 B; which
    // segment does a block of this size come from, and how many such blocks does one hold)?
    // Then: which steps reserve them, and which give them back?
    todo!("predict {steps:?}")
}
// ANCHOR_END: predict

// ANCHOR: lever
/// What to reach for first after an out-of-memory error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lever {
    /// The bytes are there but in pieces: reorder the allocations, `expandable_segments:True`,
    /// `max_split_size_mb` (chapter 10).
    Fragmentation,
    /// Tensors that should be gone are still alive: an earlier step's, kept by a list, a leak, or
    /// a caught exception's traceback. Let go of them (this chapter). A message cannot tell; a
    /// snapshot can.
    LetGo,
    /// The device had room; the process's cap did not: raise or remove
    /// `set_per_process_memory_fraction` (chapters 1 and 10).
    OverTheCap,
    /// Other processes hold the memory the request needs: stop or move them, or share the device
    /// by design (chapter 1).
    AnotherProcess,
    /// This process's live tensors fill the device: hold less. A smaller batch, accumulation
    /// (chapter 5), mixed precision (6), fewer saved activations (8, 9, 12), less optimizer
    /// state (11), a smaller KV cache (13).
    HoldLess,
}
// ANCHOR_END: lever

// ANCHOR: oom_state
/// The allocator's two pools (chapter 4): a request of 1 MiB or less is served from the small
/// pool's segments, a larger one from the large pool's, never from the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Segments of 2 MiB, for requests up to 1 MiB.
    Small,
    /// Segments of 20 MiB or of one large block, for requests above 1 MiB.
    Large,
}

/// Who a block of a snapshot belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Cached and free (the snapshot's `inactive`).
    Free,
    /// Live, and meant to outlive every step: allocated before the first one (the weights, the
    /// optimizer's state).
    Kept,
    /// Live, allocated by training step `n` (0 the first).
    Step(u64),
}

/// One block of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Its size in bytes.
    pub size: u64,
    /// Free, or whose.
    pub owner: Owner,
}

/// One segment the process has reserved, and its blocks in address order (their sizes add up
/// to the segment's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The pool it belongs to (the snapshot's `segment_type`).
    pub pool: Pool,
    /// Its blocks.
    pub blocks: Vec<Block>,
}

/// A memory snapshot at an out-of-memory error (`_dump_snapshot` in the `except` block), with
/// what the snapshot does not hold: the cap and the other processes (from the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomState {
    /// Every segment the process holds: the allocator has already given back those with no live
    /// block (its release-and-retry), so each holds one at least.
    pub segments: Vec<Segment>,
    /// The bytes the failed allocation asked for (the snapshot's `oom` entry's `size`).
    pub request: u64,
    /// The device's free memory (the `oom` entry's `device_free`).
    pub free: u64,
    /// The cap from `set_per_process_memory_fraction`, when one is set ("X allowed;").
    pub allowed: Option<u64>,
    /// What the device's other processes hold ("Process N has X memory in use", summed).
    pub other_processes: u64,
    /// The training step that failed (0 the first).
    pub step: u64,
}
// ANCHOR_END: oom_state

// ANCHOR: triage_snapshot
/// The lever a snapshot at an out-of-memory error points to, the first rule that holds, where
/// only blocks of the request's pool count (a block of the other pool cannot serve it) and the
/// room is as in `triage` (the free memory, and under a cap no more than `allowed − reserved`,
/// every segment counting in `reserved`):
/// 1. `Fragmentation`: the free blocks and the room would hold the request;
/// 2. `LetGo`: they would with the blocks of earlier steps than the failed one let go;
/// 3. `OverTheCap`: a cap is set and the device's free memory alone would hold it;
/// 4. `AnotherProcess`: the free memory and what the other processes hold would;
/// 5. `HoldLess` otherwise.
pub fn triage_snapshot(state: &OomState) -> Lever {
    // TODO: the request's pool (chapter 4); reserved (every block), the free and the earlier
    // steps' blocks of that pool; the room as in `triage`. Then the five rules, in order.
    todo!("the lever for {state:?}")
}
// ANCHOR_END: triage_snapshot
