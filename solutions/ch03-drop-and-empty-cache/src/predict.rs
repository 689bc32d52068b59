//! Chapter 3's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

// ANCHOR: scenario
/// A situation to predict, then measure. Each one starts on a device with nothing reserved. Every
/// size is in bytes and a whole number of `f32` (a multiple of 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `TinyLinear::new(dev, inputs, outputs)` is alive: an `f32` weight of `inputs * outputs`,
    /// then a bias of `outputs`. The page's is 10 by 10, the source's `nn.Linear(10, 10).cuda()`.
    TinyModelLoaded { inputs: u64, outputs: u64 },
    /// The same model, after `drop(model)`.
    TinyModelDropped { inputs: u64, outputs: u64 },
    /// A buffer of `bytes`; `empty_cache()` while it is alive; then `drop` (the wrong order). The
    /// page's is 4 MiB.
    EmptyCacheBeforeDrop { bytes: u64 },
    /// A buffer of `live` bytes stays alive; a buffer of `freed` bytes allocated after it is
    /// dropped. Both at most 1 MiB; the page's are 400 B and 1 MiB.
    SmallBufferPinsSegment { live: u64, freed: u64 },
    /// A buffer of `live` bytes stays alive; a buffer of `freed` bytes allocated after it is
    /// dropped. Both over 1 MiB and under 10 MiB; the page's are 2 MiB and 6 MiB.
    LiveBlockPinsLargeSegment { live: u64, freed: u64 },
    /// `bytes` of host data are uploaded with `from_slice`, then the host `Vec` is dropped. The
    /// page's are 4 MiB.
    HostCopyDropped { bytes: u64 },
}

/// What the allocator reports at the end of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// `memory_allocated()` at the end of the scenario.
    pub allocated: u64,
    /// `memory_reserved()` at the end of the scenario.
    pub reserved: u64,
    /// `memory_reserved()` after one more `empty_cache()`, with the scenario's buffers unchanged.
    pub reserved_after_empty_cache: u64,
}
// ANCHOR_END: scenario

impl Scenario {
    /// Every scenario at the page's sizes, in the order of the book.
    pub const ALL: [Scenario; 6] = [
        Scenario::TinyModelLoaded {
            inputs: 10,
            outputs: 10,
        },
        Scenario::TinyModelDropped {
            inputs: 10,
            outputs: 10,
        },
        Scenario::EmptyCacheBeforeDrop { bytes: 4 * MIB },
        Scenario::SmallBufferPinsSegment {
            live: 400,
            freed: MIB,
        },
        Scenario::LiveBlockPinsLargeSegment {
            live: 2 * MIB,
            freed: 6 * MIB,
        },
        Scenario::HostCopyDropped { bytes: 4 * MIB },
    ];

    /// The scenario's name, without its sizes.
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::TinyModelLoaded { .. } => "TinyModelLoaded",
            Scenario::TinyModelDropped { .. } => "TinyModelDropped",
            Scenario::EmptyCacheBeforeDrop { .. } => "EmptyCacheBeforeDrop",
            Scenario::SmallBufferPinsSegment { .. } => "SmallBufferPinsSegment",
            Scenario::LiveBlockPinsLargeSegment { .. } => "LiveBlockPinsLargeSegment",
            Scenario::HostCopyDropped { .. } => "HostCopyDropped",
        }
    }
}

// ANCHOR: predict
/// Your prediction for `scenario`, written before you run anything: the rules that give the
/// three numbers from the scenario's sizes. The tests try the page's sizes (`Scenario::ALL`) and
/// sizes drawn on every run: a model whose weight is at most 1 MiB and one whose weight is over
/// 1 MiB and under 10 MiB (its bias at most 1 MiB); for `EmptyCacheBeforeDrop` and
/// `HostCopyDropped` one buffer of at most 1 MiB and one over 1 MiB and under 10 MiB.
pub fn predict(scenario: Scenario) -> Outcome {
    let outcome = |allocated, reserved, reserved_after_empty_cache| Outcome {
        allocated,
        reserved,
        reserved_after_empty_cache,
    };
    match scenario {
        // The weight and the bias, each in its block, and the segments they were cut from.
        Scenario::TinyModelLoaded { inputs, outputs } => {
            let (allocated, reserved) = model(inputs, outputs);
            outcome(allocated, reserved, reserved)
        }
        // The blocks are back in the cache; their segments are whole again, so empty_cache frees
        // them.
        Scenario::TinyModelDropped { inputs, outputs } => outcome(0, model(inputs, outputs).1, 0),
        // The early empty_cache found the segment pinned; the buffer is gone by the end.
        Scenario::EmptyCacheBeforeDrop { bytes } => outcome(0, segment(block(bytes)), 0),
        // The live block pins its 2 MiB segment; the freed one merged back into it.
        Scenario::SmallBufferPinsSegment { live, .. } => outcome(block(live), 2 * MIB, 2 * MIB),
        // Both blocks were cut from one 20 MiB segment; the live one pins all of it.
        Scenario::LiveBlockPinsLargeSegment { live, .. } => {
            outcome(block(live), 20 * MIB, 20 * MIB)
        }
        // The host Vec was never device memory; the uploaded copy lives on.
        Scenario::HostCopyDropped { bytes } => {
            let segment = segment(block(bytes));
            outcome(block(bytes), segment, segment)
        }
    }
}

/// A request's block: rounded up to a multiple of 512 bytes, and at least 512.
fn block(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(512) * 512
}

/// The segment a new block is cut from: 2 MiB up to 1 MiB, 20 MiB over 1 MiB and under 10 MiB.
fn segment(block: u64) -> u64 {
    if block <= MIB { 2 * MIB } else { 20 * MIB }
}

/// A `TinyLinear`'s blocks and the segments they reserve: a small weight shares the bias's
/// 2 MiB segment, a large one is cut from a 20 MiB segment of its own.
fn model(inputs: u64, outputs: u64) -> (u64, u64) {
    let (weight, bias) = (block(inputs * outputs * 4), block(outputs * 4));
    let reserved = if weight <= MIB {
        segment(bias)
    } else {
        segment(weight) + segment(bias)
    };
    (weight + bias, reserved)
}
// ANCHOR_END: predict
