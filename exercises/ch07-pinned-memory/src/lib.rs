//! Chapter 7, "Pinned memory": copies from page-locked host memory, which can run asynchronously,
//! and a data loader's `pin_memory` as a double-buffered staging pipeline.
//!
//! Replace each `todo!()` (look for `// TODO`), then run `cargo test -p ch07-pinned-memory`.
//! `dev.host_memory_stats()` shows the pinned host allocator's counters, `dev.transfer_stats()`
//! the copies (its `pinned` field counts those whose host side was pinned memory).
//!
//! Parameters start with `_` only so that the unsolved crate builds without warnings: remove the
//! `_` when you use one.

use gpumem::{Buffer, Device, Result, Stream};

// ANCHOR: upload_pinned
/// Copies `data` into a new buffer on `dev` through a pinned staging buffer: one pinned
/// host-to-device copy, queued on `stream` and finished before the function returns, so the
/// buffer can be used on any stream. The staging buffer goes back to the host cache.
pub fn upload_pinned(_dev: &Device, _stream: &Stream, _data: &[f32]) -> Result<Buffer<f32>> {
    // TODO: a pinned staging buffer, the data written into it, a device buffer, one async copy on
    // `stream`, and a wait before returning.
    todo!("upload_pinned")
}
// ANCHOR_END: upload_pinned

// ANCHOR: download_pinned
/// Copies `buf` back to a new host `Vec` through a pinned staging buffer: one pinned
/// device-to-host copy, queued on `stream` behind the work already there (whatever wrote `buf`
/// must have finished or be queued on `stream` too). Allocates no device memory.
pub fn download_pinned(_buf: &Buffer<f32>, _stream: &Stream) -> Result<Vec<f32>> {
    // TODO: a pinned staging buffer on buf's device, one async copy into it, then read it.
    todo!("download_pinned")
}
// ANCHOR_END: download_pinned

// ANCHOR: host_prediction
/// What `host_scenario` does to the pinned host allocator (`dev.host_memory_stats()`) and to the
/// copy counters (`dev.transfer_stats()`), on a device with an empty host cache and zeroed counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPrediction {
    /// Pinned blocks obtained from the system (`num_host_alloc`).
    pub num_host_alloc: u64,
    /// Bytes in pinned blocks handed out, at the end (`active_bytes.current`).
    pub pinned_active_bytes: u64,
    /// The most bytes ever in pinned blocks handed out (`active_bytes.peak`).
    pub pinned_peak_active_bytes: u64,
    /// Bytes of pinned memory held, handed out or cached, at the end: the pool
    /// (`allocated_bytes.current`, torch 2.15's meaning).
    pub pinned_pool_bytes: u64,
    /// Pinned blocks given back to the system by `empty_host_cache` (`num_host_free`).
    pub num_host_free: u64,
    /// `allocated_bytes.current` (the pool) after `empty_host_cache`.
    pub pinned_pool_after_empty: u64,
    /// Host-to-device copies, pageable and pinned (`host_to_device.copies`).
    pub host_to_device_copies: u64,
    /// Of those, copies from pinned memory (`pinned.copies`).
    pub pinned_copies: u64,
    /// Bytes moved by the pinned copies (`pinned.bytes`).
    pub pinned_bytes: u64,
}
// ANCHOR_END: host_prediction

// ANCHOR: host_scenario
/// The scenario to predict, as code. It returns what it measured, in the shape of the prediction.
pub fn host_scenario(dev: &Device) -> Result<HostPrediction> {
    let stream = dev.stream()?;
    let mut x = dev.alloc::<f32>(3000)?;
    let mut a = dev.alloc_pinned::<f32>(3000)?; // 12,000 bytes
    a.as_mut_slice().fill(1.0);
    a.copy_to_device_async(&mut x, &stream)?;
    let b = dev.alloc_pinned::<u8>(20_000)?;
    stream.synchronize()?; // a's copy has finished, so a's block may be reused once a is dropped
    drop(a);
    drop(b);
    let c = dev.alloc_pinned::<f32>(2500)?; // 10,000 bytes
    let d = dev.alloc_pinned::<u8>(4096)?;
    x.copy_from_slice(&vec![2.0; 3000])?; // from a Vec: pageable memory

    let before = dev.host_memory_stats();
    dev.empty_host_cache(); // c and d are still alive
    let after = dev.host_memory_stats();
    let copies = dev.transfer_stats();
    drop((c, d));
    Ok(HostPrediction {
        num_host_alloc: before.num_host_alloc,
        pinned_active_bytes: before.active_bytes.current,
        pinned_peak_active_bytes: before.active_bytes.peak,
        pinned_pool_bytes: before.allocated_bytes.current,
        num_host_free: after.num_host_free,
        pinned_pool_after_empty: after.allocated_bytes.current,
        host_to_device_copies: copies.host_to_device.copies,
        pinned_copies: copies.pinned.copies,
        pinned_bytes: copies.pinned.bytes,
    })
}
// ANCHOR_END: host_scenario

// ANCHOR: predict_host
/// Predict, then measure: the numbers you expect from `host_scenario`, written BEFORE running it.
pub fn predict_host() -> HostPrediction {
    // TODO: write your prediction, e.g.
    // HostPrediction { num_host_alloc: 4, pinned_active_bytes: 22_096, ... }
    todo!("predict_host")
}
// ANCHOR_END: predict_host

// ANCHOR: pipeline
/// Streams `batches` batches of `batch_len` `f32` to `dev` through two pinned staging buffers
/// used in turn, as a data loader with `pin_memory=True` feeding a training loop.
///
/// For batch `i`: `fill(i, staging)` writes it into staging buffer `i % 2`; an asynchronous copy
/// on a copy stream moves it into a new device buffer; once that copy has finished,
/// `consume(i, buffer)` gets the buffer. The order is fixed, so that the host fills batch `i + 1`
/// while batch `i` is being copied, and batch `i + 1` is copied while `consume` works on batch `i`:
///
/// ```text
/// fill 0, copy 0; fill 1, copy 1, wait for copy 0, consume 0; fill 2, copy 2, wait for copy 1,
/// consume 1; ... ; wait for copy n-1, consume n-1
/// ```
///
/// Exactly two `alloc_pinned` calls however many batches there are (none when there are none),
/// one pinned host-to-device copy per batch, at most two batches on the device at once. The first
/// error, from `consume` or from the device, stops the pipeline and is returned.
pub fn pipeline<F, C>(
    _dev: &Device,
    _batches: usize,
    _batch_len: usize,
    _fill: F,
    _consume: C,
) -> Result<()>
where
    F: FnMut(usize, &mut [f32]),
    C: FnMut(usize, Buffer<f32>) -> Result<()>,
{
    // TODO: a copy stream, two pinned staging buffers, then the loop in the order above.
    todo!("pipeline")
}
// ANCHOR_END: pipeline
