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
