//! Graded tests for chapter 14: the first minute after an out-of-memory error.

use ch14_after_out_of_memory::{Cost, Lever, MIB, Reading, Steps, fit_batch, triage};
// The training step and the measurement come from the given crate, never from your `src/`.
use ch14_given::{measure_refill, train_step};
use ch14_predict::predict_refill;
use gpumem::format::format_size;
use gpumem::testing::{Draw, Prediction};

const GIB: u64 = 1 << 30;

/// `value` units of `unit` bytes, rounded as torch's two decimals are read back.
fn of(value: f64, unit: u64) -> u64 {
    (value * unit as f64).round() as u64
}

/// A reading with no cap and no NVML sentences.
fn reading(tried: u64, total: u64, free: u64, allocated: u64, cached: u64) -> Reading {
    Reading {
        tried_to_allocate: tried,
        total,
        free,
        allowed: None,
        this_process: None,
        other_processes: 0,
        allocated,
        reserved_unallocated: cached,
    }
}

/// Messages torch 2.x printed, found in public logs and reports, with their numbers.
fn public_messages() -> Vec<(&'static str, Reading, Lever)> {
    let mine = |r: Reading, this: u64| Reading {
        this_process: Some(this),
        ..r
    };
    vec![
        (
            "CUDA out of memory. Tried to allocate 320.00 MiB. GPU 0 has a total capacity of \
             31.37 GiB of which 80.69 MiB is free. Including non-PyTorch memory, this process has \
             31.28 GiB memory in use. Of the allocated memory 30.76 GiB is allocated by PyTorch, \
             and 33.46 MiB is reserved by PyTorch but unallocated.",
            mine(
                reading(
                    320 * MIB,
                    of(31.37, GIB),
                    of(80.69, MIB),
                    of(30.76, GIB),
                    of(33.46, MIB),
                ),
                of(31.28, GIB),
            ),
            Lever::HoldLess,
        ),
        (
            "CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of \
             39.38 GiB of which 27.38 MiB is free. Including non-PyTorch memory, this process has \
             39.35 GiB memory in use. Of the allocated memory 36.43 GiB is allocated by PyTorch, \
             and 2.41 GiB is reserved by PyTorch but unallocated.",
            mine(
                reading(
                    48 * MIB,
                    of(39.38, GIB),
                    of(27.38, MIB),
                    of(36.43, GIB),
                    of(2.41, GIB),
                ),
                of(39.35, GIB),
            ),
            Lever::Fragmentation,
        ),
        (
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of \
             11.91 GiB of which 406.38 MiB is free. Including non-PyTorch memory, this process has \
             11.51 GiB memory in use. Of the allocated memory 11.18 GiB is allocated by PyTorch, \
             and 219.44 MiB is reserved by PyTorch but unallocated.",
            mine(
                reading(
                    2 * GIB,
                    of(11.91, GIB),
                    of(406.38, MIB),
                    of(11.18, GIB),
                    of(219.44, MIB),
                ),
                of(11.51, GIB),
            ),
            Lever::HoldLess,
        ),
    ]
}

#[test]
fn triage_reads_public_messages() {
    let _dev = gpumem::testing::device();
    for (text, reading, lever) in public_messages() {
        // The numbers are the message's: torch 2.15's wording, made from them, says the same.
        assert!(
            reading.torch_message().starts_with(text),
            "{text}\n{}",
            reading.torch_message()
        );
        assert_eq!(triage(&reading), lever, "{text}");
    }
}

#[test]
fn triage_follows_the_order_of_the_rules_at_the_edges() {
    let _dev = gpumem::testing::device();
    let total = 16 * GIB;
    // Cached and free together hold exactly the request: the memory is there, in pieces.
    let exact = reading(100 * MIB, total, 40 * MIB, 15 * GIB, 60 * MIB);
    assert_eq!(triage(&exact), Lever::Fragmentation, "{exact:?}");
    // One byte short of it, nobody else on the device: hold less.
    let short = Reading {
        tried_to_allocate: 100 * MIB + 1,
        ..exact
    };
    assert_eq!(triage(&short), Lever::HoldLess, "{short:?}");
    // The same with 2 GiB held by another process: that process is the lever.
    let crowded = Reading {
        other_processes: 2 * GIB,
        ..short
    };
    assert_eq!(triage(&crowded), Lever::AnotherProcess, "{crowded:?}");
    assert!(
        crowded
            .torch_message()
            .contains("is free. Process 4242 has 2.00 GiB memory in use. Of the allocated"),
        "torch names the other process: {}",
        crowded.torch_message()
    );
    // Under a cap below what the process already reserved there is no room left under it:
    // plenty free on the device makes it the cap, whatever the other processes hold.
    let capped = Reading {
        allowed: Some(GIB),
        free: 4 * GIB,
        allocated: GIB + 500 * MIB,
        reserved_unallocated: 20 * MIB,
        other_processes: 8 * GIB,
        ..short
    };
    assert_eq!(triage(&capped), Lever::OverTheCap, "{capped:?}");
    // With a cap, the room is what is left under it, not the device's free memory: 30 MiB
    // cached and 70 MiB under the cap hold 100 MiB.
    let under_cap = Reading {
        tried_to_allocate: 100 * MIB,
        allowed: Some(GIB),
        free: 4 * GIB,
        allocated: GIB - 100 * MIB,
        reserved_unallocated: 30 * MIB,
        other_processes: 0,
        ..exact
    };
    assert_eq!(triage(&under_cap), Lever::Fragmentation, "{under_cap:?}");
    // A cap, but the device itself is full: not the cap.
    let full = Reading {
        free: 10 * MIB,
        allowed: Some(15 * GIB),
        ..short
    };
    assert_eq!(triage(&full), Lever::HoldLess, "{full:?}");
}

#[test]
fn triage_follows_the_rules_at_drawn_sizes() {
    gpumem::testing::seeded(|| {
        let _dev = gpumem::testing::device();
        let mut draw = Draw::from_env();
        for _ in 0..20 {
            let total = GIB * draw.range(16, 80);
            let tried = MIB * draw.range(2, 2000);
            let cached = MIB * draw.range(0, tried / MIB / 2);
            let allocated = total / 2 + MIB * draw.range(0, 1000);
            let base = reading(tried, total, 0, allocated, cached);
            // Cached and free together hold it.
            let fragmented = Reading {
                free: tried - cached + MIB * draw.range(0, 100),
                ..base
            };
            // The device has room, the cap does not (less than the request is left under it).
            let left = MIB * draw.range(0, (tried - cached) / MIB - 1);
            let capped = Reading {
                free: tried + GIB * draw.range(0, 4),
                allowed: Some(allocated + cached + left),
                other_processes: GIB * draw.range(0, 4),
                ..base
            };
            // Not enough free nor cached; the other processes hold the rest.
            let free = MIB * draw.range(0, (tried - cached) / MIB - 1);
            let crowded = Reading {
                free,
                other_processes: tried - free + MIB * draw.range(0, 4000),
                ..base
            };
            // Nobody else holds enough.
            let full = Reading {
                free,
                other_processes: MIB * draw.range(0, (tried - free) / MIB - 1),
                ..base
            };
            for (r, lever) in [
                (fragmented, Lever::Fragmentation),
                (capped, Lever::OverTheCap),
                (crowded, Lever::AnotherProcess),
                (full, Lever::HoldLess),
            ] {
                assert_eq!(triage(&r), lever, "{}", r.torch_message());
            }
        }
    })
}

/// The sizes of a `fit_batch` test: a batch of 4, 8 or 16 samples of 6 to 12 MiB (every buffer
/// of the whole batch and of its half 10 MiB or more: a segment of its own).
fn drawn_batch(draw: &mut Draw) -> (usize, usize) {
    (
        draw.pick(&[4, 8, 16]),
        (draw.pick(&[6u64, 8, 10, 12]) * MIB) as usize,
    )
}

/// Caps the device so that the allocator may reserve `bytes` (and half a MiB more).
fn cap(dev: &gpumem::Device, bytes: u64) {
    let (_, total) = dev.mem_get_info().expect("the device's memory");
    dev.set_per_process_memory_fraction((bytes + MIB / 2) as f64 / total as f64)
        .expect("a fraction");
}

#[test]
fn fit_batch_keeps_a_batch_that_fits() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let (batch, sample) = drawn_batch(&mut Draw::from_env());
        let fitted = fit_batch(&dev, batch, sample)?;
        assert_eq!(fitted.batch, batch, "the whole batch fits");
        assert!(fitted.messages.is_empty(), "{:?}", fitted.messages);
        assert_eq!(
            dev.memory_allocated(),
            (3 * batch * sample) as u64,
            "the step's activations and workspace"
        );
        assert_eq!(dev.memory_stats().get("num_ooms"), Some(0));
        Ok(())
    })
}

#[test]
fn fit_batch_releases_the_failed_step_before_trying_again() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let (batch, sample) = drawn_batch(&mut Draw::from_env());
        let whole = (batch * sample) as u64;
        // The whole batch needs 3 × its activations; half of it fits in 2 × only when the failed
        // step's activations went back to the cache first.
        cap(&dev, 2 * whole);
        let fitted = fit_batch(&dev, batch, sample)?;
        assert_eq!(
            fitted.batch,
            batch / 2,
            "half the batch fits under the cap when the failed step holds nothing any more"
        );
        assert_eq!(
            dev.memory_allocated(),
            3 * whole / 2,
            "what the fitted step holds, and nothing of the failed one"
        );
        assert_eq!(dev.memory_stats().get("num_ooms"), Some(1), "one failure");
        Ok(())
    })
}

#[test]
fn fit_batch_keeps_each_message_and_no_failure() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let (batch, sample) = drawn_batch(&mut Draw::from_env());
        let whole = (batch * sample) as u64;
        cap(&dev, 2 * whole);
        let fitted = fit_batch(&dev, batch, sample)?;
        assert_eq!(fitted.messages.len(), 1, "{:?}", fitted.messages);
        let wanted = format!("Tried to allocate {}.", format_size(2 * whole));
        assert!(
            fitted.messages[0].contains(&wanted),
            "the message of the failed workspace ({wanted}): {}",
            fitted.messages[0]
        );
        drop(fitted);
        assert_eq!(
            dev.memory_allocated(),
            0,
            "with the fitted step dropped nothing is held: no failure was kept or forgotten"
        );
        Ok(())
    })
}

#[test]
fn fit_batch_gives_up_with_the_error_when_one_sample_does_not_fit() {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let (batch, sample) = drawn_batch(&mut Draw::from_env());
        // Not even one sample's activations and workspace.
        cap(&dev, 2 * sample as u64);
        let error = match fit_batch(&dev, batch, sample) {
            Ok(fitted) => panic!("a batch of {} fitted under the cap", fitted.batch),
            Err(error) => error,
        };
        assert!(error.is_out_of_memory(), "{error}");
        assert_eq!(dev.memory_allocated(), 0, "nothing held after giving up");
        assert_eq!(
            dev.memory_stats().get("num_ooms"),
            Some(batch.trailing_zeros() as u64 + 1),
            "one try per halving, down to a batch of 1"
        );
    })
}

#[test]
fn a_failed_step_holds_its_activations_until_dropped() {
    let dev = gpumem::testing::device();
    // What the exercise builds on: train_step's failure keeps what it allocated.
    cap(&dev, 64 * MIB);
    let failure = match train_step(&dev, 4, (10 * MIB) as usize) {
        Ok(_) => panic!("120 MiB fitted under 64 MiB"),
        Err(failure) => failure,
    };
    assert_eq!(dev.memory_allocated(), 40 * MIB);
    drop(failure);
    assert_eq!(dev.memory_allocated(), 0);
    // And so yours must let it go.
    let fitted = fit_batch(&dev, 4, (10 * MIB) as usize).expect("a batch fits");
    assert_eq!(
        fitted.batch, 1,
        "40 + 80 MiB does not fit, 20 + 40 MiB does not, 10 + 20 does"
    );
}

/// Checks the prediction for `steps` against a run.
fn check_prediction(dev: &gpumem::Device, steps: Steps) -> anyhow::Result<()> {
    // The prediction is made before anything runs.
    let predicted: Cost = predict_refill(steps);
    let measured = measure_refill(dev, steps)?;
    Prediction::new(format!("your prediction for {steps:?}"))
        .count(
            "device_allocs",
            predicted.device_allocs,
            measured.device_allocs,
        )
        .rule(
            "segments per step (blocks rounded to 512 B; 2 MiB segments up to 1 MiB, 20 MiB \
             below 10 MiB, else one rounded to 2 MiB), reserved again only after empty_cache",
        )
        .count(
            "device_frees",
            predicted.device_frees,
            measured.device_frees,
        )
        .rule("segments go back to the device only in empty_cache")
        .bytes(
            "peak_reserved",
            predicted.peak_reserved,
            measured.peak_reserved,
        )
        .rule("the segments of one step, whole")
        .check();
    Ok(())
}

#[test]
fn prediction_at_the_pages_sizes_matches() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    for (buffers, size) in [(8, 3 * MIB), (100, 100_000), (4, 25 * MIB + 1000)] {
        for empty_cache in [false, true] {
            check_prediction(
                &dev,
                Steps {
                    buffers,
                    size,
                    steps: 3,
                    empty_cache,
                },
            )?;
        }
    }
    Ok(())
}

#[test]
fn prediction_at_the_pools_edges_matches() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    // Exactly 1 MiB (still the small pool); 699,050 B (three fit in 2 MiB, but not once rounded
    // to 512 B); exactly 10 MiB (a segment of its own); 10 MiB less 512 B (a 20 MiB segment).
    for (buffers, size) in [(3, MIB), (6, 699_050), (4, 10 * MIB), (4, 10 * MIB - 512)] {
        for empty_cache in [false, true] {
            check_prediction(
                &dev,
                Steps {
                    buffers,
                    size,
                    steps: 2,
                    empty_cache,
                },
            )?;
        }
    }
    Ok(())
}

#[test]
fn prediction_at_drawn_sizes_matches() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let mut draw = Draw::from_env();
        // One size of each pool, drawn on this run.
        for (low, high) in [(1, MIB), (MIB + 1, 10 * MIB - 512), (10 * MIB, 40 * MIB)] {
            let steps = Steps {
                buffers: draw.range(1, 20),
                size: draw.range(low, high),
                steps: draw.range(1, 5),
                empty_cache: draw.pick(&[false, true]),
            };
            check_prediction(&dev, steps)?;
        }
        Ok(())
    })
}
