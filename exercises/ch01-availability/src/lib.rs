//! Chapter 1, "Is there a GPU?": ask the driver, choose a device, say what it has, and predict what
//! the first allocations cost.
//!
//! Replace each `todo!()` (look for `// TODO`), then run `cargo test -p ch01-availability`.
//! Parameters start with `_` only so that the unsolved crate builds without warnings: remove the
//! `_` when you use one.

use gpumem::Device;

// ANCHOR: cuda_status
/// One line saying whether CUDA can be used here, for a log or a startup banner.
///
/// The exact format:
/// - when `gpumem::cuda::is_available()`: `CUDA available: {n} device(s)`, with `n` from
///   `gpumem::cuda::device_count()`;
/// - otherwise: `CUDA not available: {reason}`, with the reason from
///   `gpumem::cuda::unavailable_reason()`.
pub fn cuda_status() -> String {
    // TODO: ask gpumem::cuda and build the line.
    todo!("cuda_status")
}
// ANCHOR_END: cuda_status

// ANCHOR: choose_device
/// The device to run on, from an override such as the value of `GPUMEM_DEVICE`.
///
/// - `None`, `auto` or an empty string: `cuda:0` when CUDA is available, else `cpu`;
/// - `cpu`: the `cpu` device, even on a machine with a GPU;
/// - `cuda`: `cuda:0`; `cuda:N`: device `N`. When that device cannot be opened, return the error
///   `Device::cuda` gives: asking for a GPU must never quietly give you the CPU;
/// - anything else: `gpumem::Error::BadDeviceName { value }`, with `value` the override as given.
///
/// Case and surrounding spaces do not matter (` CUDA:0 ` is `cuda:0`).
/// Build it from `gpumem::cuda::is_available()`, `Device::cpu()` and `Device::cuda(n)`.
/// (`Device::by_name` already does all this: do not call it here, compare with it afterwards.)
pub fn choose_device(_requested: Option<&str>) -> gpumem::Result<Device> {
    // TODO: normalise the text, then match on it.
    todo!("choose_device")
}
// ANCHOR_END: choose_device

// ANCHOR: describe
/// One line describing a device, from `dev.properties()`, with sizes in `gpumem::format_bytes`.
///
/// - a CUDA device:
///   `{device}: {name}, {total memory}, {multiprocessors} SMs, compute capability {major}.{minor}`;
/// - the cpu device: `{device}: {name}, {total memory}, {multiprocessors} cores`,
///   for example `cpu: Intel(R) Xeon(R) Processor, 23.54 GiB, 2 cores`.
///
/// `{device}` is the device's `Display` (`cpu`, `cuda:0`). Describing a device must not
/// allocate anything on it.
pub fn describe(_dev: &Device) -> gpumem::Result<String> {
    // TODO: read the properties and format them.
    todo!("describe")
}
// ANCHOR_END: describe
