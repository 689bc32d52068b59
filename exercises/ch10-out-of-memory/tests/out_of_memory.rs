//! Graded tests for chapter 10: out of memory.

use ch10_given::{ACTIVATIONS, BUDGET, Fixes, GRADIENTS, MIB, SettingFix};
use ch10_out_of_memory::{
    Diagnosis, OomReport, budget_fraction, diagnose, fix_setting, parse_oom, parse_size,
    workload_reordered,
};
use ch10_predict::{CASES, Case, predict};
use gpumem::testing::Prediction;
use gpumem::{AllocatorConfig, Error};

/// A message torch 2.x printed (quoted in a public bug report): 20 MiB on a 15.51 GiB GPU.
const TORCH_MESSAGE: &str = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total \
    capacity of 15.51 GiB of which 149.62 MiB is free. Process 1839 has 322.23 MiB memory in use. \
    Including non-PyTorch memory, this process has 11.65 GiB memory in use. Of the allocated \
    memory 11.47 GiB is allocated by PyTorch, and 10.27 MiB is reserved by PyTorch but \
    unallocated. If reserved but unallocated memory is large try setting \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation \
    for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

/// Runs `case` with the official workload and measurement (the chapter's `given/` crate) and
/// your fixes.
fn measure(
    dev: &gpumem::Device,
    case: Case,
) -> gpumem::Result<(ch10_predict::Outcome, Option<Error>)> {
    let fixes = Fixes {
        fix_setting,
        budget_fraction,
        workload_reordered,
    };
    ch10_given::measure(dev, case, fixes)
}

/// `value` units of `unit` bytes, rounded as torch's two decimals are read back.
fn of(value: f64, unit: u64) -> u64 {
    (value * unit as f64).round() as u64
}

#[test]
fn budget_fraction_caps_reservations_at_the_budget() {
    let _dev = gpumem::testing::device();
    for total in [
        2u64 << 30,
        25_276_502_016, // the book's cpu device
        80 << 30,
        150_000_000_000,
        BUDGET + 2 * MIB,
        // Here naive `BUDGET / total` gives a cap one byte under the budget: (total × f) is
        // rounded down, and f itself was rounded.
        17_445_387_994,
        34_643_524_847,
    ] {
        let naive = BUDGET as f64 / total as f64;
        if matches!(total, 17_445_387_994 | 34_643_524_847) {
            assert!(
                ((total as f64 * naive) as u64) < BUDGET,
                "{total}: not a trap"
            );
        }
        let f = budget_fraction(BUDGET, total);
        assert!((0.0..=1.0).contains(&f), "{total}: fraction {f}");
        let cap = (total as f64 * f) as u64;
        assert!(
            (BUDGET..BUDGET + MIB).contains(&cap),
            "{total}: the cap is {cap} bytes, not within 1 MiB above {BUDGET}"
        );
    }
}

#[test]
fn the_budget_makes_the_workload_run_out_of_memory_with_plenty_free() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let (outcome, error) = measure(&dev, Case::AsWritten)?;
    assert!(outcome.out_of_memory, "{outcome:?}");
    match error {
        Some(Error::OutOfMemory {
            alloc_size,
            allocated,
            reserved_unallocated,
            allowed: Some(allowed),
            ..
        }) => {
            assert_eq!(
                alloc_size, GRADIENTS as u64,
                "the gradients could not be placed"
            );
            assert_eq!(allocated, ACTIVATIONS as u64);
            assert_eq!(
                reserved_unallocated,
                70 * MIB,
                "the rest of the staging segment"
            );
            assert!(
                (BUDGET..BUDGET + MIB).contains(&allowed),
                "allowed {allowed}"
            );
        }
        other => panic!("expected an out-of-memory error with a cap, got {other:?}"),
    }
    assert_eq!(dev.memory_reserved(), 0, "measure puts the device back");
    Ok(())
}

#[test]
fn parse_size_reads_torchs_units() {
    let _dev = gpumem::testing::device();
    assert_eq!(parse_size("0 bytes"), Some(0));
    assert_eq!(parse_size("1024 bytes"), Some(1024));
    assert_eq!(parse_size("1.50 KiB"), Some(1536));
    assert_eq!(parse_size("20.00 MiB"), Some(20 * MIB));
    assert_eq!(parse_size("149.62 MiB"), Some(of(149.62, MIB)));
    assert_eq!(parse_size("15.51 GiB"), Some(of(15.51, 1 << 30)));
    assert_eq!(parse_size("20 MB"), None, "torch prints MiB");
    assert_eq!(parse_size("lots of MiB"), None);
    assert_eq!(parse_size(""), None);
}

#[test]
fn parse_oom_reads_a_torch_message() {
    let _dev = gpumem::testing::device();
    assert_eq!(
        parse_oom(TORCH_MESSAGE),
        Some(OomReport {
            tried_to_allocate: 20 * MIB,
            total: of(15.51, 1 << 30),
            free: of(149.62, MIB),
            allowed: None,
            allocated: of(11.47, 1 << 30),
            reserved_unallocated: of(10.27, MIB),
        })
    );
}

#[test]
fn parse_oom_reads_the_cap_and_gpumems_own_message() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let (_, error) = measure(&dev, Case::AsWritten)?;
    let error = error.expect("the workload as written runs out of memory");
    let report = parse_oom(&error.to_string()).expect("gpumem's message parses");
    assert_eq!(report.tried_to_allocate, GRADIENTS as u64);
    assert_eq!(report.allocated, ACTIVATIONS as u64);
    assert_eq!(report.reserved_unallocated, 70 * MIB);
    let allowed = report.allowed.expect("the cap is in the message");
    assert!(
        (BUDGET..BUDGET + MIB).contains(&allowed),
        "allowed {allowed}"
    );
    Ok(())
}

#[test]
fn parse_oom_refuses_what_is_not_an_oom_message() {
    let _dev = gpumem::testing::device();
    assert_eq!(
        parse_oom("CUDA out of memory. Tried to allocate more than 1EB memory."),
        None
    );
    assert_eq!(
        parse_oom("CUDA error: an illegal memory access was encountered"),
        None
    );
    assert_eq!(parse_oom(""), None);
}

#[test]
fn diagnose_tells_fragmentation_from_a_cap_and_a_full_device() {
    let _dev = gpumem::testing::device();
    let report =
        |tried: u64, free: u64, allowed: Option<u64>, allocated: u64, cached: u64| OomReport {
            tried_to_allocate: tried * MIB,
            total: 1024 * MIB,
            free: free * MIB,
            allowed: allowed.map(|a| a * MIB),
            allocated: allocated * MIB,
            reserved_unallocated: cached * MIB,
        };
    // 900 MiB live, 60 MiB cached in pieces, 40 MiB free: 80 MiB would fit, not in one piece.
    assert_eq!(
        diagnose(&report(80, 40, None, 900, 60)),
        Diagnosis::Fragmentation
    );
    // The same with nothing cached: the device is full.
    assert_eq!(
        diagnose(&report(80, 40, None, 960, 0)),
        Diagnosis::DeviceFull
    );
    // A cap of 500 MiB, 490 MiB live: the device has 500 MiB free, the cap 10 MiB.
    assert_eq!(
        diagnose(&report(80, 500, Some(500), 490, 0)),
        Diagnosis::OverTheCap
    );
    // Under a cap, the cached bytes and the room left under it together hold the request.
    assert_eq!(
        diagnose(&report(80, 500, Some(500), 400, 50)),
        Diagnosis::Fragmentation
    );
    // Other processes hold the device: free is small, the cap is not the limit.
    assert_eq!(
        diagnose(&report(80, 10, Some(900), 100, 0)),
        Diagnosis::DeviceFull
    );
}

#[test]
fn the_workloads_own_error_is_fragmentation() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let (_, error) = measure(&dev, Case::AsWritten)?;
    let error = error.expect("the workload as written runs out of memory");
    let report = parse_oom(&error.to_string()).expect("gpumem's message parses");
    assert_eq!(diagnose(&report), Diagnosis::Fragmentation);
    Ok(())
}

#[test]
fn max_split_size_lets_the_workload_fit() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let config = AllocatorConfig::parse(fix_setting(SettingFix::MaxSplitSize))?;
    assert!(
        config.max_split_size <= 100 << 20,
        "the staging block must be oversize"
    );
    let (outcome, error) = measure(&dev, Case::MaxSplitSize)?;
    assert!(!outcome.out_of_memory, "{error:?}");
    Ok(())
}

#[test]
fn expandable_segments_let_the_workload_fit() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let config = AllocatorConfig::parse(fix_setting(SettingFix::ExpandableSegments))?;
    assert!(config.expandable_segments);
    let (outcome, error) = measure(&dev, Case::ExpandableSegments)?;
    assert!(!outcome.out_of_memory, "{error:?}");
    Ok(())
}

#[test]
fn garbage_collection_alone_does_not_save_this_workload() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let config = AllocatorConfig::parse(fix_setting(SettingFix::GarbageCollection))?;
    assert!(config.garbage_collection_threshold > 0.0);
    assert_eq!(
        config.max_split_size,
        usize::MAX,
        "garbage collection alone"
    );
    assert!(!config.expandable_segments, "garbage collection alone");
    let (outcome, _) = measure(&dev, Case::GarbageCollection)?;
    assert!(
        outcome.out_of_memory,
        "collection frees whole cached blocks only; the staging segment is split"
    );
    Ok(())
}

#[test]
fn reordering_fits_without_any_setting() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let (outcome, error) = measure(&dev, Case::Reordered)?;
    assert!(!outcome.out_of_memory, "{error:?}");
    // And what it holds at the end is what the workload holds.
    let held = workload_reordered(&dev)?;
    assert_eq!(held.activations.size_bytes(), ACTIVATIONS);
    assert_eq!(held.gradients.size_bytes(), GRADIENTS);
    Ok(())
}

#[test]
fn reordering_keeps_the_staging_buffer_and_gives_nothing_back() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let held = workload_reordered(&dev)?;
    let stats = dev.memory_stats();
    assert_eq!(
        stats.get("allocation.all.allocated"),
        Some(3),
        "three buffers"
    );
    assert_eq!(
        dev.max_memory_allocated(),
        (ACTIVATIONS + 100 * (1 << 20)) as u64,
        "the staging buffer lives beside the activations"
    );
    assert_eq!(
        stats.get("num_device_free"),
        Some(0),
        "no empty_cache: the order alone fixes it"
    );
    drop(held);
    Ok(())
}

/// Checks the prediction for `case` against a run.
fn check_prediction(case: Case) -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    // The prediction is made before anything runs.
    let predicted = predict(case);
    let (measured, _) = measure(&dev, case)?;
    Prediction::new(format!("your prediction for {case:?}"))
        .count(
            "out_of_memory",
            predicted.out_of_memory,
            measured.out_of_memory,
        )
        .count(
            "peak_reserved_mib",
            predicted.peak_reserved_mib,
            measured.peak_reserved_mib,
        )
        .count("retries", predicted.retries, measured.retries)
        .check();
    Ok(())
}

#[test]
fn prediction_as_written_matches() -> anyhow::Result<()> {
    check_prediction(Case::AsWritten)
}

#[test]
fn prediction_with_max_split_size_matches() -> anyhow::Result<()> {
    check_prediction(Case::MaxSplitSize)
}

#[test]
fn prediction_with_expandable_segments_matches() -> anyhow::Result<()> {
    check_prediction(Case::ExpandableSegments)
}

#[test]
fn prediction_with_garbage_collection_matches() -> anyhow::Result<()> {
    check_prediction(Case::GarbageCollection)
}

#[test]
fn prediction_reordered_matches() -> anyhow::Result<()> {
    check_prediction(Case::Reordered)
}

#[test]
fn every_case_is_predicted() {
    let _dev = gpumem::testing::device();
    assert_eq!(CASES.len(), 5);
    for case in CASES {
        let p = predict(case);
        assert!(
            p.peak_reserved_mib <= BUDGET / MIB,
            "{case:?}: over the budget: {p:?}"
        );
    }
}
