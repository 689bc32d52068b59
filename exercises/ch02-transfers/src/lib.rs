//! Chapter 2, "Moving data between host and device": every copy is counted, so count yours.
//!
//! Replace each `todo!()` (look for `// TODO`), then run `cargo test -p ch02-transfers`.
//! `dev.transfer_stats()` shows the copies made on a device so far; `dev.reset_transfer_stats()`
//! sets them back to zero.
//!
//! Parameters start with `_` only so that the unsolved crate builds without warnings: remove the
//! `_` when you use one.

use gpumem::{Buffer, Device};

// ANCHOR: upload
/// Copies `data` from the host into a new buffer on `dev`: exactly one host-to-device copy.
pub fn upload(_dev: &Device, _data: &[f32]) -> gpumem::Result<Buffer<f32>> {
    // TODO: one call on the device does it.
    todo!("upload")
}

/// Copies a buffer back into a new host `Vec`: exactly one device-to-host copy.
pub fn download(_buf: &Buffer<f32>) -> gpumem::Result<Vec<f32>> {
    // TODO: one call on the buffer does it.
    todo!("download")
}

/// Sends `data` to `dev` and brings it back: one copy each way, and nothing left allocated after.
pub fn round_trip(_dev: &Device, _data: &[f32]) -> gpumem::Result<Vec<f32>> {
    // TODO: use upload and download.
    todo!("round_trip")
}
// ANCHOR_END: upload

// ANCHOR: zeros_on_device
/// `n` zeros in a new buffer on `dev`, made where they are used: no copy at all.
///
/// Building `vec![0.0; n]` on the host and uploading it gives the same buffer, but pays one
/// host-to-device copy of `4 × n` bytes (and `4 × n` bytes of host memory) for nothing.
pub fn zeros_on_device(_dev: &Device, _n: usize) -> gpumem::Result<Buffer<f32>> {
    // TODO: ask the device for the memory directly.
    todo!("zeros_on_device")
}
// ANCHOR_END: zeros_on_device

// ANCHOR: batched_upload
/// All `rows`, one after the other, in one new buffer on `dev`: one host-to-device copy in all,
/// however many rows there are (none when there is no element to copy).
///
/// Uploading row by row moves the same bytes in `rows.len()` copies; every copy has a fixed cost
/// (a driver call, a synchronisation), so many small copies are slower than one large one.
pub fn batched_upload(_dev: &Device, _rows: &[Vec<f32>]) -> gpumem::Result<Buffer<f32>> {
    // TODO: gather the rows on the host first, then copy once.
    todo!("batched_upload")
}
// ANCHOR_END: batched_upload

// ANCHOR: independent_copy
/// A copy of `buf` on the same device that stays unchanged when `buf` is overwritten: its own
/// memory, filled by one device-to-device copy.
///
/// Careful: `buf.to(buf.device())` is not a copy. On the same device `to` hands back a buffer
/// that shares `buf`'s memory, as torch's `x.to(x.device)` returns `x` itself.
pub fn independent_copy(_buf: &Buffer<f32>) -> gpumem::Result<Buffer<f32>> {
    // TODO: find the Buffer method that is torch's `clone()`.
    todo!("independent_copy")
}
// ANCHOR_END: independent_copy
