//! Test support: exclusive use of the device under test, with clean statistics, and the norm-wise
//! comparison the numerics tests use.

use crate::memory::device::Device;
use crate::policy::config::AllocatorConfig;
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

/// Brings a device back to a clean state: settings as at start-up (cpu streams as
/// `GPUMEM_CPU_STREAMS` says), no cache, counters zero.
pub fn reset(device: &Device) {
    let _ = device.synchronize();
    device.set_late_streams(crate::raw::cpu::cpu_streams_late().unwrap_or(false));
    device.clear_per_process_memory_fraction();
    device.set_allocator_config(AllocatorConfig::from_env().unwrap_or_default());
    let _ = device.record_memory_history_options(crate::policy::history::HistoryOptions {
        clear_history: true,
        ..crate::policy::history::HistoryOptions::off()
    });
    device.record_activity(false);
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

/// A prediction set beside what the allocator measured, number by number. [`Prediction::check`]
/// fails the test once, naming every number that differs ("you predicted X; the allocator
/// measured Y"), not only the first.
///
/// ```
/// gpumem::testing::Prediction::new("your prediction after one alloc")
///     .bytes("memory_allocated", 512_u64, 512_u64)
///     .count("segments", 1_u64, 1_u64)
///     .check();
/// ```
#[derive(Debug)]
#[must_use = "a Prediction compares nothing until check() is called"]
pub struct Prediction {
    what: String,
    numbers: Vec<Compared>,
}

/// One number of a [`Prediction`].
#[derive(Debug)]
struct Compared {
    name: String,
    predicted: String,
    measured: String,
    right: bool,
}

impl Prediction {
    /// A prediction about `what` (for example "your prediction for TinyModelLoaded").
    pub fn new(what: impl Into<String>) -> Prediction {
        Prediction {
            what: what.into(),
            numbers: Vec::new(),
        }
    }

    /// A number of bytes, shown exactly and in KiB/MiB.
    pub fn bytes<T>(self, name: &str, predicted: T, measured: T) -> Prediction
    where
        T: PartialEq + Copy + TryInto<u64>,
    {
        let show = |n: T| match n.try_into() {
            Ok(n) if n < 1024 => format!("{n} B"),
            Ok(n) => format!("{n} B ({})", crate::format::format_bytes(n)),
            Err(_) => "a size beyond u64".to_string(),
        };
        self.push(name, show(predicted), show(measured), predicted == measured)
    }

    /// Any other value (a count, a flag), shown as written in Rust, except that an `Option` reads
    /// as its value or `none` (`1`, not `Some(1)`).
    pub fn count<T: PartialEq + std::fmt::Debug>(
        self,
        name: &str,
        predicted: T,
        measured: T,
    ) -> Prediction {
        let right = predicted == measured;
        self.push(name, plain(&predicted), plain(&measured), right)
    }

    fn push(mut self, name: &str, predicted: String, measured: String, right: bool) -> Prediction {
        self.numbers.push(Compared {
            name: name.to_string(),
            predicted,
            measured,
            right,
        });
        self
    }

    /// The report: `None` when every number is right, else the lines that [`check`] panics with,
    /// the wrong numbers first.
    ///
    /// [`check`]: Prediction::check
    pub fn mismatch(&self) -> Option<String> {
        let wrong: Vec<&Compared> = self.numbers.iter().filter(|c| !c.right).collect();
        if wrong.is_empty() {
            return None;
        }
        let mut lines = vec![format!(
            "{}: {} of {} numbers differ from what the allocator measured",
            self.what,
            wrong.len(),
            self.numbers.len()
        )];
        for c in &wrong {
            lines.push(format!(
                "{}: you predicted {}, the allocator measured {}",
                c.name, c.predicted, c.measured
            ));
        }
        for c in self.numbers.iter().filter(|c| c.right) {
            lines.push(format!("{}: {}, as you predicted", c.name, c.measured));
        }
        Some(lines.join("\n"))
    }

    /// Fails the test with [`mismatch`](Prediction::mismatch)'s report unless every number is right.
    #[track_caller]
    pub fn check(self) {
        if let Some(report) = self.mismatch() {
            panic!("{report}");
        }
    }
}

/// A value as a learner reads it: `Some(x)` as `x`, `None` as `none`.
fn plain<T: std::fmt::Debug>(value: &T) -> String {
    let shown = format!("{value:?}");
    match shown
        .strip_prefix("Some(")
        .and_then(|v| v.strip_suffix(')'))
    {
        Some(inner) => inner.to_string(),
        None if shown == "None" => "none".to_string(),
        None => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_reads_as_its_value() {
        let report = Prediction::new("p")
            .count("segments_after_second", Some(2_u64), Some(1))
            .count("oom_at", None::<u64>, Some(3))
            .mismatch()
            .expect("wrong");
        assert!(
            report.contains("segments_after_second: you predicted 2, the allocator measured 1"),
            "{report}"
        );
        assert!(
            report.contains("oom_at: you predicted none, the allocator measured 3"),
            "{report}"
        );
    }

    #[test]
    fn every_wrong_number_is_named_at_once_with_both_values() {
        let p = Prediction::new("your prediction for X")
            .bytes("allocated", 4_usize, 512_usize)
            .bytes("reserved", 2_u64 << 20, 20 << 20)
            .count("segments", 1_u64, 1_u64);
        let report = p.mismatch().expect("two numbers are wrong");
        assert_eq!(
            report,
            "your prediction for X: 2 of 3 numbers differ from what the allocator measured\n\
             allocated: you predicted 4 B, the allocator measured 512 B\n\
             reserved: you predicted 2097152 B (2.00 MiB), the allocator measured 20971520 B \
             (20.00 MiB)\n\
             segments: 1, as you predicted"
        );
    }

    #[test]
    fn a_right_prediction_passes() {
        let p = Prediction::new("p")
            .bytes("a", 1_u64, 1)
            .count("b", true, true);
        assert_eq!(p.mismatch(), None);
        p.check();
    }

    #[test]
    #[should_panic(expected = "flag: you predicted false, the allocator measured true")]
    fn check_panics_with_the_report() {
        Prediction::new("p").count("flag", false, true).check();
    }
}
