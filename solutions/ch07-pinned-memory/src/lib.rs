//! Chapter 7, "Pinned memory": copies from page-locked host memory, which can run asynchronously,
//! and a data loader's `pin_memory` as a double-buffered staging pipeline.
//!
//! Reference solution.

use gpumem::{Buffer, Device, Event, PinnedBuffer, Result, Stream};

// ANCHOR: upload_pinned
/// Copies `data` into a new buffer on `dev` through a pinned staging buffer: one pinned
/// host-to-device copy, queued on `stream` and finished before the function returns, so the
/// buffer can be used on any stream. The staging buffer goes back to the host cache.
pub fn upload_pinned(dev: &Device, stream: &Stream, data: &[f32]) -> Result<Buffer<f32>> {
    let mut staging = dev.alloc_pinned::<f32>(data.len())?;
    staging.as_mut_slice().copy_from_slice(data);
    let mut on_device = dev.alloc::<f32>(data.len())?;
    staging.copy_to_device_async(&mut on_device, stream)?;
    // The copy runs on `stream`, and the caller may read the buffer on another one: wait here.
    stream.synchronize()?;
    Ok(on_device)
    // `staging` is dropped here: its block goes back to the caching host allocator.
}
// ANCHOR_END: upload_pinned

// ANCHOR: download_pinned
/// Copies `buf` back to a new host `Vec` through a pinned staging buffer: one pinned
/// device-to-host copy, queued on `stream` behind the work already there (whatever wrote `buf`
/// must have finished or be queued on `stream` too). Allocates no device memory.
pub fn download_pinned(buf: &Buffer<f32>, stream: &Stream) -> Result<Vec<f32>> {
    let mut staging = buf.device().alloc_pinned::<f32>(buf.len())?;
    staging.copy_from_device_async(buf, stream)?;
    // as_slice waits for the copy; in torch you must synchronize before reading yourself.
    Ok(staging.as_slice().to_vec())
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
    HostPrediction {
        // a (16 KiB block), b (32 KiB), d (4 KiB); c reuses a's cached 16 KiB block.
        num_host_alloc: 3,
        // c (16 KiB) + d (4 KiB).
        pinned_active_bytes: 16_384 + 4096,
        // a and b alive together.
        pinned_peak_active_bytes: 16_384 + 32_768,
        // Every block obtained stays: 16 KiB (c) + 32 KiB (b's, cached) + 4 KiB (d).
        pinned_pool_bytes: 16_384 + 32_768 + 4096,
        // Only the cached 32 KiB block has no owner.
        num_host_free: 1,
        pinned_pool_after_empty: 16_384 + 4096,
        // a's async copy and the copy from the Vec.
        host_to_device_copies: 2,
        pinned_copies: 1,
        // The data's bytes, not the block's.
        pinned_bytes: 12_000,
    }
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
    dev: &Device,
    batches: usize,
    batch_len: usize,
    mut fill: F,
    mut consume: C,
) -> Result<()>
where
    F: FnMut(usize, &mut [f32]),
    C: FnMut(usize, Buffer<f32>) -> Result<()>,
{
    if batches == 0 {
        return Ok(());
    }
    let copy_stream = dev.stream()?;
    let mut staging = [
        dev.alloc_pinned::<f32>(batch_len)?,
        dev.alloc_pinned::<f32>(batch_len)?,
    ];
    let mut in_flight = Some(start_batch(
        dev,
        &copy_stream,
        &mut staging[0],
        0,
        &mut fill,
    )?);
    for i in 0..batches {
        let (on_device, copied) = in_flight.take().expect("batch i was started");
        if i + 1 < batches {
            let slot = &mut staging[(i + 1) % 2];
            in_flight = Some(start_batch(dev, &copy_stream, slot, i + 1, &mut fill)?);
        }
        copied.synchronize()?;
        consume(i, on_device)?;
    }
    Ok(())
}

/// Fills `staging` with batch `i` and queues its copy into a new device buffer on `stream`;
/// returns the buffer and an event that passes when the copy is done.
fn start_batch<F>(
    dev: &Device,
    stream: &Stream,
    staging: &mut PinnedBuffer<f32>,
    i: usize,
    fill: &mut F,
) -> Result<(Buffer<f32>, Event)>
where
    F: FnMut(usize, &mut [f32]),
{
    // as_mut_slice first waits for the copy of batch i - 2, the last one out of this buffer.
    fill(i, staging.as_mut_slice());
    let mut on_device = dev.alloc::<f32>(staging.len())?;
    staging.copy_to_device_async(&mut on_device, stream)?;
    Ok((on_device, stream.record_event()?))
}
// ANCHOR_END: pipeline
