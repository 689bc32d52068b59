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
