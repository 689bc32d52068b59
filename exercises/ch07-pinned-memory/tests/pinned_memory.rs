//! Graded tests for chapter 7. They pass on `cpu` and on `cuda` (`GPUMEM_DEVICE=cuda`). They check
//! data, copies and memory, never speed: speed is the benches' job.

use ch07_pinned_memory::{download_pinned, pipeline, upload_pinned};
use ch07_predict::{HOST_SIZES, HostPrediction, HostSizes, predict_host};
use gpumem::ops::XorShift;
use gpumem::testing::Prediction;
use gpumem::testing::{rng, seeded};
use gpumem::{CopyCount, Device};
use std::cell::RefCell;

const NONE: CopyCount = CopyCount {
    copies: 0,
    bytes: 0,
};

/// `copies` copies moving `bytes` bytes in all.
fn copied(copies: u64, bytes: u64) -> CopyCount {
    CopyCount { copies, bytes }
}

/// Batch `i` of a run: `len` pseudo-random floats, different for every batch and every seed.
fn batch_data(seed: u64, i: usize, len: usize) -> Vec<f32> {
    XorShift::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).uniform_vec(len, -1.0, 1.0)
}

/// The test's seed (see `gpumem::testing`: `GPUMEM_TEST_SEED` replays it).
fn fresh_seed() -> u64 {
    rng().seed()
}

/// The test device with streams that run their work late, as a GPU's do (on cpu; a GPU's always
/// do): a missing `synchronize` or wait leaves memory as it was, so the test sees it.
fn late_device() -> gpumem::testing::TestDevice {
    let dev = gpumem::testing::device();
    dev.set_late_streams(true);
    dev
}

/// Device blocks handed out and not yet dropped.
fn live_blocks(dev: &Device) -> u64 {
    dev.memory_stats()
        .get("allocation.all.current")
        .expect("every key is present")
}

// --- upload_pinned ---------------------------------------------------------------------------

#[test]
fn upload_pinned_delivers_the_data_in_one_pinned_copy() {
    seeded(|| {
        let dev = late_device();
        let stream = dev.stream().expect("stream");
        let data = batch_data(fresh_seed(), 0, 3000);
        let buf = upload_pinned(&dev, &stream, &data).expect("upload_pinned");
        let t = dev.transfer_stats();
        assert_eq!(t.host_to_device, copied(1, 12_000), "host-to-device copies");
        assert_eq!(
            t.pinned,
            copied(1, 12_000),
            "the copy must come from pinned memory"
        );
        assert_eq!(t.device_to_host, NONE);
        assert_eq!(t.device_to_device, NONE);
        assert_eq!(buf.len(), 3000);
        assert_eq!(buf.device(), &*dev);
        assert_eq!(
            buf.to_vec().expect("read back"),
            data,
            "the device holds the data"
        );
    })
}

#[test]
fn upload_pinned_stages_through_one_cached_pinned_block() {
    let dev = late_device();
    let stream = dev.stream().expect("stream");
    let buf = upload_pinned(&dev, &stream, &vec![0.25; 3000]).expect("upload_pinned");
    let h = dev.host_memory_stats();
    assert_eq!(h.num_host_alloc, 1, "one pinned block from the system");
    assert_eq!(h.active_requests.allocated, 1, "one alloc_pinned call");
    assert_eq!(
        h.active_requests.current, 0,
        "the staging buffer is dropped before returning"
    );
    assert_eq!(h.active_bytes.current, 0);
    assert_eq!(
        h.active_bytes.peak, 16_384,
        "12,000 bytes round up to a 16 KiB block"
    );
    assert_eq!(
        h.allocated_bytes.current, 16_384,
        "the freed block stays cached"
    );
    assert_eq!(
        live_blocks(&dev),
        1,
        "only the returned buffer on the device"
    );
    assert_eq!(dev.memory_allocated(), 12_288);
    assert_eq!(buf.block_bytes(), 12_288);
}

#[test]
fn upload_pinned_reuses_the_cached_staging_block() {
    let dev = late_device();
    let stream = dev.stream().expect("stream");
    let first = upload_pinned(&dev, &stream, &vec![1.0; 3000]).expect("first upload");
    let second = upload_pinned(&dev, &stream, &vec![2.0; 3000]).expect("second upload");
    // 10,000 bytes round up to the same 16 KiB size.
    let third = upload_pinned(&dev, &stream, &vec![3.0; 2500]).expect("third upload");
    let h = dev.host_memory_stats();
    assert_eq!(h.num_host_alloc, 1, "the cached block serves every upload");
    assert_eq!(h.active_requests.allocated, 3, "three alloc_pinned calls");
    assert_eq!(h.allocated_bytes.current, 16_384);
    assert_eq!(dev.transfer_stats().pinned, copied(3, 34_000));
    assert_eq!(first.to_vec().expect("first"), vec![1.0; 3000]);
    assert_eq!(second.to_vec().expect("second"), vec![2.0; 3000]);
    assert_eq!(third.to_vec().expect("third"), vec![3.0; 2500]);
}

// --- download_pinned -------------------------------------------------------------------------

#[test]
fn download_pinned_returns_the_data_in_one_pinned_copy() {
    seeded(|| {
        let dev = late_device();
        let stream = dev.stream().expect("stream");
        let data = batch_data(fresh_seed(), 0, 5000);
        let buf = dev.from_slice(&data).expect("from_slice");
        dev.reset_transfer_stats();
        let back = download_pinned(&buf, &stream).expect("download_pinned");
        let t = dev.transfer_stats();
        assert_eq!(t.device_to_host, copied(1, 20_000), "device-to-host copies");
        assert_eq!(
            t.pinned,
            copied(1, 20_000),
            "the copy must go into pinned memory"
        );
        assert_eq!(t.host_to_device, NONE);
        assert_eq!(t.device_to_device, NONE);
        assert_eq!(back, data);
    })
}

#[test]
fn download_pinned_queues_behind_the_work_already_on_its_stream() {
    gpumem::testing::seeded(|| {
        let dev = late_device();
        let stream = dev.stream().expect("stream");
        let data = batch_data(fresh_seed(), 1, 5000);
        let mut buf = dev.alloc::<f32>(5000).expect("zeros");
        // The zeros are written on the default stream: done before the upload is queued.
        dev.synchronize().expect("synchronize");
        // An upload queued on `stream` and not waited for: a download on the same stream comes after
        // it; one on another stream (or none) reads the zeros still there.
        let mut pinned = dev.alloc_pinned::<f32>(5000).expect("pinned");
        pinned.as_mut_slice().copy_from_slice(&data);
        pinned
            .copy_to_device_async(&mut buf, &stream)
            .expect("queued upload");
        let back = download_pinned(&buf, &stream).expect("download_pinned");
        assert!(
            back == data,
            "download_pinned must copy on the stream it is given, behind the upload queued there; \
         yours read {} (the buffer before the upload ran: zeros)",
            if back.iter().all(|&x| x == 0.0) {
                "zeros"
            } else {
                "other values"
            }
        );
    })
}

#[test]
fn download_pinned_allocates_no_device_memory_and_returns_its_staging_block() {
    let dev = late_device();
    let stream = dev.stream().expect("stream");
    let buf = dev.from_slice(&vec![0.5f32; 5000]).expect("from_slice");
    let allocated = dev.memory_allocated();
    let back = download_pinned(&buf, &stream).expect("download_pinned");
    assert_eq!(back, vec![0.5; 5000]);
    assert_eq!(dev.memory_allocated(), allocated, "no device memory");
    assert_eq!(
        dev.max_memory_allocated(),
        allocated,
        "not even for a while"
    );
    let h = dev.host_memory_stats();
    assert_eq!(h.num_host_alloc, 1);
    assert_eq!(
        h.active_requests.current, 0,
        "the staging buffer is dropped"
    );
    assert_eq!(
        h.allocated_bytes.current, 32_768,
        "20,000 bytes round up to 32 KiB, kept in the cache"
    );
}

// --- predict_host ----------------------------------------------------------------------------

// ANCHOR: host_scenario
/// The scenario to predict, as code (in the official tests, so the measurement is not yours to
/// change). It returns what it measured, in the shape of the prediction. At the page's
/// `HOST_SIZES`, `a` is 3000 `f32` (12,000 bytes), `b` 20,000 bytes, `c` 2500 `f32` and `d`
/// 4096 bytes.
fn host_scenario(dev: &Device, sizes: HostSizes) -> gpumem::Result<HostPrediction> {
    let f32s = |bytes: u64| (bytes / 4) as usize;
    let stream = dev.stream()?;
    let mut x = dev.alloc::<f32>(f32s(sizes.a))?;
    let mut a = dev.alloc_pinned::<f32>(f32s(sizes.a))?;
    a.as_mut_slice().fill(1.0);
    a.copy_to_device_async(&mut x, &stream)?;
    let b = dev.alloc_pinned::<u8>(sizes.b as usize)?;
    stream.synchronize()?; // a's copy has finished, so a's block may be reused once a is dropped
    drop(a);
    drop(b);
    let c = dev.alloc_pinned::<f32>(f32s(sizes.c))?;
    let d = dev.alloc_pinned::<u8>(sizes.d as usize)?;
    x.copy_from_slice(&vec![2.0; f32s(sizes.a)])?; // from a Vec: pageable memory

    let before = dev.host_memory_stats();
    dev.empty_host_cache(); // c and d are still alive
    let after = dev.host_memory_stats();
    let copies = dev.transfer_stats();
    drop((c, d));
    Ok(HostPrediction {
        num_host_alloc: before.num_host_alloc,
        pinned_active_bytes: before.active_bytes.current,
        pinned_peak_active_bytes: before.active_bytes.peak,
        pinned_pool_bytes: before.allocated_bytes.current,
        num_host_free: after.num_host_free,
        pinned_pool_after_empty: after.allocated_bytes.current,
        host_to_device_copies: copies.host_to_device.copies,
        pinned_copies: copies.pinned.copies,
        pinned_bytes: copies.pinned.bytes,
    })
}
// ANCHOR_END: host_scenario

/// What the scenario measures at the page's sizes.
const PAGE_MEASURED: HostPrediction = HostPrediction {
    num_host_alloc: 3,
    pinned_active_bytes: 16_384 + 4096,
    pinned_peak_active_bytes: 16_384 + 32_768,
    pinned_pool_bytes: 16_384 + 32_768 + 4096,
    num_host_free: 1,
    pinned_pool_after_empty: 16_384 + 4096,
    host_to_device_copies: 2,
    pinned_copies: 1,
    pinned_bytes: 12_000,
};

/// Checks `compare` on the prediction and the measurement at the page's sizes (whose measurement
/// is asserted), then at two sets of sizes drawn on this run, each at most 64 KiB, on a device
/// with an empty host cache and zeroed counters each time.
fn check_host(compare: impl Fn(HostSizes, &HostPrediction, &HostPrediction)) {
    seeded(|| {
        let dev = gpumem::testing::device();
        let predicted = predict_host(HOST_SIZES);
        let measured = host_scenario(&dev, HOST_SIZES).expect("the scenario runs");
        assert_eq!(measured, PAGE_MEASURED, "the allocator's numbers");
        compare(HOST_SIZES, &predicted, &measured);
        let mut draw = gpumem::testing::Draw::from_env();
        for _ in 0..2 {
            let sizes = HostSizes {
                a: 4 * draw.range(1, 16_384),
                b: draw.range(1, 65_536),
                c: 4 * draw.range(1, 16_384),
                d: draw.range(1, 65_536),
            };
            gpumem::testing::reset(&dev);
            let predicted = predict_host(sizes);
            let measured = host_scenario(&dev, sizes).expect("the scenario runs");
            compare(sizes, &predicted, &measured);
        }
    })
}

#[test]
fn host_prediction_matches_block_rounding_and_reuse() {
    check_host(|sizes, p, m| {
        Prediction::new(format!(
            "your prediction of the host cache's blocks for {sizes:?}"
        ))
        .count("num_host_alloc", p.num_host_alloc, m.num_host_alloc)
        .rule("a request takes a cached block of exactly its rounded size, else a new one")
        .bytes(
            "pinned_active_bytes (active_bytes.current)",
            p.pinned_active_bytes,
            m.pinned_active_bytes,
        )
        .rule("a pinned block is its request rounded up to a power of two")
        .bytes(
            "pinned_peak_active_bytes (active_bytes.peak)",
            p.pinned_peak_active_bytes,
            m.pinned_peak_active_bytes,
        )
        .rule("the peak is the most bytes of blocks handed out at once")
        .bytes(
            "pinned_pool_bytes (allocated_bytes.current)",
            p.pinned_pool_bytes,
            m.pinned_pool_bytes,
        )
        .rule("every block obtained from the system stays, handed out or cached")
        .check();
    });
}

#[test]
fn host_prediction_matches_empty_host_cache() {
    check_host(|sizes, p, m| {
        Prediction::new(format!(
            "your prediction after empty_host_cache for {sizes:?}"
        ))
        .count("num_host_free", p.num_host_free, m.num_host_free)
        .rule("empty_host_cache gives back every cached block, never a live one")
        .bytes(
            "pinned_pool_after_empty",
            p.pinned_pool_after_empty,
            m.pinned_pool_after_empty,
        )
        .rule("what stays is the live blocks")
        .check();
    });
}

#[test]
fn host_prediction_matches_the_copy_counters() {
    check_host(|sizes, p, m| {
        Prediction::new(format!(
            "your prediction of the copy counters for {sizes:?}"
        ))
        .count(
            "host_to_device_copies",
            p.host_to_device_copies,
            m.host_to_device_copies,
        )
        .rule("a copy from a Vec is a host-to-device copy too")
        .count("pinned_copies", p.pinned_copies, m.pinned_copies)
        .rule("only copies from pinned memory count as pinned")
        .bytes("pinned_bytes", p.pinned_bytes, m.pinned_bytes)
        .rule("copies count the data's bytes, not the block's")
        .check();
    });
}

// --- pipeline --------------------------------------------------------------------------------

#[test]
fn pipeline_delivers_every_batch_intact_and_in_order() {
    seeded(|| {
        let dev = late_device();
        let seed = fresh_seed();
        let (batches, len) = (8, 4099);
        let mut consumed = Vec::new();
        pipeline(
            &dev,
            batches,
            len,
            |i, staging| {
                assert_eq!(staging.len(), len, "a staging buffer holds one batch");
                staging.copy_from_slice(&batch_data(seed, i, len));
            },
            |i, buf| {
                assert_eq!(buf.len(), len, "batch {i} has the batch length");
                assert_eq!(buf.device(), &*dev, "batch {i} is on the device");
                let on_device = buf.to_vec()?;
                assert!(
                    on_device == batch_data(seed, i, len),
                    "batch {i} arrived changed (seed {seed})"
                );
                consumed.push(i);
                Ok(())
            },
        )
        .expect("pipeline");
        assert_eq!(
            consumed,
            (0..batches).collect::<Vec<_>>(),
            "every batch, once, in order"
        );
    })
}

#[test]
fn pipeline_fills_the_next_batch_before_handing_over_the_current_one() {
    let dev = late_device();
    let log = RefCell::new(Vec::new());
    pipeline(
        &dev,
        5,
        1000,
        |i, staging| {
            staging.fill(i as f32);
            log.borrow_mut().push(format!("fill {i}"));
        },
        |i, _buf| {
            log.borrow_mut().push(format!("consume {i}"));
            Ok(())
        },
    )
    .expect("pipeline");
    let expected = [
        "fill 0",
        "fill 1",
        "consume 0",
        "fill 2",
        "consume 1",
        "fill 3",
        "consume 2",
        "fill 4",
        "consume 3",
        "consume 4",
    ];
    assert_eq!(log.into_inner(), expected);
}

#[test]
fn pipeline_fills_the_staging_buffer_whose_copy_has_finished() {
    // Where each fill writes. Batch i's copy is still in flight while batch i + 1 is filled (on
    // these late streams it has not even run), so batch i + 1 must go into the other buffer: the
    // one of batch i - 1, whose copy was waited for before batch i - 1 was consumed. Filling batch
    // i's own buffer would have to wait for its copy first (PinnedBuffer does; without that wait,
    // as with a raw pinned pointer in CUDA, batch i would reach the device as batch i + 1), and
    // the copy would no longer overlap the fill.
    let dev = late_device();
    let filled_into = RefCell::new(Vec::new());
    pipeline(
        &dev,
        6,
        1000,
        |i, staging| {
            staging.fill(i as f32);
            filled_into.borrow_mut().push(staging.as_ptr());
        },
        |_, _| Ok(()),
    )
    .expect("pipeline");
    let filled_into = filled_into.into_inner();
    assert_eq!(filled_into.len(), 6, "one fill per batch");
    for i in 1..filled_into.len() {
        assert!(
            !std::ptr::eq(filled_into[i], filled_into[i - 1]),
            "batch {i} was filled into the staging buffer of batch {}, whose copy was still in \
             flight: batch i uses staging buffer i % 2, so the next batch always goes into the \
             other one",
            i - 1
        );
    }
    for i in 2..filled_into.len() {
        assert!(
            std::ptr::eq(filled_into[i], filled_into[i - 2]),
            "batch {i} was not filled into the staging buffer of batch {}: the two staging \
             buffers are used in turn (batch i uses staging buffer i % 2)",
            i - 2
        );
    }
}

#[test]
fn pipeline_reuses_two_pinned_staging_buffers_for_every_batch() {
    let dev = late_device();
    let ignore = |_: usize, _: gpumem::Buffer<f32>| Ok(());
    pipeline(&dev, 9, 3000, |i, s| s.fill(i as f32), ignore).expect("first pipeline");
    let h = dev.host_memory_stats();
    assert_eq!(h.num_host_alloc, 2, "two pinned blocks from the system");
    assert_eq!(
        h.active_requests.allocated, 2,
        "two alloc_pinned calls for 9 batches"
    );
    assert_eq!(h.active_requests.peak, 2);
    assert_eq!(h.active_requests.current, 0, "both dropped at the end");
    assert_eq!(h.allocations.current, 2, "both kept in the cache");
    assert_eq!(
        h.allocated_bytes.current,
        2 * 16_384,
        "12,000 bytes -> 16 KiB each"
    );

    pipeline(&dev, 5, 3000, |i, s| s.fill(i as f32), ignore).expect("second pipeline");
    let h = dev.host_memory_stats();
    assert_eq!(
        h.num_host_alloc, 2,
        "the second run takes both blocks from the cache"
    );
    assert_eq!(h.active_requests.allocated, 4);
    assert_eq!(h.allocated_bytes.current, 2 * 16_384);
}

#[test]
fn pipeline_makes_one_pinned_copy_per_batch() {
    let dev = late_device();
    pipeline(&dev, 6, 1000, |i, s| s.fill(i as f32), |_, _| Ok(())).expect("pipeline");
    let t = dev.transfer_stats();
    assert_eq!(t.host_to_device, copied(6, 24_000), "one copy per batch");
    assert_eq!(t.pinned, copied(6, 24_000), "every copy from pinned memory");
    assert_eq!(t.device_to_host, NONE);
    assert_eq!(t.device_to_device, NONE);
}

#[test]
fn pipeline_keeps_at_most_two_batches_on_the_device_and_leaks_nothing() {
    let dev = late_device();
    // Memory that exists before and after, so "back to the start" is not simply zero.
    let _keep = dev.alloc::<f32>(1000).expect("device buffer");
    let _keep_pinned = dev.alloc_pinned::<f32>(100).expect("pinned buffer");
    dev.reset_peak_memory_stats();
    dev.reset_host_memory_stats();
    let (device_start, host_start) = (dev.memory_allocated(), dev.host_memory_stats());
    pipeline(&dev, 7, 3000, |i, s| s.fill(i as f32), |_, _| Ok(())).expect("pipeline");
    assert_eq!(
        dev.max_memory_allocated(),
        device_start + 2 * 12_288,
        "batch i and batch i + 1 on the device, never more"
    );
    assert_eq!(
        dev.memory_allocated(),
        device_start,
        "every batch's device buffer is freed"
    );
    let h = dev.host_memory_stats();
    assert_eq!(
        h.active_bytes.current, host_start.active_bytes.current,
        "both staging buffers are dropped"
    );
    assert_eq!(
        h.active_requests.current,
        host_start.active_requests.current
    );
    assert_eq!(
        h.active_bytes.peak,
        host_start.active_bytes.current + 2 * 16_384
    );
}

#[test]
fn pipeline_stops_at_the_first_consumer_error_and_leaks_nothing() {
    let dev = late_device();
    let mut consumed = Vec::new();
    let result = pipeline(
        &dev,
        8,
        1000,
        |i, s| s.fill(i as f32),
        |i, _buf| {
            consumed.push(i);
            if i == 3 {
                // A consumer that gives up at batch 3, with an error of its own.
                return Err(gpumem::Error::LengthMismatch {
                    expected: 1000,
                    actual: 0,
                });
            }
            Ok(())
        },
    );
    assert!(
        matches!(result, Err(gpumem::Error::LengthMismatch { .. })),
        "the consumer's error is returned: {result:?}"
    );
    assert_eq!(
        consumed,
        [0, 1, 2, 3],
        "nothing is consumed after the error"
    );
    assert_eq!(dev.memory_allocated(), 0, "no device buffer is left behind");
    assert_eq!(dev.host_memory_stats().active_requests.current, 0);
}

#[test]
fn pipeline_of_no_batches_does_nothing() {
    let dev = late_device();
    let calls = RefCell::new(0);
    pipeline(
        &dev,
        0,
        1000,
        |_, _| *calls.borrow_mut() += 1,
        |_, _| {
            *calls.borrow_mut() += 1;
            Ok(())
        },
    )
    .expect("pipeline of no batches");
    assert_eq!(calls.into_inner(), 0, "neither fill nor consume is called");
    assert_eq!(dev.transfer_stats().total_copies(), 0);
    assert_eq!(dev.memory_allocated(), 0);
}
