//! Chapter 1, "Is there a GPU?": ask the driver, choose a device, say what it has, and predict what
//! the first allocations cost.
//!
//! Reference solution.

use gpumem::{Device, Error, format_bytes};

// ANCHOR: cuda_status
/// One line saying whether CUDA can be used here, for a log or a startup banner.
///
/// The exact format:
/// - when `gpumem::cuda::is_available()`: `CUDA available: {n} device(s)`, with `n` from
///   `gpumem::cuda::device_count()`;
/// - otherwise: `CUDA not available: {reason}`, with the reason from
///   `gpumem::cuda::unavailable_reason()`.
pub fn cuda_status() -> String {
    if gpumem::cuda::is_available() {
        format!("CUDA available: {} device(s)", gpumem::cuda::device_count())
    } else {
        // The probe always gives a reason when CUDA is unavailable; the fallback is never seen.
        let reason = gpumem::cuda::unavailable_reason().unwrap_or_else(|| "unknown".to_string());
        format!("CUDA not available: {reason}")
    }
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
pub fn choose_device(requested: Option<&str>) -> gpumem::Result<Device> {
    let given = requested.unwrap_or("auto");
    let bad = || Error::BadDeviceName {
        value: given.to_string(),
    };
    match given.trim().to_ascii_lowercase().as_str() {
        // `auto` is the only spelling allowed to fall back: nobody asked for a GPU.
        "" | "auto" if gpumem::cuda::is_available() => {
            Device::cuda(0).or_else(|_| Ok(Device::cpu()))
        }
        "" | "auto" | "cpu" => Ok(Device::cpu()),
        "cuda" => Device::cuda(0),
        other => {
            let ordinal = other.strip_prefix("cuda:").ok_or_else(bad)?;
            Device::cuda(ordinal.parse().map_err(|_| bad())?)
        }
    }
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
pub fn describe(dev: &Device) -> gpumem::Result<String> {
    let p = dev.properties()?;
    let memory = format_bytes(p.total_memory);
    Ok(if dev.is_cuda() {
        let (major, minor) = p.compute_capability;
        format!(
            "{dev}: {}, {memory}, {} SMs, compute capability {major}.{minor}",
            p.name, p.multi_processor_count
        )
    } else {
        format!(
            "{dev}: {}, {memory}, {} cores",
            p.name, p.multi_processor_count
        )
    })
}
// ANCHOR_END: describe
