//! Graded tests for chapter 1. They pass on `cpu` and on `cuda` (`GPUMEM_DEVICE=cuda`).

use ch01_availability::{choose_device, cuda_status, describe};
use ch01_predict::predict_first_allocations;
use gpumem::testing::{CudaStatus, Draw, Prediction, with_cuda_status, with_device_properties};
use gpumem::{Device, DeviceKind, DeviceProperties, Error, format_bytes};

/// The allocator counters that choosing or describing a device must leave untouched.
fn footprint(dev: &Device) -> (u64, u64, u64, u64) {
    let stats = dev.memory_stats();
    let get = |key: &str| stats.get(key).unwrap_or(u64::MAX);
    (
        get("allocation.all.allocated"),
        get("segment.all.allocated"),
        get("num_device_alloc"),
        dev.transfer_stats().total_copies(),
    )
}

/// A reason the driver could give for CUDA being unavailable, drawn on this run: a line copied
/// from the walkthrough or a failure matches none of them.
fn drawn_reason(draw: &mut Draw) -> String {
    let reasons = [
        "the driver found no CUDA device",
        "the CUDA driver failed to initialise: CUDA_ERROR_UNKNOWN",
        "no CUDA driver library (libcuda.so) could be loaded",
        "the NVIDIA driver supports CUDA 11.8, older than the CUDA 13.0 this build is for",
    ];
    let reason = reasons[draw.range(0, reasons.len() as u64 - 1) as usize];
    format!("{reason} (case {})", draw.range(1, 1_000_000))
}

/// Every device this machine can open: `cpu`, and `cuda:0` when there is a GPU.
fn every_device() -> Vec<Device> {
    let mut devices = vec![Device::cpu()];
    if let Ok(gpu) = Device::cuda(0) {
        devices.push(gpu);
    }
    devices
}

// --- cuda_status -----------------------------------------------------------------------------

#[test]
fn cuda_status_reports_count_or_reason() {
    let _dev = gpumem::testing::device();
    let expected = match gpumem::cuda::unavailable_reason() {
        None => format!("CUDA available: {} device(s)", gpumem::cuda::device_count()),
        Some(reason) => format!("CUDA not available: {reason}"),
    };
    assert_eq!(cuda_status(), expected, "on this machine");
    // Then under statuses drawn on this run, fed to gpumem::cuda: a GPU machine's branch runs
    // here too, and a line copied from the walkthrough or a failure passes no more than one case.
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let devices = draw.range(1, 16) as usize;
        with_cuda_status(CudaStatus::Available { devices }, || {
            assert_eq!(
                cuda_status(),
                format!("CUDA available: {devices} device(s)"),
                "when the driver reports {devices} device(s)"
            );
        });
        let reason = drawn_reason(&mut draw);
        with_cuda_status(
            CudaStatus::Unavailable {
                reason: reason.clone(),
            },
            || {
                assert_eq!(
                    cuda_status(),
                    format!("CUDA not available: {reason}"),
                    "when the driver says {reason:?}"
                );
            },
        );
    })
}

// --- choose_device ---------------------------------------------------------------------------

#[test]
fn choose_device_without_override_prefers_cuda_then_cpu() {
    let _dev = gpumem::testing::device();
    let expected = if gpumem::cuda::is_available() {
        DeviceKind::Cuda(0)
    } else {
        DeviceKind::Cpu
    };
    for spelling in [None, Some("auto"), Some("")] {
        let chosen = choose_device(spelling).unwrap_or_else(|e| panic!("{spelling:?}: {e}"));
        assert_eq!(chosen.kind(), expected, "override {spelling:?}");
    }
}

#[test]
fn choose_device_honours_cpu_override_even_with_a_gpu() {
    let _dev = gpumem::testing::device();
    let chosen = choose_device(Some("cpu")).expect("cpu always opens");
    assert_eq!(chosen.kind(), DeviceKind::Cpu);
    assert_eq!(chosen, Device::cpu());
}

#[test]
fn choose_device_ignores_case_and_surrounding_spaces() {
    let _dev = gpumem::testing::device();
    for spelling in [" CPU ", "Cpu", "\tcpu\n"] {
        let chosen = choose_device(Some(spelling)).unwrap_or_else(|e| panic!("{spelling:?}: {e}"));
        assert_eq!(chosen.kind(), DeviceKind::Cpu, "override {spelling:?}");
    }
    let auto = choose_device(Some(" AUTO ")).expect("auto always opens a device");
    assert_eq!(auto.kind(), choose_device(None).expect("auto").kind());
    if gpumem::cuda::is_available() {
        let gpu = choose_device(Some(" CUDA:0 ")).expect("cuda:0 exists when CUDA is available");
        assert_eq!(gpu.kind(), DeviceKind::Cuda(0));
    } else {
        let err = choose_device(Some(" CUDA:0 ")).expect_err("there is no GPU here");
        assert!(matches!(err, Error::CudaUnavailable { .. }), "got {err:?}");
    }
}

#[test]
fn choose_device_never_falls_back_when_cuda_is_asked_for() {
    let _dev = gpumem::testing::device();
    let count = gpumem::cuda::device_count();
    let one_past_the_last = format!("cuda:{count}");
    if gpumem::cuda::is_available() {
        let gpu = choose_device(Some("cuda")).expect("cuda means cuda:0");
        assert_eq!(gpu.kind(), DeviceKind::Cuda(0));
        let err = choose_device(Some(&one_past_the_last)).expect_err("no such GPU");
        assert!(
            matches!(err, Error::NoSuchDevice { ordinal, count: c } if ordinal == count && c == count),
            "got {err:?}"
        );
    } else {
        for spelling in ["cuda", "cuda:0", one_past_the_last.as_str()] {
            let err = choose_device(Some(spelling)).expect_err("a GPU was asked for; none exists");
            assert!(
                matches!(err, Error::CudaUnavailable { .. }),
                "{spelling:?} gave {err:?}, not CudaUnavailable"
            );
        }
    }
    // The other machine's branch too, under statuses drawn on this run: the error is the one
    // Device::cuda gives, with the driver's reason or the device count.
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let reason = drawn_reason(&mut draw);
        with_cuda_status(
            CudaStatus::Unavailable {
                reason: reason.clone(),
            },
            || {
                for spelling in ["cuda", "cuda:0", " Cuda:1 "] {
                    match choose_device(Some(spelling)) {
                        Err(Error::CudaUnavailable { reason: given }) => {
                            assert_eq!(given, reason, "the reason Device::cuda gives")
                        }
                        other => panic!(
                            "{spelling:?} with the driver saying {reason:?} gave {other:?}, \
                             not CudaUnavailable"
                        ),
                    }
                }
                let auto = choose_device(None).expect("auto falls back to cpu without CUDA");
                assert_eq!(auto.kind(), DeviceKind::Cpu, "auto without CUDA");
            },
        );
        let devices = draw.range(1, 8) as usize;
        with_cuda_status(CudaStatus::Available { devices }, || {
            let past = format!("cuda:{devices}");
            match choose_device(Some(&past)) {
                Err(Error::NoSuchDevice { ordinal, count }) => {
                    assert_eq!((ordinal, count), (devices, devices), "{past:?}")
                }
                other => {
                    panic!("{past:?} with {devices} device(s) gave {other:?}, not NoSuchDevice")
                }
            }
        });
    })
}

#[test]
fn choose_device_rejects_garbage() {
    let _dev = gpumem::testing::device();
    for spelling in [
        "gpu", "cuda0", "cuda:", "cuda:x", "cuda:-1", "cpu:0", "mps", " GPU ", "Cuda:X ", "\tMPS",
    ] {
        match choose_device(Some(spelling)) {
            Err(Error::BadDeviceName { value }) => assert_eq!(value, spelling),
            other => panic!("{spelling:?} gave {other:?}, not BadDeviceName"),
        }
    }
}

#[test]
fn choose_device_agrees_with_by_name() {
    let _dev = gpumem::testing::device();
    for spelling in [
        "auto", "cpu", "cuda", "cuda:0", "cuda:1", "cuda:7", " Cuda ", "tpu",
    ] {
        let calls_before = gpumem::testing::by_name_calls();
        let ours = choose_device(Some(spelling)).map(|d| d.kind());
        assert_eq!(
            gpumem::testing::by_name_calls(),
            calls_before,
            "choose_device({spelling:?}) called Device::by_name (directly or through \
             Device::from_env): build the choice from gpumem::cuda::is_available, Device::cpu \
             and Device::cuda, as its doc comment says"
        );
        let theirs = Device::by_name(spelling).map(|d| d.kind());
        assert_eq!(
            format!("{ours:?}"),
            format!("{theirs:?}"),
            "choose_device and Device::by_name disagree on {spelling:?}"
        );
    }
}

#[test]
fn choose_device_allocates_nothing_on_any_device() {
    let _dev = gpumem::testing::device();
    let devices = every_device();
    let before: Vec<_> = devices.iter().map(footprint).collect();
    for spelling in [
        None,
        Some("cpu"),
        Some("cuda"),
        Some("cuda:0"),
        Some("nonsense"),
    ] {
        let _ = choose_device(spelling);
    }
    let after: Vec<_> = devices.iter().map(footprint).collect();
    assert_eq!(
        before, after,
        "choosing a device must not allocate or copy anything"
    );
}

// --- describe --------------------------------------------------------------------------------

#[test]
fn describe_cpu_uses_the_fixed_format() {
    let _dev = gpumem::testing::device();
    let cpu = Device::cpu();
    let p = cpu.properties().expect("cpu properties");
    let expected = format!(
        "cpu: {}, {}, {} cores",
        p.name,
        format_bytes(p.total_memory),
        p.multi_processor_count
    );
    assert_eq!(describe(&cpu).expect("describe cpu"), expected);
    // Then properties drawn on this run, fed to Device::properties: a line copied from a
    // failure matches none of them.
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        let fed = DeviceProperties {
            name: format!("Test CPU model {}", draw.range(1, 10_000)),
            total_memory: draw.range(1 << 20, 1 << 40),
            multi_processor_count: draw.range(1, 256) as u32,
            compute_capability: (0, 0),
        };
        let expected = format!(
            "cpu: {}, {}, {} cores",
            fed.name,
            format_bytes(fed.total_memory),
            fed.multi_processor_count
        );
        let got = with_device_properties(fed.clone(), || describe(&cpu).expect("describe cpu"));
        assert_eq!(got, expected, "for a cpu whose properties are {fed:?}");
    })
}

#[test]
fn describe_test_device_uses_the_fixed_format() {
    let dev = gpumem::testing::device();
    let p = dev.properties().expect("properties");
    let expected = match dev.kind() {
        DeviceKind::Cuda(n) => format!(
            "cuda:{n}: {}, {}, {} SMs, compute capability {}.{}",
            p.name,
            format_bytes(p.total_memory),
            p.multi_processor_count,
            p.compute_capability.0,
            p.compute_capability.1
        ),
        DeviceKind::Cpu | DeviceKind::CpuN(_) => format!(
            "{}: {}, {}, {} cores",
            *dev,
            p.name,
            format_bytes(p.total_memory),
            p.multi_processor_count
        ),
    };
    assert_eq!(describe(&dev).expect("describe"), expected);
}

#[test]
fn describe_allocates_and_copies_nothing() {
    let dev = gpumem::testing::device();
    let devices = every_device();
    let before: Vec<_> = devices.iter().map(footprint).collect();
    for d in &devices {
        describe(d).expect("describe");
    }
    assert_eq!(devices.iter().map(footprint).collect::<Vec<_>>(), before);
    assert_eq!(dev.memory_reserved(), 0, "describe reserved device memory");
}

// --- predict_first_allocations ---------------------------------------------------------------

/// The page's sizes (1 and 200 `f32`s), then two pairs of small sizes (at most 1 MiB each) drawn
/// on this run: a prediction copied from the page passes the first case at most.
fn first_allocation_cases() -> Vec<(u64, u64)> {
    let mut draw = Draw::from_env();
    let mut cases = vec![(1, 200)];
    for _ in 0..2 {
        cases.push((draw.range(1, 1 << 18), draw.range(1, 1 << 18)));
    }
    cases
}

#[test]
fn first_tiny_allocation_prediction_matches_allocated_and_reserved() {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        for (first_len, second_len) in first_allocation_cases() {
            gpumem::testing::reset(&dev);
            let predicted = predict_first_allocations(first_len, second_len);
            let a = dev.alloc::<f32>(first_len as usize).expect("alloc");
            Prediction::new(format!(
                "your prediction after alloc::<f32>({first_len}) on a fresh device"
            ))
            .bytes(
                "allocated_after_first",
                predicted.allocated_after_first,
                dev.memory_allocated(),
            )
            .rule("a block is the request rounded up to a multiple of 512 bytes, at least 512")
            .bytes(
                "reserved_after_first",
                predicted.reserved_after_first,
                dev.memory_reserved(),
            )
            .rule("a request of at most 1 MiB reserves a whole small-pool segment")
            .check();
            drop(a);
        }
    })
}

#[test]
fn second_tiny_allocation_prediction_matches_the_shared_segment() {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        for (first_len, second_len) in first_allocation_cases() {
            gpumem::testing::reset(&dev);
            let predicted = predict_first_allocations(first_len, second_len);
            let a = dev.alloc::<f32>(first_len as usize).expect("alloc");
            let b = dev.alloc::<f32>(second_len as usize).expect("alloc");
            let stats = dev.memory_stats();
            Prediction::new(format!(
                "your prediction after alloc::<f32>({first_len}), then alloc::<f32>({second_len})"
            ))
            .bytes(
                "allocated_after_second",
                predicted.allocated_after_second,
                dev.memory_allocated(),
            )
            .rule("memory_allocated adds up the blocks, each rounded to 512 bytes")
            .bytes(
                "reserved_after_second",
                predicted.reserved_after_second,
                dev.memory_reserved(),
            )
            .rule(
                "a small request is cut from a segment that has room before a new one is reserved",
            )
            .count(
                "segments_after_second",
                Some(predicted.segments_after_second),
                stats.get("segment.all.current"),
            )
            .rule("a small-pool segment is 2 MiB")
            .check();
            assert_eq!(stats.get("allocation.all.current"), Some(2));
            drop((a, b));
        }
    })
}

#[test]
fn first_allocation_prediction_matches_the_drivers_free_memory() {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        for (first_len, second_len) in first_allocation_cases() {
            gpumem::testing::reset(&dev);
            let predicted = predict_first_allocations(first_len, second_len);
            let (free_before, total) = dev.mem_get_info().expect("mem_get_info");
            let a = dev.alloc::<f32>(first_len as usize).expect("alloc");
            let (free_after, total_after) = dev.mem_get_info().expect("mem_get_info");
            assert_eq!(total, total_after, "total memory never changes");
            // The device gives memory out in whole segments: what it loses is what the allocator
            // reserved.
            Prediction::new(format!(
                "your prediction of what the driver sees after alloc::<f32>({first_len})"
            ))
            .bytes(
                "free_drop_after_first",
                predicted.free_drop_after_first,
                dev.memory_reserved(),
            )
            .rule("the driver sees reserved segments, not allocated blocks")
            .check();
            if !dev.is_cuda() {
                // On a GPU other processes change free memory at any time, so only cpu is exact.
                Prediction::new(format!(
                    "your prediction of the fall in mem_get_info's free memory on cpu after \
                 alloc::<f32>({first_len})"
                ))
                .bytes(
                    "free_drop_after_first",
                    predicted.free_drop_after_first,
                    free_before - free_after,
                )
                .rule("the driver sees reserved segments, not allocated blocks")
                .check();
            }
            drop(a);
        }
    })
}
