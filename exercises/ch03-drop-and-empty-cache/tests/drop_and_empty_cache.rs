//! Graded tests for chapter 3: `drop` versus `empty_cache`.

use ch03_drop_and_empty_cache::{MemoryView, unload_model};
// The tiny model and the measurement come from the given crate, never from your `src/`.
use ch03_given::{TinyLinear, measure};
use ch03_predict::{MIB, Outcome, Scenario, predict};
use gpumem::testing::{Draw, Prediction};

// ---- unload_model ----

#[test]
fn unload_model_returns_every_reserved_byte() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let model = TinyLinear::new(&dev, 10, 10)?;
    assert_eq!(
        (dev.memory_allocated(), dev.memory_reserved()),
        (1024, 2 * MIB)
    );
    unload_model(&dev, model);
    assert_eq!(
        dev.memory_allocated(),
        0,
        "the model's blocks are still live"
    );
    assert_eq!(
        dev.memory_reserved(),
        0,
        "the 2 MiB segment is still cached: was empty_cache called while the model was alive?"
    );
    let stats = dev.memory_stats();
    assert_eq!(
        stats.get("num_device_free"),
        Some(1),
        "one segment goes back to the device"
    );
    Ok(())
}

#[test]
fn unload_model_gives_memory_back_to_the_driver() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let (free_before, _) = dev.mem_get_info()?;
    let model = TinyLinear::new(&dev, 10, 10)?;
    let (free_loaded, _) = dev.mem_get_info()?;
    unload_model(&dev, model);
    let (free_after, _) = dev.mem_get_info()?;
    assert_eq!(
        dev.memory_reserved(),
        0,
        "the driver gets back only what empty_cache releases"
    );
    if !dev.is_cuda() {
        // On cpu nothing else shares the device, so the driver's view moves by whole segments.
        assert_eq!(free_before - free_loaded, 2 * MIB);
        assert_eq!(
            free_after, free_before,
            "the driver should see the segment come back"
        );
    }
    Ok(())
}

#[test]
fn unload_model_cannot_release_a_segment_another_buffer_pins() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let loss = dev.alloc::<f32>(1)?; // allocated first: the model's blocks come from its segment
    let model = TinyLinear::new(&dev, 10, 10)?;
    assert_eq!(dev.memory_reserved(), 2 * MIB);
    unload_model(&dev, model);
    assert_eq!(
        dev.memory_allocated(),
        512,
        "only the 4-byte loss (a 512 B block) is live"
    );
    assert_eq!(
        dev.memory_reserved(),
        2 * MIB,
        "its live block pins the whole segment"
    );
    drop(loss);
    dev.empty_cache();
    assert_eq!(dev.memory_reserved(), 0);
    Ok(())
}

// ---- MemoryView ----

#[test]
fn memory_view_reads_the_allocator_and_the_driver() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let model = TinyLinear::new(&dev, 10, 10)?;
    let view = MemoryView::capture(&dev)?;
    let (free, total) = dev.mem_get_info()?;
    assert_eq!(
        view.allocated, 1024,
        "two blocks of 512 B for 440 B of parameters"
    );
    assert_eq!(view.reserved, 2 * MIB, "one small-pool segment");
    assert_eq!(view.driver_total, total);
    assert!(view.driver_used >= view.reserved, "{view:?}");
    if !dev.is_cuda() {
        assert_eq!(view.driver_used, total - free);
        assert_eq!(
            view.driver_used,
            2 * MIB,
            "on cpu the driver sees only the segment"
        );
    }
    drop(model);
    Ok(())
}

#[test]
fn memory_view_cached_is_reserved_minus_allocated() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let model = TinyLinear::new(&dev, 10, 10)?;
    assert_eq!(MemoryView::capture(&dev)?.cached(), 2 * MIB - 1024);
    drop(model);
    let view = MemoryView::capture(&dev)?;
    assert_eq!((view.allocated, view.reserved), (0, 2 * MIB));
    assert_eq!(
        view.cached(),
        2 * MIB,
        "after drop, the whole segment is cache"
    );
    dev.empty_cache();
    assert_eq!(MemoryView::capture(&dev)?.cached(), 0);
    Ok(())
}

#[test]
fn memory_view_outside_allocator_is_zero_on_cpu_and_the_context_on_cuda() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let buf = dev.alloc::<f32>(100)?;
    let view = MemoryView::capture(&dev)?;
    assert_eq!(view.reserved, 2 * MIB);
    if dev.is_cuda() {
        // The CUDA context (and any other process) is used memory the allocator never reserved.
        assert!(view.outside_allocator() > 0, "{view:?}");
        assert_eq!(view.outside_allocator(), view.driver_used - view.reserved);
    } else {
        assert_eq!(view.outside_allocator(), 0, "{view:?}");
    }
    drop(buf);
    Ok(())
}

// ---- predict, then measure ----

/// Fails unless your prediction for `scenario` is what the allocator measured there, naming each
/// wrong number and the rule it tests.
fn compare(scenario: Scenario, predicted: &Outcome, measured: &Outcome) {
    Prediction::new(format!("your prediction for {scenario:?}"))
        .bytes("allocated", predicted.allocated, measured.allocated)
        .rule("each live block is its request rounded up to a multiple of 512 bytes, at least 512")
        .bytes("reserved", predicted.reserved, measured.reserved)
        .rule(
            "blocks up to 1 MiB are cut from 2 MiB segments, blocks over 1 MiB and under 10 MiB \
             from 20 MiB segments, shared while a free part fits; drop releases no segment",
        )
        .bytes(
            "reserved_after_empty_cache",
            predicted.reserved_after_empty_cache,
            measured.reserved_after_empty_cache,
        )
        .rule("empty_cache releases every segment with no live block, and only those")
        .check();
}

/// Your prediction at the page's sizes, whose measurement is `expected`, and at two sets of
/// sizes drawn on this run by `drawn` (each starts on an empty device).
fn check(
    page: Scenario,
    expected: Outcome,
    drawn: impl Fn(&mut Draw, usize) -> Scenario,
) -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        // The prediction is made before anything runs.
        let predicted = predict(page);
        let measured = measure(page, &dev)?;
        assert_eq!(measured, expected, "the allocator's numbers for {page:?}");
        compare(page, &predicted, &measured);
        let mut draw = Draw::from_env();
        for case in 0..2 {
            let scenario = drawn(&mut draw, case);
            gpumem::testing::reset(&dev);
            let predicted = predict(scenario);
            compare(scenario, &predicted, &measure(scenario, &dev)?);
        }
        Ok(())
    })
}

/// A whole number of `f32`, in bytes, from `low` to `high` bytes.
fn f32_bytes(draw: &mut Draw, low: u64, high: u64) -> u64 {
    4 * draw.range(low.div_ceil(4), high / 4)
}

/// A buffer of at most 1 MiB (`case` 0) or over 1 MiB and under 10 MiB, its block too (`case` 1).
fn small_or_large(draw: &mut Draw, case: usize) -> u64 {
    match case {
        0 => f32_bytes(draw, 4, MIB),
        _ => f32_bytes(draw, MIB + 4, 10 * MIB - 512),
    }
}

/// A model whose weight is at most 1 MiB (`case` 0), or over 1 MiB and under 10 MiB with its
/// bias at most 1 MiB (`case` 1).
fn model_sizes(draw: &mut Draw, case: usize) -> (u64, u64) {
    match case {
        0 => (draw.range(1, 200), draw.range(1, 200)),
        _ => {
            let inputs = draw.range(300, 1500);
            let outputs = draw.range(MIB / (4 * inputs) + 1, (10 * MIB - 512) / (4 * inputs));
            (inputs, outputs)
        }
    }
}

#[test]
fn prediction_tiny_model_loaded_matches_the_allocator() -> anyhow::Result<()> {
    check(
        Scenario::TinyModelLoaded {
            inputs: 10,
            outputs: 10,
        },
        Outcome {
            allocated: 1024,
            reserved: 2 * MIB,
            reserved_after_empty_cache: 2 * MIB,
        },
        |draw, case| {
            let (inputs, outputs) = model_sizes(draw, case);
            Scenario::TinyModelLoaded { inputs, outputs }
        },
    )
}

#[test]
fn prediction_tiny_model_dropped_matches_the_allocator() -> anyhow::Result<()> {
    check(
        Scenario::TinyModelDropped {
            inputs: 10,
            outputs: 10,
        },
        Outcome {
            allocated: 0,
            reserved: 2 * MIB,
            reserved_after_empty_cache: 0,
        },
        |draw, case| {
            let (inputs, outputs) = model_sizes(draw, case);
            Scenario::TinyModelDropped { inputs, outputs }
        },
    )
}

#[test]
fn prediction_empty_cache_before_drop_matches_the_allocator() -> anyhow::Result<()> {
    check(
        Scenario::EmptyCacheBeforeDrop { bytes: 4 * MIB },
        Outcome {
            allocated: 0,
            reserved: 20 * MIB,
            reserved_after_empty_cache: 0,
        },
        |draw, case| Scenario::EmptyCacheBeforeDrop {
            bytes: small_or_large(draw, case),
        },
    )
}

#[test]
fn prediction_small_buffer_pins_segment_matches_the_allocator() -> anyhow::Result<()> {
    check(
        Scenario::SmallBufferPinsSegment {
            live: 400,
            freed: MIB,
        },
        Outcome {
            allocated: 512,
            reserved: 2 * MIB,
            reserved_after_empty_cache: 2 * MIB,
        },
        |draw, _| Scenario::SmallBufferPinsSegment {
            live: f32_bytes(draw, 4, MIB),
            freed: f32_bytes(draw, 4, MIB),
        },
    )
}

#[test]
fn prediction_live_block_pins_large_segment_matches_the_allocator() -> anyhow::Result<()> {
    check(
        Scenario::LiveBlockPinsLargeSegment {
            live: 2 * MIB,
            freed: 6 * MIB,
        },
        Outcome {
            allocated: 2 * MIB,
            reserved: 20 * MIB,
            reserved_after_empty_cache: 20 * MIB,
        },
        |draw, _| Scenario::LiveBlockPinsLargeSegment {
            live: small_or_large(draw, 1),
            freed: small_or_large(draw, 1),
        },
    )
}

#[test]
fn prediction_host_copy_dropped_matches_the_allocator() -> anyhow::Result<()> {
    check(
        Scenario::HostCopyDropped { bytes: 4 * MIB },
        Outcome {
            allocated: 4 * MIB,
            reserved: 20 * MIB,
            reserved_after_empty_cache: 20 * MIB,
        },
        |draw, case| Scenario::HostCopyDropped {
            bytes: small_or_large(draw, case),
        },
    )
}
