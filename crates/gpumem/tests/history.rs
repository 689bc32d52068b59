//! `record_memory_history` with torch's options and its semantics when turned off and on again
//! (`recordHistory` in c10/cuda/CUDACachingAllocator.cpp and `_record_memory_history` in
//! torch/csrc/cuda/memory_snapshot.cpp, torch 2.x).

use gpumem::allocator::{CachingAllocator, PendingUse, StreamId};
use gpumem::backend_cpu::CpuBackend;
use gpumem::history::BlockState;
use gpumem::{ActionSet, AllocatorConfig, ContextLevel, HistoryLevel, HistoryOptions, TraceAction};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const S0: StreamId = StreamId(0);

fn allocator() -> CachingAllocator<CpuBackend> {
    CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default())
}

fn actions(a: &CachingAllocator<CpuBackend>) -> Vec<TraceAction> {
    a.snapshot().trace.iter().map(|e| e.action).collect()
}

#[test]
fn the_default_keeps_every_entry() {
    let a = allocator();
    a.record_history(true);
    for _ in 0..1000 {
        let b = a.malloc(512, S0).unwrap();
        a.free(b, vec![]);
    }
    // 1 segment_alloc + 1000 × (alloc, free_requested, free_completed); the snapshot's own
    // entry comes after the trace is read.
    assert_eq!(a.snapshot().trace.len(), 3001);
}

#[test]
fn max_entries_keeps_the_newest_entries() {
    let a = allocator();
    a.record_history_options(HistoryOptions {
        enabled: Some(HistoryLevel::All),
        max_entries: 3,
        ..HistoryOptions::default()
    });
    let b = a.malloc(512, S0).unwrap();
    a.free(b, vec![]);
    assert_eq!(
        actions(&a),
        [
            TraceAction::Alloc,
            TraceAction::FreeRequested,
            TraceAction::FreeCompleted,
        ]
    );
}

#[test]
fn state_keeps_one_entry_as_torch() {
    let a = allocator();
    a.record_history_options(HistoryOptions {
        enabled: Some(HistoryLevel::State),
        max_entries: 1000,
        ..HistoryOptions::default()
    });
    let b = a.malloc(512, S0).unwrap();
    assert_eq!(actions(&a), [TraceAction::Alloc]);
    a.free(b, vec![]);
}

#[test]
fn turning_recording_off_drops_the_trace_and_on_again_starts_empty() {
    let a = allocator();
    a.record_history(true);
    let b = a.malloc(512, S0).unwrap();
    a.record_history(false);
    assert!(a.snapshot().trace.is_empty(), "off drops what was recorded");
    a.free(b, vec![]);
    a.record_history(true);
    let c = a.malloc(512, S0).unwrap();
    assert_eq!(actions(&a), [TraceAction::Alloc]);
    // Turning it on while on keeps what is recorded.
    a.record_history(true);
    assert_eq!(actions(&a), [TraceAction::Alloc, TraceAction::Snapshot]);
    a.free(c, vec![]);
}

/// Work on another stream that the test finishes by hand.
struct Flag(Arc<AtomicBool>);

impl PendingUse for Flag {
    fn is_done(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn wait(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_free_used_on_another_stream_completes_when_that_work_is_done() {
    let a = allocator();
    a.record_history(true);
    let b = a.malloc(4096, S0).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    a.free(b, vec![Box::new(Flag(done.clone()))]);
    // Freed by the program, still active (and counted) until the other stream's work is done.
    let snap = a.snapshot();
    assert_eq!(
        snap.segments[0].blocks[0].state,
        BlockState::ActivePendingFree
    );
    assert_eq!(snap.segments[0].active_size, 4096);
    assert_eq!(a.memory_stats().get("active_bytes.all.current"), Some(4096));
    assert_eq!(a.memory_stats().get("allocated_bytes.all.current"), Some(0));
    assert!(!actions(&a).contains(&TraceAction::FreeCompleted));
    done.store(true, Ordering::SeqCst);
    // The next allocator call sees the work done and completes the free first.
    let c = a.malloc(100_000, S0).unwrap();
    let trace = a.snapshot().trace;
    let kinds: Vec<_> = trace.iter().map(|e| e.action).collect();
    let requested = kinds.iter().position(|&k| k == TraceAction::FreeRequested);
    let completed = kinds.iter().position(|&k| k == TraceAction::FreeCompleted);
    assert!(requested < completed, "{kinds:?}");
    assert_eq!(trace[completed.unwrap()].addr, b.ptr);
    assert_eq!(
        a.memory_stats().get("active_bytes.all.current"),
        Some(c.size as u64)
    );
    a.free(c, vec![]);
}

#[test]
fn an_allocation_through_the_device_records_the_callers_line() {
    let dev = gpumem::Device::cpu();
    dev.record_memory_history(true);
    let line = line!() + 1;
    let buf = dev.alloc::<f32>(1000).unwrap();
    let snap = dev.snapshot();
    dev.record_memory_history(false);
    let alloc = snap
        .trace
        .iter()
        .rfind(|e| e.action == TraceAction::Alloc)
        .expect("an alloc entry");
    let frame = alloc.frames.first().expect("a frame");
    assert!(frame.filename.ends_with("history.rs"), "{frame:?}");
    assert_eq!(frame.line, u64::from(line));
    drop(buf);
}

#[test]
fn an_annotation_is_recorded_with_its_label_only_while_recording() {
    let a = allocator();
    a.record_annotation("before recording");
    a.record_history(true);
    let b = a.malloc(4096, S0).unwrap();
    a.record_annotation("2. drop the batch");
    a.free(b, vec![]);
    let trace = a.snapshot().trace;
    let notes: Vec<_> = trace
        .iter()
        .filter(|e| e.action == TraceAction::Annotation)
        .collect();
    assert_eq!(notes.len(), 1, "{trace:?}");
    assert_eq!(notes[0].label.as_deref(), Some("2. drop the batch"));
    assert_eq!(notes[0].allocated, 4096, "the totals of the moment");
    assert!(
        trace
            .iter()
            .filter(|e| e.action != TraceAction::Annotation)
            .all(|e| e.label.is_none())
    );
    // It keeps its place in the trace: after the alloc, before the free.
    let at = trace
        .iter()
        .position(|e| e.action == TraceAction::Annotation)
        .unwrap();
    assert_eq!(trace[at - 1].action, TraceAction::Alloc);
    assert_eq!(trace[at + 1].action, TraceAction::FreeRequested);
    // It survives the snapshot's JSON.
    let back = gpumem::Snapshot::from_json(&a.snapshot().to_json()).unwrap();
    assert!(
        back.trace
            .iter()
            .any(|e| e.label.as_deref() == Some("2. drop the batch"))
    );
    a.record_history(false);
    a.record_annotation("after recording");
    assert!(a.snapshot().trace.is_empty());
}

#[test]
fn the_replay_ignores_annotations() {
    let a = allocator();
    a.record_history(true);
    let b = a.malloc(4096, S0).unwrap();
    a.record_annotation("a step");
    a.free(b, vec![]);
    let trace = a.snapshot().trace;
    let without: Vec<_> = trace
        .iter()
        .filter(|e| e.action != TraceAction::Annotation)
        .cloned()
        .collect();
    assert_eq!(
        gpumem::trace::AllocTrace::from_entries(&trace, "t").to_json(),
        gpumem::trace::AllocTrace::from_entries(&without, "t").to_json()
    );
}

#[test]
fn skip_actions_leaves_those_actions_out_of_the_trace() {
    let a = allocator();
    a.record_history_options(HistoryOptions {
        skip_actions: ActionSet::parse(&["free_requested", "snapshot", "annotate"]).unwrap(),
        ..HistoryOptions::default()
    });
    let b = a.malloc(512, S0).unwrap();
    a.free(b, vec![]);
    let _ = a.snapshot();
    assert_eq!(
        actions(&a),
        [
            TraceAction::SegmentAlloc,
            TraceAction::Alloc,
            TraceAction::FreeCompleted,
        ],
        "no free_requested, and neither snapshot's own entry"
    );
}

#[test]
fn an_unknown_skip_action_is_torchs_error() {
    let e = ActionSet::parse(&["alloc", "malloc"]).unwrap_err();
    assert_eq!(e.to_string(), "Unknown TraceEntry action: malloc");
}

#[test]
fn clear_history_empties_the_trace_and_recording_goes_on() {
    let a = allocator();
    a.record_history(true);
    let b = a.malloc(512, S0).unwrap();
    assert_eq!(actions(&a).len(), 2, "segment_alloc, alloc");
    a.record_history_options(HistoryOptions {
        clear_history: true,
        ..HistoryOptions::default()
    });
    assert!(a.snapshot().trace.is_empty());
    a.free(b, vec![]);
    assert_eq!(
        actions(&a),
        [
            TraceAction::Snapshot,
            TraceAction::FreeRequested,
            TraceAction::FreeCompleted,
        ]
    );
}

#[test]
fn context_decides_which_entries_keep_their_frames() {
    let frames_of_alloc = |context| {
        let a = allocator();
        a.record_history_options(HistoryOptions {
            context,
            ..HistoryOptions::default()
        });
        let b = a.malloc(512, S0).unwrap();
        let trace = a.snapshot().trace;
        a.free(b, vec![]);
        let alloc = trace.iter().find(|e| e.action == TraceAction::Alloc);
        alloc.map(|e| e.frames.len())
    };
    assert_eq!(frames_of_alloc(Some(ContextLevel::All)), Some(1));
    assert_eq!(frames_of_alloc(Some(ContextLevel::Alloc)), Some(1));
    assert_eq!(frames_of_alloc(Some(ContextLevel::State)), Some(0));
    assert_eq!(frames_of_alloc(None), Some(0));
}

#[test]
fn torchs_strings_are_checked_with_torchs_messages() {
    let err = |e: Option<&str>, c: Option<&str>, s: &str| {
        HistoryOptions::from_torch(e, c, s, false)
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(err(Some("all"), Some("alloc"), "python"), None);
    assert_eq!(
        err(Some("everything"), Some("all"), "all").as_deref(),
        Some("expected state to be 'state', 'all', or None")
    );
    assert_eq!(
        err(Some("all"), Some("free"), "all").as_deref(),
        Some("expected context to be 'state', 'alloc', 'all', or None")
    );
    assert_eq!(
        err(Some("all"), Some("all"), "cpp").as_deref(),
        Some("expected stacks to be 'python', or 'all'")
    );
    let o = HistoryOptions::from_torch(Some("state"), None, "python", false).unwrap();
    assert_eq!(
        (o.enabled, o.context, o.max_entries),
        (Some(HistoryLevel::State), None, usize::MAX)
    );
}
