//! `record_activity`: the pinned host allocator's events (exact sizes, in order) and each copy and
//! kernel with its stream. Order is asserted through the ticks, never through clock times.

use gpumem::activity::{HostAction, HostEvent, WorkKind, WorkSpan};

/// (action, block, size, requested, allocated, reserved) of each host event, the block numbers
/// counted from the first event's.
fn host_events(events: &[HostEvent]) -> Vec<(HostAction, u64, u64, u64, u64, u64)> {
    let first = events.first().map_or(0, |e| e.block);
    events
        .iter()
        .map(|e| {
            (
                e.action,
                e.block - first,
                e.size,
                e.requested,
                e.allocated,
                e.reserved,
            )
        })
        .collect()
}

/// (kind, name, stream, bytes, whether a pinned block) of each span.
fn spans(work: &[WorkSpan]) -> Vec<(WorkKind, &str, u64, u64, bool)> {
    work.iter()
        .map(|w| {
            (
                w.kind,
                w.name.as_str(),
                w.stream,
                w.bytes,
                w.pinned_block.is_some(),
            )
        })
        .collect()
}

#[test]
fn pinned_blocks_are_recorded_taken_freed_reused_and_released_with_their_sizes() {
    use HostAction::*;
    let dev = gpumem::testing::device();
    dev.record_activity(true);
    let a = dev.alloc_pinned::<u8>(100_000).unwrap();
    drop(a);
    let b = dev.alloc_pinned::<u8>(70_000).unwrap();
    let c = dev.alloc_pinned::<u8>(4097).unwrap();
    drop(b);
    dev.empty_host_cache();
    let activity = dev.activity();
    dev.record_activity(false);
    drop(c);
    const K128: u64 = 128 << 10;
    assert_eq!(
        host_events(&activity.host),
        [
            (Alloc, 0, K128, 100_000, K128, K128),
            (Free, 0, K128, 0, 0, K128),
            // 70,000 bytes round up to the same 128 KiB: the cached block is handed out again.
            (Reuse, 0, K128, 70_000, K128, K128),
            (Alloc, 1, 8192, 4097, K128 + 8192, K128 + 8192),
            (Free, 0, K128, 0, 8192, K128 + 8192),
            // empty_host_cache gives back the cached block; the live one stays.
            (Release, 0, K128, 0, 8192, 8192),
        ]
    );
    assert!(activity.work.is_empty(), "{:?}", activity.work);
    let ticks: Vec<u64> = activity.host.iter().map(|e| e.tick).collect();
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "{ticks:?}");
    assert_eq!(activity.device, dev.to_string());
}

#[test]
fn each_copy_and_kernel_is_recorded_with_its_stream_and_its_pinned_block() {
    let dev = gpumem::testing::device();
    let copy_stream = dev.stream().unwrap();
    dev.record_activity(true);
    dev.record_annotation("batch 0");
    let mut staging = dev.alloc_pinned::<f32>(1000).unwrap();
    staging.as_mut_slice().fill(2.0);
    let mut batch = dev.alloc::<f32>(1000).unwrap();
    staging
        .copy_to_device_async(&mut batch, &copy_stream)
        .unwrap();
    copy_stream.synchronize().unwrap();
    let total = gpumem::ops::sum(&batch).unwrap();
    drop(staging);
    let activity = dev.activity();
    dev.record_activity(false);
    assert_eq!(total, 2000.0);

    let side = copy_stream.id().0;
    assert_ne!(side, 0);
    assert_eq!(
        spans(&activity.work),
        [
            (WorkKind::Kernel, "zero", 0, 4000, false),
            (WorkKind::HostToDevice, "copy", side, 4000, true),
            // ops::sum: its one-element f64 result zeroed, the sum, and the result read back.
            (WorkKind::Kernel, "zero", 0, 8, false),
            (WorkKind::Kernel, "sum", 0, 4000, false),
            (WorkKind::DeviceToHost, "copy", 0, 8, false),
        ]
    );
    // The upload read the staging block: the one allocated before it and freed after it.
    let [alloc, free] = activity.host.as_slice() else {
        panic!("{:?}", activity.host)
    };
    let upload = &activity.work[1];
    assert_eq!(
        (alloc.action, free.action, upload.pinned_block),
        (HostAction::Alloc, HostAction::Free, Some(alloc.block))
    );
    assert_eq!((alloc.size, alloc.requested), (4096, 4000));
    assert!(alloc.tick < upload.start && upload.end < free.tick);
    // The host thread issues one call at a time: every span begins after the one before ended.
    for w in activity.work.windows(2) {
        assert!(w[0].start < w[0].end && w[0].end < w[1].start, "{w:?}");
        assert!(w[0].start_ns <= w[0].end_ns && w[0].end_ns <= w[1].start_ns);
    }
    assert_eq!(activity.marks.len(), 1);
    assert_eq!(activity.marks[0].label, "batch 0");
    assert!(activity.marks[0].tick < alloc.tick);
}

#[test]
fn nothing_is_recorded_while_off_and_turning_it_off_forgets() {
    let dev = gpumem::testing::device();
    let x = dev.alloc_pinned::<u8>(10).unwrap();
    let buf = dev.from_slice(&[1.0f32; 4]).unwrap();
    dev.record_annotation("not recorded");
    assert!(dev.activity().is_empty());
    dev.record_activity(true);
    drop(x);
    let _ = buf.to_vec().unwrap();
    let on = dev.activity();
    assert_eq!((on.host.len(), on.work.len()), (1, 1));
    assert_eq!(on.host[0].tick, 0, "the ticks start again at 0");
    // Turned on again while on: kept.
    dev.record_activity(true);
    assert_eq!(dev.activity(), on);
    dev.record_activity(false);
    assert!(dev.activity().is_empty());
}

#[test]
fn the_activity_stays_out_of_the_snapshot_and_its_pickle() {
    let dev = gpumem::testing::device();
    let dir = tempfile::tempdir().unwrap();
    let (plain, with_activity) = (dir.path().join("a.pickle"), dir.path().join("b.pickle"));
    let run = |activity: bool, file: &std::path::Path| {
        dev.empty_cache();
        dev.record_memory_history(true);
        dev.record_activity(activity);
        let pinned = dev.alloc_pinned::<u8>(100).unwrap();
        let buf = dev.from_slice(&[1.0f32; 64]).unwrap();
        drop(pinned);
        // Addresses and times differ between runs: compare what is written, not the bytes.
        let snapshot = dev.snapshot();
        dev.dump_snapshot(file).unwrap();
        drop(buf);
        dev.record_activity(false);
        dev.record_memory_history(false);
        snapshot
            .trace
            .iter()
            .map(|e| (e.action, e.size))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(false, &plain), run(true, &with_activity));
    let pickle = std::fs::read(&with_activity).unwrap();
    assert!(!std::fs::read(&plain).unwrap().is_empty());
    // (The frames name this file, activity.rs: look for the record's own keys.)
    for key in ["pinned_block", "host_to_device", "start_ns"] {
        assert!(
            !pickle.windows(key.len()).any(|w| w == key.as_bytes()),
            "{key} in the pickle"
        );
    }
}

#[test]
fn an_op_records_the_zeroing_of_its_output_then_its_kernel_one_after_the_other() {
    let dev = gpumem::testing::device();
    let a = dev.from_slice(&[1.0f32; 6]).unwrap();
    let b = dev.from_slice(&[2.0f32; 12]).unwrap();
    dev.record_activity(true);
    let r = gpumem::ops::relu(&a).unwrap();
    let c = gpumem::ops::matmul(&a, &b, gpumem::ops::MatMul::new(2, 3, 4)).unwrap();
    let activity = dev.activity();
    dev.record_activity(false);
    assert_eq!((r.len(), c.len()), (6, 8));
    assert_eq!(
        spans(&activity.work),
        [
            (WorkKind::Kernel, "zero", 0, 24, false),
            (WorkKind::Kernel, "relu", 0, 24, false),
            (WorkKind::Kernel, "zero", 0, 32, false),
            (WorkKind::Kernel, "matmul", 0, 32, false),
        ]
    );
    for w in activity.work.windows(2) {
        assert!(w[0].end < w[1].start, "{w:?}");
    }
}
