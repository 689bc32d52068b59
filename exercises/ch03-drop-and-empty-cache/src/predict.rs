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
    // TODO: replace each `todo!()` with the three numbers you expect (use MIB).
    match scenario {
        Scenario::TinyModelLoaded => todo!("predict TinyModelLoaded"),
        Scenario::TinyModelDropped => todo!("predict TinyModelDropped"),
        Scenario::EmptyCacheBeforeDrop => todo!("predict EmptyCacheBeforeDrop"),
        Scenario::SmallBufferPinsSegment => todo!("predict SmallBufferPinsSegment"),
        Scenario::LiveBlockPinsLargeSegment => todo!("predict LiveBlockPinsLargeSegment"),
        Scenario::HostCopyDropped => todo!("predict HostCopyDropped"),
    }
}
// ANCHOR_END: predict
