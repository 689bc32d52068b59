//! Dropout with a 1-byte mask: each element is kept or dropped by a counter-based hash of
//! `(seed, index)`, the same on both devices, so the mask can be made again from the seed alone
//! (how the fused attention kernels drop the same elements in backward without storing a mask;
//! torch's memory-efficient and flash kernels keep a Philox seed and offset for the same reason).

use super::cuda::Arg;
use super::elementwise::Launch;
use super::{Float, check_len, host, host_mut};
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;

/// splitmix64's finaliser of `seed` and element `i` (the same as `gm_mix` in `attention.cu`).
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether element `i` survives dropout of probability `p` under `seed` (the same on both devices).
pub fn dropout_keeps(seed: u64, i: u64, p: f32) -> bool {
    (mix(seed, i) >> 40) as f32 * (1.0 / 16_777_216.0) >= p
}

/// The 1-byte keep mask (1 keeps, 0 drops) of dropout with probability `p` for `n` elements under
/// `seed`, made on the device (CUDA's `native_dropout` keeps a `bool` mask of one byte per element).
pub fn dropout_mask(dev: &Device, n: usize, p: f32, seed: u64) -> Result<Buffer<u8>> {
    const OP: &str = "dropout_mask";
    let mut mask = dev.alloc::<u8>(n)?;
    if n == 0 {
        return Ok(mask);
    }
    let launch = Launch::begin(dev, OP, mask.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(mask.ptr()),
            Arg::U64(n as u64),
            Arg::U64(seed),
            Arg::F32(p),
        ];
        return launch.cuda("dropout_mask", n, &args).map(|()| mask);
    }
    // SAFETY: a cpu buffer, a fresh block.
    for (i, m) in unsafe { host_mut(&mut mask) }.iter_mut().enumerate() {
        *m = dropout_keeps(seed, i as u64, p) as u8;
    }
    Ok(mask)
}

/// `x · mask · scale` in a new buffer: dropout's forward (scale `1/(1−p)`) and its backward.
pub fn dropout_apply<T: Float>(x: &Buffer<T>, mask: &Buffer<u8>, scale: f32) -> Result<Buffer<T>> {
    const OP: &str = "dropout_apply";
    let dev = x.device().clone();
    check_len(OP, "mask (the length of x)", &dev, mask, x.len())?;
    let mut y = dev.alloc::<T>(x.len())?;
    if x.is_empty() {
        return Ok(y);
    }
    let launch = Launch::begin(&dev, OP, y.size_bytes());
    if dev.is_cuda() {
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(mask.ptr()),
            Arg::Ptr(y.ptr()),
            Arg::F32(scale),
            Arg::U64(x.len() as u64),
        ];
        let kernel = format!("dropout_apply_{}", T::DTYPE);
        return launch.cuda(&kernel, x.len(), &args).map(|()| y);
    }
    // SAFETY: cpu buffers; y is a fresh block.
    let (xv, mv, yv) = unsafe { (host(x), host(mask), host_mut(&mut y)) };
    for ((o, v), &m) in yv.iter_mut().zip(xv).zip(mv) {
        *o = T::from_f32(if m != 0 { v.to_f32() * scale } else { 0.0 });
    }
    Ok(y)
}
