//! Chapter 2's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: predict_pipeline
/// What [`predict_pipeline`] predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelinePrediction {
    /// Host-to-device copies (`transfer_stats().host_to_device.copies`).
    pub host_to_device_copies: u64,
    /// Bytes moved host-to-device (`transfer_stats().host_to_device.bytes`).
    pub host_to_device_bytes: u64,
    /// Device-to-device copies (`transfer_stats().device_to_device.copies`).
    pub device_to_device_copies: u64,
    /// Device-to-host copies (`transfer_stats().device_to_host.copies`).
    pub device_to_host_copies: u64,
    /// Live blocks at the end (`memory_stats()["allocation.all.current"]`).
    pub live_blocks: u64,
    /// `memory_allocated()` at the end, in bytes.
    pub allocated: u64,
    /// How much `memory_allocated()` falls when `host` is dropped, in bytes.
    pub freed_by_dropping_host: u64,
}

/// Your prediction, as a rule of `len`, for this pipeline run on a fresh device with zeroed
/// counters:
///
/// ```text
/// let host: Vec<f32> = vec![1.0; len];        // len * 4 bytes of host memory
/// let x = dev.from_slice(&host)?;
/// let y = x.to(&dev)?;                        // the same device
/// let z = x.try_clone()?;
/// let w = dev.alloc::<f32>(len)?;
/// drop(host);                                 // torch: `del x` (the host tensor)
/// let back = z.to_vec()?;
/// // measure: transfer_stats(), memory_allocated(), live blocks (allocation.all.current)
/// ```
///
/// The tests call it at the page's size (`len = 1000`) and at sizes up to 1 MiB of data drawn
/// afresh on every run.
pub fn predict_pipeline(_len: u64) -> PipelinePrediction {
    // TODO: write the rules as arithmetic on len.
    todo!("predict_pipeline")
}
// ANCHOR_END: predict_pipeline
