//! Test support: exclusive use of the device under test, with clean statistics, the seeds of the
//! randomized tests, and the norm-wise comparison the numerics tests use.
//!
//! # Seeds
//!
//! Every randomized test draws its data from [`rng`], which prints the test's seed:
//! `seed 272 (rerun with GPUMEM_TEST_SEED=272)`. Without settings the seed is fresh each run.
//!
//! - `GPUMEM_TEST_SEED=<u64>` ([`TEST_SEED`]) gives every randomized test that seed: set it to
//!   replay a failure (`GPUMEM_TEST_SEED=272 cargo test -p ch06-mixed-precision`). `workbook check`
//!   and `workbook grade` pass it to the tests they run and name a failed test's seed in its
//!   feedback.
//! - `GPUMEM_TEST_SEEDS=<first>..<end>` ([`TEST_SEEDS`]) runs the body of every randomized test
//!   once per seed of that range, inside one process, and stops at the first seed that fails,
//!   naming it. This is the seed sweep (`scripts/sweep-seeds.sh`). A randomized test takes part by
//!   wrapping its body in [`seeded`]; [`rng`] called outside [`seeded`] under `GPUMEM_TEST_SEEDS`
//!   fails the test, so that no randomized test is left out of a sweep unnoticed.
//!
//! A test has one seed; the first generator [`rng`] makes in it is `XorShift::new(seed)`, and each
//! further one starts from a seed derived from it, so one seed replays the whole test.

use crate::memory::device::Device;
use crate::ops::XorShift;
use crate::policy::config::AllocatorConfig;
use std::cell::Cell;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Mutex, MutexGuard};

/// The variable that gives every randomized test one seed: `GPUMEM_TEST_SEED=<u64>`.
pub const TEST_SEED: &str = "GPUMEM_TEST_SEED";
/// The variable that runs every randomized test once per seed of a range, in one process:
/// `GPUMEM_TEST_SEEDS=<first>..<end>` (`end` excluded).
pub const TEST_SEEDS: &str = "GPUMEM_TEST_SEEDS";

thread_local! {
    /// The seed of the test running on this thread, and how many generators [`rng`] has made from
    /// it. Cargo runs each test on a thread of its own.
    static CURRENT: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// The generator of a randomized test: its first is `XorShift::new(seed)`, each further one starts
/// from a seed derived from the test's, so that one seed replays the whole test. The seed is
/// `GPUMEM_TEST_SEED`, the current one of a [`seeded`] loop, or fresh; it is printed on the test's
/// first call (see the module's docs).
///
/// # Panics
/// When `GPUMEM_TEST_SEED` is not a u64, or under `GPUMEM_TEST_SEEDS` outside [`seeded`].
pub fn rng() -> XorShift {
    let (seed, made) = this_tests_seed();
    CURRENT.set(Some((seed, made + 1)));
    XorShift::new(seed.wrapping_add(made.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}

/// The seed of the test running on this thread and how many generators it has made: the current
/// one of a [`seeded`] loop, else `GPUMEM_TEST_SEED` or a fresh seed (printed). Both [`rng`] and
/// [`Draw::from_env`] take their seed here, so one seed replays a whole test and a sweep reaches
/// every randomized test.
///
/// # Panics
/// Under `GPUMEM_TEST_SEEDS` outside [`seeded`]: that test would not take part in the sweep.
fn this_tests_seed() -> (u64, u64) {
    CURRENT.get().unwrap_or_else(|| {
        if std::env::var_os(TEST_SEEDS).is_some() {
            panic!(
                "{TEST_SEEDS} is set, but this randomized test does not loop over it: wrap its \
                 body in gpumem::testing::seeded(|| ...)"
            );
        }
        let seed = one_seed();
        announce(seed);
        (seed, 0)
    })
}

/// Runs a randomized test's body: once, with the seed [`rng`] would choose (printed first), or,
/// under `GPUMEM_TEST_SEEDS`, once per seed of the range until one fails, printing that seed.
/// The body's [`rng`] calls draw from the seed of the run. Returns what the last run returned.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// gpumem::testing::seeded(|| {
///     let x = gpumem::testing::rng().uniform(0.0, 1.0);
///     anyhow::ensure!((0.0..1.0).contains(&x), "{x} is out of range");
///     Ok(())
/// })
/// # }
/// ```
///
/// # Panics
/// When a seed variable is malformed, and where the body panics (the seed printed first).
pub fn seeded<R: Outcome>(body: impl FnMut() -> R) -> R {
    run_seeds(seed_range(), body)
}

/// [`seeded`] over `seeds` (`None`: one seed, as [`rng`] chooses it).
fn run_seeds<R: Outcome>(seeds: Option<Range<u64>>, mut body: impl FnMut() -> R) -> R {
    let Some(seeds) = seeds else {
        let seed = one_seed();
        announce(seed);
        return run_at(seed, &mut body);
    };
    let mut last = None;
    for seed in seeds.clone() {
        let outcome = match catch_unwind(AssertUnwindSafe(|| run_at(seed, &mut body))) {
            Ok(outcome) => outcome,
            Err(panic) => {
                failed_at(seed);
                resume_unwind(panic)
            }
        };
        if outcome.failed() {
            failed_at(seed);
            return outcome;
        }
        last = Some(outcome);
    }
    println!("seeds {}..{}: all passed", seeds.start, seeds.end);
    last.expect("a seed range is never empty")
}

/// What a test body returns: `()` (it fails by panicking) or a `Result` (it fails by `Err` too).
pub trait Outcome {
    /// Whether the body failed without panicking.
    fn failed(&self) -> bool;
}

impl Outcome for () {
    fn failed(&self) -> bool {
        false
    }
}

impl<E> Outcome for Result<(), E> {
    fn failed(&self) -> bool {
        self.is_err()
    }
}

/// Runs `body` with `seed` as the thread's test seed, and forgets the seed afterwards.
fn run_at<R>(seed: u64, body: &mut impl FnMut() -> R) -> R {
    struct Forget;
    impl Drop for Forget {
        fn drop(&mut self) {
            CURRENT.set(None);
        }
    }
    let _forget = Forget;
    CURRENT.set(Some((seed, 0)));
    body()
}

fn announce(seed: u64) {
    println!("seed {seed} (rerun with {TEST_SEED}={seed})");
}

fn failed_at(seed: u64) {
    println!("seed {seed} failed (rerun with {TEST_SEED}={seed})");
}

/// `GPUMEM_TEST_SEED`, else a fresh seed.
fn one_seed() -> u64 {
    match std::env::var(TEST_SEED) {
        Ok(text) => parse_seed(&text).unwrap_or_else(|| {
            panic!("{TEST_SEED}={text:?} is not a seed: give a u64 such as 272")
        }),
        Err(_) => XorShift::fresh().seed(),
    }
}

fn parse_seed(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// `GPUMEM_TEST_SEEDS`'s range, if it is set.
fn seed_range() -> Option<Range<u64>> {
    let text = std::env::var(TEST_SEEDS).ok()?;
    if std::env::var_os(TEST_SEED).is_some() {
        panic!("{TEST_SEED} and {TEST_SEEDS} are both set: set one (a seed, or a range to sweep)");
    }
    let range = parse_seed_range(&text).unwrap_or_else(|| {
        panic!("{TEST_SEEDS}={text:?} is not a range of seeds: write it as 0..2000 (end excluded)")
    });
    Some(range)
}

/// `first..end` with `first < end`.
fn parse_seed_range(text: &str) -> Option<Range<u64>> {
    let (first, end) = text.trim().split_once("..")?;
    let (first, end) = (parse_seed(first)?, parse_seed(end)?);
    (first < end).then_some(first..end)
}

/// Held by the test that has the devices ([`device`], [`devices`]).
static EXCLUSIVE: Mutex<()> = Mutex::new(());

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
    // A test that failed while holding the device poisons the lock; the next test still runs.
    let guard = EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner());
    let device = Device::from_env().unwrap_or_else(|e| panic!("GPUMEM_DEVICE: {e}"));
    reset(&device);
    TestDevice {
        device,
        _exclusive: guard,
    }
}

/// The ranks of a test's process group, the devices held exclusively by that test until
/// dropped (with [`device`]'s device: one test at a time has any). Dereferences to
/// [`ProcessGroup`](crate::collective::ProcessGroup).
pub struct TestDevices {
    group: crate::memory::collective::ProcessGroup,
    _exclusive: MutexGuard<'static, ()>,
}

impl std::ops::Deref for TestDevices {
    type Target = crate::memory::collective::ProcessGroup;
    fn deref(&self) -> &crate::memory::collective::ProcessGroup {
        &self.group
    }
}

/// A group of `world_size` ranks on `cpu`, `cpu:1`, ... (always cpu devices, whatever
/// `GPUMEM_DEVICE` says: a machine has one GPU or a few, a process as many cpu devices as it
/// opens), taken for this test alone, each device reset as [`device`] resets its own.
///
/// # Panics
/// When `world_size` is 0 or more than [`MAX_CPU_DEVICES`](crate::device::MAX_CPU_DEVICES).
pub fn devices(world_size: usize) -> TestDevices {
    let guard = EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner());
    let group = crate::memory::collective::ProcessGroup::cpu(world_size)
        .unwrap_or_else(|e| panic!("a group of {world_size} cpu devices: {e}"));
    for dev in group.devices() {
        reset(dev);
    }
    TestDevices {
        group,
        _exclusive: guard,
    }
}

pub use crate::raw::driver::CudaStatus;

/// Runs `body` with `gpumem::cuda::is_available`, `device_count` and `unavailable_reason`
/// answering `status` on this thread, and `Device::cuda(n)` failing as it would under it
/// (`CudaUnavailable` with its reason, `NoSuchDevice` past its count; a device the status claims
/// but this machine lacks is `CudaUnavailable`): code written for a machine with a GPU, or for a
/// driver that fails in a given way, is exercised anywhere. Other threads see the real driver.
pub fn with_cuda_status<R>(status: CudaStatus, body: impl FnOnce() -> R) -> R {
    let _fed = crate::raw::driver::feed_status(status);
    body()
}

/// Runs `body` with `Device::properties` answering `properties` for every device on this thread,
/// so that code formatting them is checked against values it cannot have copied.
pub fn with_device_properties<R>(
    properties: crate::raw::backend::DeviceProperties,
    body: impl FnOnce() -> R,
) -> R {
    let _fed = crate::memory::device::feed_properties(properties);
    body()
}

/// How many times `Device::by_name` has been called in this process so far: an exercise that
/// must build the same choice itself is checked not to call it (read before and after).
pub fn by_name_calls() -> u64 {
    crate::memory::device::by_name_calls()
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

/// The environment variable in which `workbook check` names the tests that failed at the
/// learner's previous check (comma-separated): a [`Prediction`] shows the measured values only
/// to a learner who has tried once already.
pub const TRIED_VAR: &str = "WORKBOOK_TRIED";

/// Sizes drawn per run, so that a prediction copied from a page or a failure passes one case at
/// most: a small deterministic generator (splitmix64) started from a seed.
#[derive(Debug, Clone)]
pub struct Draw {
    seed: u64,
    state: u64,
}

impl Draw {
    /// The sizes of this test: drawn from the seed of a [`seeded`] loop, else from
    /// `GPUMEM_TEST_SEED` ([`TEST_SEED`]), else from a fresh seed, printed as [`rng`] prints it so
    /// that a failure can be run again with the same sizes.
    ///
    /// # Panics
    /// When `GPUMEM_TEST_SEED` is set but is not a `u64`, and under `GPUMEM_TEST_SEEDS` outside
    /// [`seeded`].
    pub fn from_env() -> Draw {
        let (seed, made) = this_tests_seed();
        CURRENT.set(Some((seed, made)));
        Draw::new(seed)
    }

    /// The generator started from `seed`.
    pub fn new(seed: u64) -> Draw {
        Draw { seed, state: seed }
    }

    /// The seed it started from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A whole number from `low` to `high`, both included.
    ///
    /// # Panics
    /// When `low > high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "an empty range {low}..={high}");
        match (high - low).checked_add(1) {
            Some(width) => low + self.next_u64() % width,
            None => self.next_u64(),
        }
    }

    /// [`Draw::range`] as a `usize`.
    pub fn size(&mut self, low: usize, high: usize) -> usize {
        self.range(low as u64, high as u64) as usize
    }

    /// One of `items`.
    ///
    /// # Panics
    /// When `items` is empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        assert!(!items.is_empty(), "nothing to pick from");
        items[self.size(0, items.len() - 1)]
    }
}

/// A prediction set beside what the allocator measured, number by number. [`Prediction::check`]
/// fails the test once, naming every number that differs and the rule it tests; the measured
/// value is shown only from the learner's second try (`workbook check` names the tests that
/// failed before in `WORKBOOK_TRIED`), so that a first failure does not hand over the answer.
///
/// ```
/// gpumem::testing::Prediction::new("your prediction after one alloc")
///     .bytes("memory_allocated", 512_u64, 512_u64)
///     .rule("every block is a multiple of 512 bytes")
///     .count("segments", 1_u64, 1_u64)
///     .check();
/// ```
#[derive(Debug)]
#[must_use = "a Prediction compares nothing until check() is called"]
pub struct Prediction {
    what: String,
    numbers: Vec<Compared>,
    revealed: bool,
}

/// One number of a [`Prediction`].
#[derive(Debug)]
struct Compared {
    name: String,
    rule: Option<String>,
    predicted: String,
    measured: String,
    right: bool,
}

impl Prediction {
    /// A prediction about `what` (for example "your prediction for TinyModelLoaded"). The
    /// measured values are shown when this test failed at the learner's previous check.
    pub fn new(what: impl Into<String>) -> Prediction {
        // libtest runs each test in a thread named after it.
        let tried = tried_names(&std::env::var(TRIED_VAR).unwrap_or_default());
        let revealed = std::thread::current()
            .name()
            .is_some_and(|name| tried.iter().any(|t| t == name));
        Prediction {
            what: what.into(),
            numbers: Vec::new(),
            revealed,
        }
    }

    /// Shows the measured values of wrong numbers (`true`) or keeps them back (`false`),
    /// whatever `WORKBOOK_TRIED` says.
    pub fn revealing(mut self, revealed: bool) -> Prediction {
        self.revealed = revealed;
        self
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

    /// The rule the last number added tests, named when it is wrong.
    pub fn rule(mut self, rule: &str) -> Prediction {
        if let Some(last) = self.numbers.last_mut() {
            last.rule = Some(rule.to_string());
        }
        self
    }

    fn push(mut self, name: &str, predicted: String, measured: String, right: bool) -> Prediction {
        self.numbers.push(Compared {
            name: name.to_string(),
            rule: None,
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
            let rule = match &c.rule {
                Some(rule) => format!(" (the rule it tests: {rule})"),
                None => String::new(),
            };
            if self.revealed {
                lines.push(format!(
                    "{}: you predicted {}, the allocator measured {}{rule}",
                    c.name, c.predicted, c.measured
                ));
            } else {
                lines.push(format!(
                    "{}: you predicted {}, which is not what the allocator measured{rule}",
                    c.name, c.predicted
                ));
            }
        }
        for c in self.numbers.iter().filter(|c| c.right) {
            lines.push(format!("{}: {}, as you predicted", c.name, c.measured));
        }
        if !self.revealed {
            lines.push(
                "the measured values are shown from your next try (run `workbook check` again)"
                    .to_string(),
            );
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

/// The test names in a `WORKBOOK_TRIED` list.
fn tried_names(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
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
    fn a_run_draws_first_from_its_seed_and_then_from_seeds_derived_from_it() {
        let (first, second, third) = run_at(272, &mut || (rng(), rng(), rng()));
        assert_eq!(first.seed(), 272, "the issue's seeds replay as printed");
        assert_ne!(second.seed(), 272);
        assert_ne!(third.seed(), second.seed());
        let again = run_at(272, &mut || (rng(), rng(), rng()));
        assert_eq!(
            [first.seed(), second.seed(), third.seed()],
            [again.0.seed(), again.1.seed(), again.2.seed()],
            "one seed replays every generator of the test"
        );
        assert_eq!(CURRENT.get(), None, "the seed is forgotten after the run");
    }

    #[test]
    fn a_sweep_runs_the_body_once_per_seed_in_this_process() {
        let mut seen = Vec::new();
        run_seeds(Some(3..7), || seen.push(rng().seed()));
        assert_eq!(seen, [3, 4, 5, 6]);
        assert_eq!(CURRENT.get(), None);
    }

    #[test]
    fn a_sweep_stops_at_the_first_seed_whose_body_fails() {
        let mut seen = Vec::new();
        let outcome = run_seeds(Some(3..100), || {
            let seed = rng().seed();
            seen.push(seed);
            if seed == 5 { Err(seed) } else { Ok(()) }
        });
        assert_eq!(outcome, Err(5));
        assert_eq!(seen, [3, 4, 5]);
    }

    #[test]
    fn a_sweep_stops_at_the_first_seed_whose_body_panics() {
        let mut seen = Vec::new();
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            run_seeds(Some(10..20), || {
                seen.push(rng().seed());
                assert!(seen.len() < 2, "the second seed fails");
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(seen, [10, 11]);
        assert_eq!(CURRENT.get(), None);
    }

    #[test]
    fn seed_ranges_are_first_dot_dot_end_and_never_empty() {
        assert_eq!(parse_seed_range("0..2000"), Some(0..2000));
        assert_eq!(parse_seed_range(" 7..8 "), Some(7..8));
        assert_eq!(parse_seed_range("5..5"), None);
        assert_eq!(parse_seed_range("9..2"), None);
        assert_eq!(parse_seed_range("2000"), None);
        assert_eq!(parse_seed_range("a..3"), None);
        assert_eq!(parse_seed_range("-1..3"), None);
        assert_eq!(
            parse_seed(" 7694720226940991941\n"),
            Some(7_694_720_226_940_991_941)
        );
        assert_eq!(parse_seed("18446744073709551616"), None, "above u64");
    }

    #[test]
    fn an_option_reads_as_its_value() {
        let report = Prediction::new("p")
            .revealing(true)
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
            .revealing(true)
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
        Prediction::new("p")
            .revealing(true)
            .count("flag", false, true)
            .check();
    }

    #[test]
    fn a_first_failure_names_the_rule_and_keeps_the_measured_value_back() {
        let report = Prediction::new("your prediction for X")
            .revealing(false)
            .bytes("allocated", 4_u64, 4321)
            .rule("every block is a multiple of 512 bytes")
            .mismatch()
            .expect("wrong");
        assert!(
            report.contains(
                "allocated: you predicted 4 B, which is not what the allocator measured (the \
                 rule it tests: every block is a multiple of 512 bytes)"
            ),
            "{report}"
        );
        assert!(!report.contains("4321"), "{report}");
        assert!(report.contains("run `workbook check` again"), "{report}");
    }

    #[test]
    fn workbook_tried_is_a_comma_separated_list_of_test_names() {
        assert_eq!(tried_names(" a,b ,,c"), ["a", "b", "c"]);
        assert!(tried_names("").is_empty());
    }

    #[test]
    fn the_same_seed_draws_the_same_sizes_and_ranges_hold() {
        let mut a = Draw::new(7);
        let mut b = Draw::new(7);
        for _ in 0..100 {
            let x = a.range(3, 9);
            assert_eq!(x, b.range(3, 9));
            assert!((3..=9).contains(&x), "{x}");
        }
        assert_eq!(Draw::new(1).range(5, 5), 5);
        assert_ne!(Draw::new(1).next_u64(), Draw::new(2).next_u64());
    }
}
