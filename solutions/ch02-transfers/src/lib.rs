//! Chapter 2, "Moving data between host and device": every copy is counted, so count yours.
//!
//! Reference solution.

use gpumem::{Buffer, Device};

// ANCHOR: upload
/// Copies `data` from the host into a new buffer on `dev`: exactly one host-to-device copy.
pub fn upload(dev: &Device, data: &[f32]) -> gpumem::Result<Buffer<f32>> {
    dev.from_slice(data)
}

/// Copies a buffer back into a new host `Vec`: exactly one device-to-host copy.
pub fn download(buf: &Buffer<f32>) -> gpumem::Result<Vec<f32>> {
    buf.to_vec()
}

/// Sends `data` to `dev` and brings it back: one copy each way, and nothing left allocated after.
pub fn round_trip(dev: &Device, data: &[f32]) -> gpumem::Result<Vec<f32>> {
    let on_device = upload(dev, data)?;
    download(&on_device)
    // `on_device` is dropped here: its block goes back to the allocator's cache.
}
// ANCHOR_END: upload

// ANCHOR: zeros_on_device
/// `n` zeros in a new buffer on `dev`, made where they are used: no copy at all.
///
/// Building `vec![0.0; n]` on the host and uploading it gives the same buffer, but pays one
/// host-to-device copy of `4 × n` bytes (and `4 × n` bytes of host memory) for nothing.
pub fn zeros_on_device(dev: &Device, n: usize) -> gpumem::Result<Buffer<f32>> {
    dev.alloc::<f32>(n)
}
// ANCHOR_END: zeros_on_device

// ANCHOR: batched_upload
/// All `rows`, one after the other, in one new buffer on `dev`: one host-to-device copy in all,
/// however many rows there are (none when there is no element to copy).
///
/// Uploading row by row moves the same bytes in `rows.len()` copies; every copy has a fixed cost
/// (a driver call, a synchronisation), so many small copies are slower than one large one.
pub fn batched_upload(dev: &Device, rows: &[Vec<f32>]) -> gpumem::Result<Buffer<f32>> {
    // Host memory is cheap to gather into; the device sees a single copy.
    let batch: Vec<f32> = rows.concat();
    dev.from_slice(&batch)
}
// ANCHOR_END: batched_upload

// ANCHOR: independent_copy
/// A copy of `buf` on the same device that stays unchanged when `buf` is overwritten: its own
/// memory, filled by one device-to-device copy.
///
/// Careful: `buf.to(buf.device())` is not a copy. On the same device `to` hands back a buffer
/// that shares `buf`'s memory, as torch's `x.to(x.device)` returns `x` itself.
pub fn independent_copy(buf: &Buffer<f32>) -> gpumem::Result<Buffer<f32>> {
    buf.try_clone()
}
// ANCHOR_END: independent_copy
