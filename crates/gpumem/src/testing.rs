//! Test support: exclusive use of the device under test, with clean statistics, and the norm-wise
//! comparison the numerics tests use.

use crate::config::AllocatorConfig;
use crate::device::Device;
use std::sync::{Mutex, MutexGuard};

/// The device a test runs on, held exclusively by that test until dropped.
///
/// Cargo runs a binary's tests on several threads; stats are per process, so each test takes the
/// device for itself. Dereferences to [`Device`].
pub struct TestDevice {
    device: Device,
    _exclusive: MutexGuard<'static, ()>,
}

impl std::ops::Deref for TestDevice {
    type Target = Device;
    fn deref(&self) -> &Device {
        &self.device
    }
}

/// The device from `GPUMEM_DEVICE` (default `auto`), taken for this test alone: cache emptied,
/// settings restored, every counter reset.
///
/// # Panics
/// When `GPUMEM_DEVICE` names a device that cannot be opened (a test must not silently fall back).
pub fn device() -> TestDevice {
    static EXCLUSIVE: Mutex<()> = Mutex::new(());
    // A test that failed while holding the device poisons the lock; the next test still runs.
    let guard = EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner());
    let device = Device::from_env().unwrap_or_else(|e| panic!("GPUMEM_DEVICE: {e}"));
    reset(&device);
    TestDevice {
        device,
        _exclusive: guard,
    }
}

/// Brings a device back to a clean state: settings as at start-up, no cache, counters zero.
pub fn reset(device: &Device) {
    let _ = device.synchronize();
    device.clear_per_process_memory_fraction();
    device.set_allocator_config(AllocatorConfig::from_env().unwrap_or_default());
    device.record_memory_history(false);
    device.empty_cache();
    device.empty_host_cache();
    device.reset_peak_memory_stats();
    device.reset_accumulated_memory_stats();
    device.reset_transfer_stats();
    device.reset_host_memory_stats();
}

/// Norm-wise relative error `‖got − want‖ / ‖want‖`: how far a result is from its reference as a
/// whole. NaN when either side holds a NaN, so no tolerance accepts it.
///
/// # Panics
/// When the two have different lengths.
pub fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let diff: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (diff / norm).sqrt()
}

/// Fails the test, naming `what`, unless `got` is within `tol` of `want` by [`relative_error`] (a
/// NaN never passes).
#[track_caller]
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    let err = relative_error(got, want);
    assert!(
        err <= tol,
        "{what}: relative error {err:e} is above {tol:e}"
    );
}
