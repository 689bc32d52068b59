//! Graded tests for chapter 4: reading the memory statistics.

use ch04_memory_stats::{
    FRAGMENT_SIZES, MLP_SHAPE, Mlp, block_bytes, fragment, measure_peak, parameter_bytes,
    sampled_peak, source_loop, stats_view, train, workspace_op,
};
use ch04_predict::{MIB, StatsView, predict_fragmented, predict_mlp};
use gpumem::Device;
use gpumem::testing::Prediction;

/// Reads the allocator's numbers by key, independently of the learner's `stats_view`.
fn observed(dev: &Device) -> StatsView {
    let stats = dev.memory_stats();
    let key = |k: &str| {
        stats
            .get(k)
            .unwrap_or_else(|| panic!("memory_stats() has no key {k}"))
    };
    StatsView {
        allocated: key("allocated_bytes.all.current"),
        requested: key("requested_bytes.all.current"),
        reserved: key("reserved_bytes.all.current"),
        peak_allocated: key("allocated_bytes.all.peak"),
        small_segments: key("segment.small_pool.current"),
        large_segments: key("segment.large_pool.current"),
        inactive_split_bytes: key("inactive_split_bytes.all.current"),
    }
}

/// `f32` elements in `bytes` bytes.
fn f32s(bytes: u64) -> usize {
    (bytes / 4) as usize
}

// ---- parameter_bytes and block_bytes ----

#[test]
fn parameter_bytes_is_what_the_allocator_was_asked_for() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let tiny = Mlp::new(&dev, &[(10, 10)])?;
    assert_eq!(parameter_bytes(&tiny), 440, "110 f32 parameters");
    assert_eq!(observed(&dev).requested, 440);
    let mlp = Mlp::new(&dev, &MLP_SHAPE)?;
    assert_eq!(
        parameter_bytes(&mlp),
        4 * (1024 * 1024 + 1024 + 1024 * 10 + 10)
    );
    assert_eq!(observed(&dev).requested, 440 + parameter_bytes(&mlp));
    Ok(())
}

#[test]
fn block_bytes_is_what_memory_allocated_counts() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let tiny = Mlp::new(&dev, &[(10, 10)])?;
    assert_eq!(
        block_bytes(&tiny),
        1024,
        "400 B and 40 B each round up to 512 B"
    );
    assert_eq!(dev.memory_allocated(), 1024);
    let mlp = Mlp::new(&dev, &MLP_SHAPE)?;
    assert_eq!(block_bytes(&mlp), 4 * MIB + 4096 + 40_960 + 512);
    assert_eq!(dev.memory_allocated(), 1024 + block_bytes(&mlp));
    Ok(())
}

// ---- StatsView ----

#[test]
fn block_bytes_reads_each_block_even_when_it_is_larger_than_the_rounded_request()
-> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    // A 12 MiB block goes back to the cache; an 11 MiB weight then takes it whole (what would
    // be left, 1 MiB, is too little to split off a large block).
    drop(dev.alloc::<f32>(f32s(12 * MIB))?);
    let mlp = Mlp::new(&dev, &[(1024, 2816)])?;
    assert_eq!(
        block_bytes(&mlp),
        12 * MIB + 11_264,
        "an 11 MiB weight in a cached 12 MiB block, and a 11,264 B bias: read each buffer's \
         block, do not compute it from the request"
    );
    assert_eq!(dev.memory_allocated(), block_bytes(&mlp));
    Ok(())
}

#[test]
fn stats_view_reads_torchs_keys() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let mlp = Mlp::new(&dev, &MLP_SHAPE)?;
    // A temporary, gone before the reading: the peak is above what is allocated now.
    drop(dev.alloc::<f32>(f32s(MIB))?);
    let view = stats_view(&dev.memory_stats());
    assert_eq!(view, observed(&dev));
    assert_eq!(view.allocated, dev.memory_allocated());
    assert_eq!(view.reserved, dev.memory_reserved());
    assert_eq!(view.peak_allocated, dev.max_memory_allocated());
    drop(mlp);
    Ok(())
}

#[test]
fn stats_view_tells_current_from_peak_and_small_from_large() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let loss = dev.alloc::<f32>(100)?;
    // 11 MiB + 400 B rounds to 11 MiB + 512 B and gets a segment of its own, rounded up to 12 MiB;
    // the 1 MiB - 512 B left over is too little to split off, so the whole segment is the block.
    let big = dev.alloc::<f32>(f32s(11 * MIB + 400))?;
    let view = stats_view(&dev.memory_stats());
    assert_eq!(
        view,
        StatsView {
            allocated: 512 + 12 * MIB,
            requested: 400 + 11 * MIB + 400,
            reserved: 2 * MIB + 12 * MIB,
            peak_allocated: 512 + 12 * MIB,
            small_segments: 1,
            large_segments: 1,
            inactive_split_bytes: 2 * MIB - 512,
        }
    );
    drop(big);
    let view = stats_view(&dev.memory_stats());
    assert_eq!((view.allocated, view.peak_allocated), (512, 512 + 12 * MIB));
    assert_eq!(
        view.large_segments, 1,
        "the freed 12 MiB segment stays cached"
    );
    assert_eq!(
        view.inactive_split_bytes,
        2 * MIB - 512,
        "a whole cached segment is not split"
    );
    drop(loss);
    Ok(())
}

// ---- predict, then measure ----

/// Your prediction beside the measurement, every number at once.
fn compare(what: &str, p: &StatsView, m: &StatsView) {
    Prediction::new(what)
        .bytes("allocated", p.allocated, m.allocated)
        .rule("each live block is its request rounded up to 512 bytes")
        .bytes("requested", p.requested, m.requested)
        .rule("requested counts the bytes asked for, before rounding")
        .bytes("reserved", p.reserved, m.reserved)
        .rule("up to 1 MiB: 2 MiB segments; 1 to 10 MiB: 20 MiB segments, shared while a free block fits")
        .bytes("peak_allocated", p.peak_allocated, m.peak_allocated)
        .rule("the peak is the most that was ever allocated at once, not what is allocated now")
        .count("small_segments", p.small_segments, m.small_segments)
        .rule("requests up to 1 MiB share 2 MiB small-pool segments")
        .count("large_segments", p.large_segments, m.large_segments)
        .rule("a new large segment is reserved only when no free block of one fits")
        .bytes(
            "inactive_split_bytes",
            p.inactive_split_bytes,
            m.inactive_split_bytes,
        )
        .rule("the free parts of segments that a live block keeps reserved")
        .check();
}

#[test]
fn prediction_mlp_matches_memory_stats() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        // The prediction is made before anything runs.
        let predicted = predict_mlp(&MLP_SHAPE);
        let mlp = Mlp::new(&dev, &MLP_SHAPE)?;
        let measured = observed(&dev);
        assert_eq!(
            measured,
            StatsView {
                allocated: 4 * MIB + 4096 + 40_960 + 512,
                requested: 4 * MIB + 4096 + 40_960 + 40,
                reserved: 20 * MIB + 2 * MIB,
                peak_allocated: 4 * MIB + 4096 + 40_960 + 512,
                small_segments: 1,
                large_segments: 1,
                inactive_split_bytes: 16 * MIB + 2 * MIB - 4096 - 40_960 - 512,
            },
            "the allocator's numbers"
        );
        compare("your prediction for MLP_SHAPE", &predicted, &measured);
        drop(mlp);
        // Two shapes drawn on this run: a first weight over 1 MiB and under 10 MiB, the rest small.
        let mut draw = gpumem::testing::Draw::from_env();
        for _ in 0..2 {
            let hidden = draw.size(257, 2559);
            let shape = [(1024, hidden), (hidden, draw.size(1, 50))];
            gpumem::testing::reset(&dev);
            let predicted = predict_mlp(&shape);
            let mlp = Mlp::new(&dev, &shape)?;
            compare(
                &format!("your prediction for {shape:?}"),
                &predicted,
                &observed(&dev),
            );
            drop(mlp);
        }
        Ok(())
    })
}

#[test]
fn prediction_fragmented_matches_memory_stats() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let (each, last) = FRAGMENT_SIZES;
        // The prediction is made before anything runs.
        let predicted = predict_fragmented(each, last);
        let live = fragment(&dev, each, last)?;
        let measured = observed(&dev);
        assert_eq!(
            measured,
            StatsView {
                allocated: 14 * MIB,
                requested: 14 * MIB,
                reserved: 40 * MIB,
                peak_allocated: 16 * MIB,
                small_segments: 0,
                large_segments: 2,
                inactive_split_bytes: 12 * MIB + 14 * MIB,
            },
            "the allocator's numbers"
        );
        compare("your prediction after fragment", &predicted, &measured);
        dev.empty_cache();
        assert_eq!(
            dev.memory_reserved(),
            40 * MIB,
            "live blocks pin both segments"
        );
        drop(live);
        // Two pairs of sizes drawn on this run. The four buffers share one 20 MiB segment and
        // leave more than 1 MiB at its end; the last buffer is larger than every free piece there.
        let mut draw = gpumem::testing::Draw::from_env();
        for _ in 0..2 {
            let each = 4 * draw.range((5 * MIB / 2) / 4 + 1, (9 * MIB / 2) / 4);
            let each_block = each.div_ceil(512) * 512;
            let largest_piece = each_block.max(20 * MIB - 4 * each_block);
            let last = 4 * draw.range(largest_piece / 4 + 1, (10 * MIB - 512) / 4);
            gpumem::testing::reset(&dev);
            let predicted = predict_fragmented(each, last);
            let live = fragment(&dev, each, last)?;
            compare(
                &format!("your prediction after fragment(dev, {each}, {last})"),
                &predicted,
                &observed(&dev),
            );
            drop(live);
        }
        Ok(())
    })
}

// ---- measure_peak ----

#[test]
fn measure_peak_sees_temporaries_inside_an_operation() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let x = dev.alloc::<f32>(f32s(2 * MIB))?;
    let (y, report) = measure_peak(&dev, || workspace_op(&x))?;
    assert_eq!(y.len(), x.len(), "measure_peak returns the work's result");
    assert_eq!(report.before, 2 * MIB);
    assert_eq!(
        report.peak,
        8 * MIB,
        "x, two temporaries and the output at once"
    );
    assert_eq!(report.after, 4 * MIB, "x and the output");
    assert_eq!(report.extra(), 6 * MIB);
    assert_eq!(dev.max_memory_allocated(), report.peak);
    drop(y);
    assert_eq!(
        sampled_peak(&x, 3)?,
        4 * MIB,
        "sampling between calls misses the temporaries"
    );
    Ok(())
}

#[test]
fn measure_peak_catches_what_the_sources_loop_misses() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let (sampled, report) = measure_peak(&dev, || source_loop(&dev, 3))?;
    assert_eq!(sampled, 4 * MIB, "the loop's hand-rolled maximum");
    assert_eq!(
        report,
        ch04_memory_stats::PeakReport {
            before: 0,
            peak: 8 * MIB,
            after: 0
        },
        "the new tensor is allocated before the old one is freed"
    );
    Ok(())
}

#[test]
fn measure_peak_forgets_peaks_from_before_the_work() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let x = dev.alloc::<f32>(f32s(2 * MIB))?;
    drop(dev.alloc::<f32>(f32s(12 * MIB))?);
    assert_eq!(
        dev.max_memory_allocated(),
        14 * MIB,
        "an earlier, higher peak"
    );
    let (y, report) = measure_peak(&dev, || workspace_op(&x))?;
    assert_eq!(report.peak, 8 * MIB, "the peak of this work only");
    drop(y);
    Ok(())
}

// ---- train ----

const TRAIN_SHAPE: [(usize, usize); 1] = [(256, 256)];

#[test]
fn train_leaves_memory_allocated_where_it_found_it() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let model = Mlp::new(&dev, &TRAIN_SHAPE)?;
    let before = dev.memory_allocated();
    assert_eq!(before, 256 * 256 * 4 + 256 * 4);
    let losses = train(&model, 8)?;
    assert_eq!(losses.len(), 8);
    assert_eq!(
        dev.memory_allocated(),
        before,
        "a step's buffers outlived the loop"
    );
    Ok(())
}

#[test]
fn train_peak_does_not_grow_with_steps() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let model = Mlp::new(&dev, &TRAIN_SHAPE)?;
    let model_bytes = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    train(&model, 1)?;
    let one_step = dev.max_memory_allocated();
    // Activations and gradient (64 × 256 f32 each) and the 4-byte loss in a 512 B block.
    assert_eq!(one_step, model_bytes + 2 * 65_536 + 512);
    dev.reset_peak_memory_stats();
    train(&model, 16)?;
    assert_eq!(
        dev.max_memory_allocated(),
        one_step,
        "the peak grew with the number of steps: are earlier losses still on the device?"
    );
    Ok(())
}

#[test]
fn train_copies_each_loss_to_the_host_once() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let model = Mlp::new(&dev, &TRAIN_SHAPE)?;
    dev.reset_transfer_stats();
    let losses = train(&model, 4)?;
    assert_eq!(losses, vec![1.0, 0.5, 1.0 / 3.0, 0.25]);
    let copies = dev.transfer_stats().device_to_host;
    assert_eq!(
        (copies.copies, copies.bytes),
        (4, 16),
        "one 4-byte copy per step"
    );
    Ok(())
}
