//! `record_memory_history(record_pinned_host_memory=True)`: the pinned host allocator's blocks and
//! trace in the snapshot (`host_segments`, `host_traces`) as torch 2.15 records them
//! (`CachingHostAllocatorImpl` in ATen/core/CachingHostAllocator.h of the 2.15.0 wheel) and writes
//! them (`THCPModule_memorySnapshot`).

use gpumem::testing::device;
use gpumem::{HistoryOptions, HostSegmentInfo, TraceAction};

fn pinned_only() -> HistoryOptions {
    HistoryOptions {
        record_pinned_host_memory: true,
        record_cuda: false,
        ..HistoryOptions::default()
    }
}

fn host_actions(dev: &gpumem::Device) -> Vec<(TraceAction, u64)> {
    dev.snapshot()
        .host_traces
        .iter()
        .map(|e| (e.action, e.size))
        .collect()
}

#[test]
fn pinned_recording_needs_recording_on_with_torchs_message() {
    let dev = device();
    let e = dev
        .record_memory_history_options(HistoryOptions {
            record_pinned_host_memory: true,
            ..HistoryOptions::off()
        })
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "record_pinned_host_memory requires memory history recording to be enabled"
    );
}

#[test]
fn the_host_trace_records_taking_reusing_freeing_and_giving_back_blocks() {
    let dev = device();
    dev.record_memory_history_options(pinned_only()).unwrap();
    let a = dev.alloc_pinned::<u8>(100_000).unwrap();
    let device_buf = dev.alloc::<u8>(4096).unwrap();
    drop(a);
    let b = dev.alloc_pinned::<u8>(70_000).unwrap();
    let live = dev.snapshot().host_segments;
    drop(b);
    dev.empty_host_cache();
    const K128: u64 = 131_072;
    assert_eq!(
        host_actions(&dev),
        [
            (TraceAction::SegmentAlloc, K128),
            (TraceAction::Alloc, K128),
            (TraceAction::FreeRequested, K128),
            (TraceAction::FreeCompleted, K128),
            (TraceAction::Alloc, K128),
            (TraceAction::FreeRequested, K128),
            (TraceAction::FreeCompleted, K128),
            (TraceAction::SegmentFree, K128),
        ],
        "100,000 and 70,000 bytes share one 128 KiB block"
    );
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].size, live[0].allocated, live[0].active),
        (K128, true, true)
    );
    assert!(
        dev.snapshot().segments.len() == 1 && dev.snapshot().trace.is_empty(),
        "record_cuda=false: the device's 4 KiB buffer has a segment but no trace"
    );
    assert!(dev.snapshot().host_segments.is_empty(), "all given back");
    drop(device_buf);
}

#[test]
fn a_cached_block_is_an_inactive_host_segment() {
    let dev = device();
    dev.record_memory_history_options(pinned_only()).unwrap();
    drop(dev.alloc_pinned::<f32>(1000).unwrap());
    let s: Vec<HostSegmentInfo> = dev.snapshot().host_segments;
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].size, s[0].allocated, s[0].active),
        (4096, false, false)
    );
}

#[test]
fn without_pinned_recording_the_snapshot_has_no_host_data() {
    let dev = device();
    dev.record_memory_history(true);
    drop(dev.alloc_pinned::<u8>(10).unwrap());
    let s = dev.snapshot();
    assert!(s.host_segments.is_empty() && s.host_traces.is_empty());
}

#[test]
fn stopping_keeps_the_host_trace_hidden_until_recording_restarts_and_clear_history_empties_it() {
    let dev = device();
    dev.record_memory_history_options(pinned_only()).unwrap();
    drop(dev.alloc_pinned::<u8>(10).unwrap());
    dev.record_memory_history(false);
    assert!(dev.snapshot().host_traces.is_empty(), "not shown while off");
    dev.record_memory_history_options(pinned_only()).unwrap();
    assert_eq!(
        dev.snapshot().host_traces.len(),
        4,
        "torch's host recordHistory keeps its trace when turned off"
    );
    dev.record_memory_history_options(HistoryOptions {
        clear_history: true,
        ..pinned_only()
    })
    .unwrap();
    assert!(dev.snapshot().host_traces.is_empty());
}

#[test]
fn max_entries_bounds_the_host_trace_too() {
    let dev = device();
    dev.record_memory_history_options(HistoryOptions {
        max_entries: 2,
        ..pinned_only()
    })
    .unwrap();
    drop(dev.alloc_pinned::<u8>(10).unwrap());
    assert_eq!(
        host_actions(&dev),
        [
            (TraceAction::FreeRequested, 16),
            (TraceAction::FreeCompleted, 16)
        ]
    );
}

#[test]
fn skip_actions_leaves_the_host_trace_alone_as_torchs() {
    let dev = device();
    dev.record_memory_history_options(HistoryOptions {
        skip_actions: gpumem::ActionSet::parse(&["alloc"]).unwrap(),
        ..pinned_only()
    })
    .unwrap();
    let _p = dev.alloc_pinned::<u8>(10).unwrap();
    assert_eq!(
        host_actions(&dev),
        [(TraceAction::SegmentAlloc, 16), (TraceAction::Alloc, 16)]
    );
}

#[test]
fn the_pickle_holds_the_host_keys_and_gpumems_reader_reads_it() {
    let dev = device();
    dev.record_memory_history_options(HistoryOptions {
        record_pinned_host_memory: true,
        ..HistoryOptions::default()
    })
    .unwrap();
    let _p = dev.alloc_pinned::<u8>(10).unwrap();
    let buf = dev.alloc::<f32>(256).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.pickle");
    dev.dump_snapshot(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let find = |k: &str| bytes.windows(k.len()).position(|w| w == k.as_bytes());
    let (ext, segs, traces) = (
        find("external_annotations").unwrap(),
        find("host_segments").unwrap(),
        find("host_traces").unwrap(),
    );
    assert!(ext < segs && segs < traces, "torch's key order");
    let back = gpumem::snapshot_pickle::load_snapshot(&path).unwrap();
    assert_eq!(back.segments.len(), 1);
    assert_eq!(
        back.trace
            .iter()
            .filter(|e| e.action == TraceAction::Alloc)
            .count(),
        1,
        "the device's one alloc; the host's alloc is not read as the device's"
    );
    drop(buf);
}

#[test]
fn host_memory_stats_has_torch_2_15s_keys_and_meanings() {
    let dev = device();
    let a = dev.alloc_pinned::<u8>(100_000).unwrap();
    let h = dev.host_memory_stats();
    assert_eq!(
        (h.active_requests.current, h.active_bytes.current),
        (1, 131_072)
    );
    drop(a);
    let h = dev.host_memory_stats();
    // torch 2.15: allocated_bytes is the pool (handed out plus cached), not the blocks in use.
    assert_eq!(
        (h.allocations.current, h.allocated_bytes.current),
        (1, 131_072)
    );
    assert_eq!((h.active_requests.current, h.active_bytes.current), (0, 0));
    assert_eq!((h.active_bytes.peak, h.num_host_alloc), (131_072, 1));
    dev.empty_host_cache();
    let h = dev.host_memory_stats();
    assert_eq!(
        (
            h.allocations.current,
            h.allocated_bytes.current,
            h.num_host_free
        ),
        (0, 0, 1)
    );
}
