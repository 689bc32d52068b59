//! Graded tests for chapter 2. They pass on `cpu` and on `cuda` (`GPUMEM_DEVICE=cuda`).

use ch02_predict::predict_pipeline;
use ch02_transfers::{
    batched_upload, download, independent_copy, round_trip, upload, zeros_on_device,
};
use gpumem::testing::{Draw, Prediction};
use gpumem::{CopyCount, Device};

const MIB: u64 = 1 << 20;
const NONE: CopyCount = CopyCount {
    copies: 0,
    bytes: 0,
};

/// `0.0, 1.0, 2.0, ...`: `n` distinct values, so a wrong order or a missing element shows.
fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// `copies` copies moving `bytes` bytes in all.
fn copied(copies: u64, bytes: u64) -> CopyCount {
    CopyCount { copies, bytes }
}

/// Blocks handed out and not yet dropped.
fn live_blocks(dev: &Device) -> u64 {
    dev.memory_stats()
        .get("allocation.all.current")
        .expect("every key is present")
}

// --- upload, download, round_trip ------------------------------------------------------------

#[test]
fn upload_makes_exactly_one_host_to_device_copy() {
    let dev = gpumem::testing::device();
    let data = ramp(1000);
    let buf = upload(&dev, &data).expect("upload");
    let t = dev.transfer_stats();
    assert_eq!(t.host_to_device, copied(1, 4000), "host-to-device copies");
    assert_eq!(t.device_to_host, NONE, "upload must not read back");
    assert_eq!(
        t.device_to_device, NONE,
        "upload must not copy on the device"
    );
    assert_eq!(buf.len(), 1000);
    assert_eq!(
        buf.device(),
        &*dev,
        "the buffer lives on the device it was given"
    );
    assert_eq!(buf.to_vec().expect("read back"), data);
}

#[test]
fn upload_allocates_one_block_rounded_to_512_bytes() {
    let dev = gpumem::testing::device();
    let buf = upload(&dev, &ramp(1000)).expect("upload");
    assert_eq!(live_blocks(&dev), 1, "one buffer, one block");
    assert_eq!(dev.memory_allocated(), 4096, "4000 bytes round up to 4096");
    assert_eq!(
        dev.memory_reserved(),
        2 * MIB,
        "a small request gets a 2 MiB segment"
    );
    assert_eq!(buf.block_bytes(), 4096);
}

#[test]
fn upload_of_nothing_copies_nothing() {
    let dev = gpumem::testing::device();
    let buf = upload(&dev, &[]).expect("upload of an empty slice");
    assert!(buf.is_empty());
    assert_eq!(dev.transfer_stats().total_copies(), 0);
    assert_eq!(dev.memory_allocated(), 0);
    assert_eq!(dev.memory_reserved(), 0);
}

#[test]
fn download_makes_exactly_one_device_to_host_copy() {
    let dev = gpumem::testing::device();
    let data = ramp(300);
    let buf = dev.from_slice(&data).expect("from_slice");
    dev.reset_transfer_stats();
    let allocated = dev.memory_allocated();
    let back = download(&buf).expect("download");
    let t = dev.transfer_stats();
    assert_eq!(t.device_to_host, copied(1, 1200), "device-to-host copies");
    assert_eq!(t.host_to_device, NONE);
    assert_eq!(t.device_to_device, NONE);
    assert_eq!(back, data);
    assert_eq!(
        dev.memory_allocated(),
        allocated,
        "a download needs no device memory"
    );
}

#[test]
fn round_trip_returns_the_data_with_one_copy_each_way() {
    let dev = gpumem::testing::device();
    let data = ramp(5000);
    let back = round_trip(&dev, &data).expect("round trip");
    assert_eq!(back, data);
    let t = dev.transfer_stats();
    assert_eq!(t.host_to_device, copied(1, 20_000));
    assert_eq!(t.device_to_host, copied(1, 20_000));
    assert_eq!(t.device_to_device, NONE);
}

#[test]
fn round_trip_leaves_nothing_allocated() {
    let dev = gpumem::testing::device();
    round_trip(&dev, &ramp(5000)).expect("round trip");
    assert_eq!(
        dev.memory_allocated(),
        0,
        "the device buffer must be dropped"
    );
    assert_eq!(live_blocks(&dev), 0);
    assert_eq!(
        dev.max_memory_allocated(),
        20_480,
        "20000 bytes, rounded up to 20480, existed for a while"
    );
    assert_eq!(
        dev.memory_reserved(),
        2 * MIB,
        "the freed block stays cached in its segment"
    );
}

// --- zeros_on_device -------------------------------------------------------------------------

#[test]
fn zeros_on_device_makes_no_copy() {
    let dev = gpumem::testing::device();
    let buf = zeros_on_device(&dev, 1 << 20).expect("zeros");
    assert_eq!(dev.transfer_stats().total_copies(), 0, "zeros need no copy");
    assert_eq!(buf.len(), 1 << 20);
    assert_eq!(dev.memory_allocated(), 4 * MIB);
    assert_eq!(live_blocks(&dev), 1);
}

#[test]
fn zeros_on_device_holds_zeros() {
    let dev = gpumem::testing::device();
    let buf = zeros_on_device(&dev, 1000).expect("zeros");
    assert_eq!(dev.transfer_stats().total_copies(), 0);
    assert_eq!(buf.to_vec().expect("read back"), vec![0.0; 1000]);
}

#[test]
fn zeros_on_device_costs_the_memory_of_from_slice_without_the_copy() {
    let dev = gpumem::testing::device();
    let made_there = zeros_on_device(&dev, 1000).expect("zeros");
    let after_zeros = dev.transfer_stats();
    let copied_there = dev.from_slice(&vec![0.0f32; 1000]).expect("from_slice");
    let after_upload = dev.transfer_stats();
    assert_eq!(made_there.block_bytes(), copied_there.block_bytes());
    assert_eq!(dev.memory_allocated(), 2 * 4096);
    assert_eq!(after_zeros.host_to_device, NONE);
    assert_eq!(after_upload.host_to_device, copied(1, 4000));
}

// --- batched_upload --------------------------------------------------------------------------

#[test]
fn batched_upload_makes_one_copy_for_many_rows() {
    let dev = gpumem::testing::device();
    let rows: Vec<Vec<f32>> = (0..100).map(|r| vec![r as f32; 10]).collect();
    let buf = batched_upload(&dev, &rows).expect("batched upload");
    assert_eq!(dev.transfer_stats().host_to_device, copied(1, 4000));
    assert_eq!(dev.transfer_stats().total_copies(), 1);
    assert_eq!(buf.len(), 1000);
    assert_eq!(live_blocks(&dev), 1, "one buffer for the whole batch");
    assert_eq!(dev.memory_allocated(), 4096);
}

#[test]
fn batched_upload_moves_the_same_bytes_as_row_by_row() {
    let dev = gpumem::testing::device();
    let rows: Vec<Vec<f32>> = (0..100).map(|r| vec![r as f32; 10]).collect();
    let one_by_one: Vec<_> = rows
        .iter()
        .map(|row| dev.from_slice(row).expect("from_slice"))
        .collect();
    let row_by_row = dev.transfer_stats().host_to_device;
    let row_by_row_allocated = dev.memory_allocated();
    drop(one_by_one);
    dev.reset_transfer_stats();
    let _batch = batched_upload(&dev, &rows).expect("batched upload");
    let batched = dev.transfer_stats().host_to_device;
    assert_eq!(row_by_row, copied(100, 4000));
    assert_eq!(batched, copied(1, 4000), "same bytes, one copy");
    // Each 40-byte row also took a 512-byte block of its own.
    assert_eq!(row_by_row_allocated, 100 * 512);
    assert_eq!(dev.memory_allocated(), 4096);
}

#[test]
fn batched_upload_keeps_row_order() {
    let dev = gpumem::testing::device();
    let rows = vec![vec![1.0, 2.0], vec![], vec![3.0, 4.0, 5.0], vec![6.0]];
    let buf = batched_upload(&dev, &rows).expect("batched upload");
    assert_eq!(dev.transfer_stats().host_to_device, copied(1, 24));
    assert_eq!(
        buf.to_vec().expect("read back"),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
}

#[test]
fn batched_upload_of_no_rows_copies_nothing() {
    let dev = gpumem::testing::device();
    let none = batched_upload(&dev, &[]).expect("no rows");
    let empty_rows = batched_upload(&dev, &[vec![], vec![]]).expect("empty rows");
    assert!(none.is_empty() && empty_rows.is_empty());
    assert_eq!(dev.transfer_stats().total_copies(), 0);
    assert_eq!(dev.memory_reserved(), 0);
}

// --- independent_copy ------------------------------------------------------------------------

#[test]
fn independent_copy_does_not_share_memory() {
    let dev = gpumem::testing::device();
    let buf = dev.from_slice(&ramp(256)).expect("from_slice");
    let copy = independent_copy(&buf).expect("copy");
    assert!(
        !copy.shares_memory_with(&buf),
        "a copy needs its own memory"
    );
    assert_ne!(copy.ptr(), buf.ptr());
    assert_eq!(copy.device(), buf.device());
    // For contrast: `to` on the same device shares.
    let same = buf.to(&dev).expect("to");
    assert!(same.shares_memory_with(&buf));
}

#[test]
fn independent_copy_survives_overwriting_the_original() {
    let dev = gpumem::testing::device();
    let original = ramp(256);
    let mut buf = dev.from_slice(&original).expect("from_slice");
    let copy = independent_copy(&buf).expect("copy");
    buf.copy_from_slice(&[-1.0; 256]).expect("overwrite");
    assert_eq!(copy.to_vec().expect("read copy"), original);
    assert_eq!(buf.to_vec().expect("read original"), vec![-1.0; 256]);
}

#[test]
fn independent_copy_makes_one_device_to_device_copy_and_one_new_block() {
    let dev = gpumem::testing::device();
    let buf = dev.from_slice(&ramp(256)).expect("from_slice");
    dev.reset_transfer_stats();
    let _copy = independent_copy(&buf).expect("copy");
    let t = dev.transfer_stats();
    assert_eq!(t.device_to_device, copied(1, 1024));
    assert_eq!(t.host_to_device, NONE, "no trip through the host");
    assert_eq!(t.device_to_host, NONE, "no trip through the host");
    assert_eq!(live_blocks(&dev), 2);
    assert_eq!(dev.memory_allocated(), 2 * 1024);
}

// --- predict_pipeline ------------------------------------------------------------------------

/// What the pipeline in `predict_pipeline`'s documentation really does.
struct Measured {
    h2d: CopyCount,
    d2d: CopyCount,
    d2h: CopyCount,
    live_blocks: u64,
    allocated: u64,
    freed_by_dropping_host: u64,
}

fn run_pipeline(dev: &Device, len: usize) -> Measured {
    let host: Vec<f32> = vec![1.0; len];
    let x = dev.from_slice(&host).expect("from_slice");
    let y = x.to(dev).expect("to");
    let z = x.try_clone().expect("try_clone");
    let w = dev.alloc::<f32>(len).expect("alloc");
    let before_drop = dev.memory_allocated();
    drop(host);
    let freed_by_dropping_host = before_drop - dev.memory_allocated();
    let back = z.to_vec().expect("to_vec");
    assert_eq!(back.len(), len);
    let t = dev.transfer_stats();
    let measured = Measured {
        h2d: t.host_to_device,
        d2d: t.device_to_device,
        d2h: t.device_to_host,
        live_blocks: live_blocks(dev),
        allocated: dev.memory_allocated(),
        freed_by_dropping_host,
    };
    drop((x, y, z, w));
    measured
}

/// The page's length (1000 `f32`s), then two drawn on this run (at most 1 MiB of data each): a
/// prediction copied from the page passes the first case at most.
fn pipeline_lengths() -> Vec<u64> {
    let mut draw = Draw::from_env();
    vec![1000, draw.range(1, 1 << 18), draw.range(1, 1 << 18)]
}

#[test]
fn pipeline_prediction_matches_the_copy_counters() {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        for len in pipeline_lengths() {
            gpumem::testing::reset(&dev);
            let predicted = predict_pipeline(len);
            let m = run_pipeline(&dev, len as usize);
            Prediction::new(format!(
                "your prediction of the copy counters (len = {len})"
            ))
            .count(
                "host_to_device_copies",
                predicted.host_to_device_copies,
                m.h2d.copies,
            )
            .rule("only a copy from a host slice counts as host-to-device")
            .bytes(
                "host_to_device_bytes",
                predicted.host_to_device_bytes,
                m.h2d.bytes,
            )
            .rule("a copy counts the data's bytes, not its block's")
            .count(
                "device_to_device_copies",
                predicted.device_to_device_copies,
                m.d2d.copies,
            )
            .rule("try_clone copies; to() onto the same device does not")
            .count(
                "device_to_host_copies",
                predicted.device_to_host_copies,
                m.d2h.copies,
            )
            .rule("only reading back to the host counts as device-to-host")
            .check();
        }
    })
}

#[test]
fn pipeline_prediction_matches_live_blocks_and_allocated_bytes() {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        for len in pipeline_lengths() {
            gpumem::testing::reset(&dev);
            let predicted = predict_pipeline(len);
            let m = run_pipeline(&dev, len as usize);
            Prediction::new(format!(
                "your prediction of what is left on the device (len = {len})"
            ))
            .count("live_blocks", predicted.live_blocks, m.live_blocks)
            .rule("to() onto the same device shares the block; a clone and an alloc have their own")
            .bytes("allocated", predicted.allocated, m.allocated)
            .rule("each live block is its request rounded up to a multiple of 512 bytes")
            .check();
        }
    })
}

#[test]
fn pipeline_prediction_knows_dropping_the_host_vec_frees_no_device_memory() {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        for len in pipeline_lengths() {
            gpumem::testing::reset(&dev);
            let predicted = predict_pipeline(len);
            let m = run_pipeline(&dev, len as usize);
            Prediction::new(format!(
                "your prediction of what drop(host) frees on the device (len = {len})"
            ))
            .bytes(
                "freed_by_dropping_host",
                predicted.freed_by_dropping_host,
                m.freed_by_dropping_host,
            )
            .rule("a host Vec was never device memory")
            .check();
        }
    })
}
