//! Chapter 3's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

// ANCHOR: scenario
/// A situation to predict, then measure. Each one starts on a device with nothing reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `TinyLinear::new(dev, 10, 10)` is alive: the source's `nn.Linear(10, 10).cuda()`.
    TinyModelLoaded,
    /// The same model, after `drop(model)`.
    TinyModelDropped,
    /// A 4 MiB buffer; `empty_cache()` while it is alive; then `drop` (the wrong order).
    EmptyCacheBeforeDrop,
    /// A 400-byte buffer stays alive; a 1 MiB buffer allocated after it is dropped.
    SmallBufferPinsSegment,
    /// A 2 MiB buffer stays alive; a 6 MiB buffer allocated after it is dropped.
    LiveBlockPinsLargeSegment,
    /// 4 MiB of host data is uploaded with `from_slice`, then the host `Vec` is dropped.
    HostCopyDropped,
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
    /// Every scenario, in the order of the book.
    pub const ALL: [Scenario; 6] = [
        Scenario::TinyModelLoaded,
        Scenario::TinyModelDropped,
        Scenario::EmptyCacheBeforeDrop,
        Scenario::SmallBufferPinsSegment,
        Scenario::LiveBlockPinsLargeSegment,
        Scenario::HostCopyDropped,
    ];
}

// ANCHOR: predict
/// Your prediction for `scenario`, written before you run anything.
pub fn predict(scenario: Scenario) -> Outcome {
    let outcome = |allocated, reserved, reserved_after_empty_cache| Outcome {
        allocated,
        reserved,
        reserved_after_empty_cache,
    };
    match scenario {
        // 400 B and 40 B round up to two 512 B blocks, carved from one new 2 MiB segment.
        Scenario::TinyModelLoaded => outcome(1024, 2 * MIB, 2 * MIB),
        // The blocks are back in the cache; the segment is whole again, so empty_cache frees it.
        Scenario::TinyModelDropped => outcome(0, 2 * MIB, 0),
        // 4 MiB comes from a 20 MiB segment; the early empty_cache found it pinned.
        Scenario::EmptyCacheBeforeDrop => outcome(0, 20 * MIB, 0),
        // The 512 B block pins its 2 MiB segment; the freed 1 MiB merged back into it.
        Scenario::SmallBufferPinsSegment => outcome(512, 2 * MIB, 2 * MIB),
        // Both blocks were carved from one 20 MiB segment; the live 2 MiB pins all 20.
        Scenario::LiveBlockPinsLargeSegment => outcome(2 * MIB, 20 * MIB, 20 * MIB),
        // The host Vec was never device memory; the uploaded copy lives on.
        Scenario::HostCopyDropped => outcome(4 * MIB, 20 * MIB, 20 * MIB),
    }
}
// ANCHOR_END: predict
