//! Allocation traces: a program's allocations and frees by id (not address), so that the same
//! pattern can be replayed through any caching allocator — gpumem's on either device, or PyTorch's
//! (`bench/torch_replay.py`). The file format is documented in `bench/README.md`.
//!
//! A trace comes from a [`Snapshot`](crate::history::Snapshot)'s recorded history ([`AllocTrace::from_snapshot`]), from a
//! program that builds one ([`TraceBuilder`]), or from a file ([`AllocTrace::from_json`], which
//! checks every event and names the first bad one). [`replay`] runs it through a caching allocator
//! and reports the peaks, the device reservations and the time per event.

mod events;
mod json;
mod replay;

pub use events::{
    AllocTrace, EntryConverter, FORMAT, Stacks, TraceBuilder, TraceError, TraceEvent, TraceSummary,
    VERSION,
};
pub use replay::{ReplayError, ReplayStats, replay, replay_recorded};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::allocator::CachingAllocator;
    use crate::policy::config::AllocatorConfig;
    use crate::policy::history::{TraceAction, TraceEntry};
    use crate::raw::cpu::CpuBackend;

    const HEAD: &str = r#"{"format":"gpumem-alloc-trace","version":1,"events":"#;

    fn with_events(events: &str) -> String {
        format!("{HEAD}{events}}}")
    }

    fn error(text: &str) -> TraceError {
        AllocTrace::from_json(text).expect_err("the trace should be rejected")
    }

    #[test]
    fn a_written_trace_reads_back_equal() {
        let mut b = TraceBuilder::new();
        let x = b.alloc(512, 0);
        let y = b.alloc(3 << 20, 1);
        b.free(x);
        let _live = b.alloc(1, 0);
        b.free(y);
        let trace = b.finish("a \"quoted\" description");
        let read = AllocTrace::from_json(&trace.to_json()).expect("valid");
        assert_eq!(read, trace);
        let summary = read.validate().expect("valid");
        assert_eq!(
            (summary.allocs, summary.frees, summary.live_at_end),
            (3, 2, 1)
        );
        assert_eq!(summary.streams, 2);
        assert_eq!(summary.total_bytes, 512 + (3 << 20) + 1);
    }

    #[test]
    fn the_stream_defaults_to_zero() {
        let trace =
            AllocTrace::from_json(&with_events(r#"[{"op":"alloc","id":7,"size":10}]"#)).unwrap();
        assert_eq!(
            trace.events,
            vec![TraceEvent::Alloc {
                id: 7,
                size: 10,
                stream: 0
            }]
        );
    }

    #[test]
    fn an_unknown_op_names_the_event() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":0,"size":8},{"op":"realloc","id":0}]"#,
        ));
        assert_eq!(
            e,
            TraceError::UnknownOp {
                index: 1,
                op: "realloc".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "event 1: unknown op \"realloc\" (expected \"alloc\", \"free\" or \"empty_cache\")"
        );
    }

    #[test]
    fn a_free_of_an_unknown_id_names_the_event() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":0,"size":8},{"op":"free","id":5}]"#,
        ));
        assert_eq!(e, TraceError::UnknownId { index: 1, id: 5 });
        assert_eq!(
            e.to_string(),
            "event 1: free of id 5, which no earlier event allocated"
        );
    }

    #[test]
    fn a_double_free_names_both_events() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":3,"size":8},{"op":"free","id":3},{"op":"free","id":3}]"#,
        ));
        assert_eq!(
            e,
            TraceError::DoubleFree {
                index: 2,
                id: 3,
                first: 1
            }
        );
    }

    #[test]
    fn a_reused_id_is_rejected() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":3,"size":8},{"op":"free","id":3},{"op":"alloc","id":3,"size":8}]"#,
        ));
        assert_eq!(
            e,
            TraceError::DuplicateId {
                index: 2,
                id: 3,
                first: 0
            }
        );
    }

    #[test]
    fn malformed_json_inside_the_events_names_the_event() {
        // Event 1 lacks the comma between two fields.
        let text = "{\"format\":\"gpumem-alloc-trace\",\"version\":1,\"events\":[\n\
                    {\"op\":\"alloc\",\"id\":0,\"size\":8},\n\
                    {\"op\":\"free\" \"id\":0}\n]}";
        let e = error(text);
        let TraceError::Malformed { message } = &e else {
            panic!("expected Malformed, got {e:?}");
        };
        assert!(message.starts_with("event 1: expected"), "{message}");
        assert!(message.ends_with("at line 3 column 13"), "{message}");
        assert_eq!(message.matches(" at line ").count(), 1, "{message}");
    }

    #[test]
    fn a_truncated_file_is_malformed() {
        let e = error(&format!("{HEAD}[{{\"op\":\"alloc\",\"id\":0,\"size\":8}},"));
        assert!(
            matches!(&e, TraceError::Malformed { message } if message.starts_with("event 1: ")),
            "{e}"
        );
    }

    #[test]
    fn missing_and_mistyped_fields_name_the_event() {
        let e = error(&with_events(
            r#"[{"op":"alloc","id":0,"size":8},{"op":"alloc","id":1}]"#,
        ));
        assert_eq!(e.to_string(), "event 1: an alloc event needs \"size\"");
        let e = error(&with_events(r#"[{"op":"alloc","id":0,"size":-8}]"#));
        assert_eq!(
            e.to_string(),
            "event 0: \"size\" must be a whole number ≥ 0, found -8"
        );
        let e = error(&with_events(r#"[{"op":"alloc","id":0,"size":0}]"#));
        assert_eq!(
            e.to_string(),
            "event 0: \"size\" must be at least 1 byte, found 0"
        );
        let e = error(&with_events(r#"[{"op":"free","id":0,"size":8}]"#));
        assert_eq!(
            e.to_string(),
            "event 0: unknown field \"size\" in a free event (it has id)"
        );
        let e = error(&with_events(r#"[[1,2]]"#));
        assert!(
            e.to_string().starts_with("event 0: expected an object"),
            "{e}"
        );
    }

    #[test]
    fn the_header_is_checked() {
        let e = error(r#"[{"op":"alloc","id":0,"size":8}]"#);
        assert!(
            matches!(&e, TraceError::Malformed { message } if message.contains("expected a trace object")),
            "{e}"
        );
        let e = error(r#"{"format":"something-else","version":1,"events":[]}"#);
        assert!(matches!(e, TraceError::NotATrace { .. }), "{e}");
        let e = error(r#"{"format":"gpumem-alloc-trace","version":2,"events":[]}"#);
        assert_eq!(
            e.to_string(),
            "trace format version 2 is not supported (this build reads version 1)"
        );
        let e = error(r#"{"format":"gpumem-alloc-trace","version":1}"#);
        assert_eq!(
            e.to_string(),
            "not a gpumem allocation trace: no \"events\" list"
        );
    }

    fn entry(action: TraceAction, addr: u64, size: u64, stream: u64) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream,
            allocated: 0,
            reserved: 0,
            time_us: 0,
            frames: Vec::new(),
            label: None,
        }
    }

    #[test]
    fn a_snapshot_trace_exports_by_id_and_allocates_older_blocks_first() {
        let entries = [
            entry(TraceAction::FreeRequested, 0x900, 512, 0), // allocated before recording began
            entry(TraceAction::SegmentAlloc, 0x1000, 2 << 20, 0),
            entry(TraceAction::Alloc, 0x1000, 512, 0),
            entry(TraceAction::Alloc, 0x1200, 1024, 77),
            entry(TraceAction::FreeRequested, 0x1000, 512, 0),
            entry(TraceAction::Alloc, 0x1000, 512, 0), // the same address, a new block
            entry(TraceAction::FreeRequested, 0x1200, 1024, 77),
        ];
        let trace = AllocTrace::from_entries(&entries, "test");
        use TraceEvent::{Alloc, Free};
        let alloc = |id, size, stream| Alloc { id, size, stream };
        assert_eq!(
            trace.events,
            vec![
                alloc(0, 512, 0), // the block freed first, allocated before the trace's own
                Free { id: 0 },
                alloc(1, 512, 0),
                alloc(2, 1024, 1),
                Free { id: 1 },
                alloc(3, 512, 0),
                Free { id: 2 },
            ]
        );
        assert_eq!(trace.recorded_before, 1);
        trace.validate().expect("an exported trace is valid");
    }

    #[test]
    fn blocks_the_final_segments_hold_that_the_trace_never_allocated_come_first() {
        let mut c = EntryConverter::new("test");
        c.push(&entry(TraceAction::Alloc, 0x5000, 4096, 0));
        c.push(&entry(TraceAction::FreeRequested, 0x3000, 1024, 0));
        // At the end: the block the trace allocated, and two it never mentions.
        let live = [(0x5000, 4096, 0), (0x2000, 2048, 0), (0x1000, 512, 0)];
        let trace = c.finish_from(&Stacks::default(), &live);
        use TraceEvent::{Alloc, Free};
        assert_eq!(
            trace.events,
            vec![
                Alloc {
                    id: 3,
                    size: 512,
                    stream: 0
                },
                Alloc {
                    id: 2,
                    size: 2048,
                    stream: 0
                },
                Alloc {
                    id: 1,
                    size: 1024,
                    stream: 0
                },
                Alloc {
                    id: 0,
                    size: 4096,
                    stream: 0
                },
                Free { id: 1 },
            ],
            "in address order, then the trace"
        );
        assert_eq!(trace.recorded_before, 3);
        trace.validate().expect("valid");
    }

    #[test]
    fn an_oom_entry_is_the_request_that_failed() {
        let entries = [
            entry(TraceAction::Alloc, 0x1000, 1 << 20, 0),
            // the allocator's release and retry, then the failure
            entry(TraceAction::SegmentFree, 0x8000, 20 << 20, 0),
            entry(TraceAction::Oom, 0, 192 << 20, 0),
            entry(TraceAction::FreeRequested, 0x1000, 1 << 20, 0),
        ];
        let trace = AllocTrace::from_entries(&entries, "test");
        assert_eq!(trace.failed_in_recording, vec![1]);
        assert_eq!(
            trace.events[1],
            TraceEvent::Alloc {
                id: 1,
                size: 192 << 20,
                stream: 0
            }
        );
        assert!(
            !trace.events.contains(&TraceEvent::EmptyCache),
            "a release before an oom entry is the allocator's retry"
        );
    }

    #[test]
    fn segments_freed_with_no_request_waiting_are_an_empty_cache() {
        let free = |addr| entry(TraceAction::FreeRequested, addr, 512, 0);
        let alloc = |addr| entry(TraceAction::Alloc, addr, 512, 0);
        let seg_free = entry(TraceAction::SegmentFree, 0x9000, 2 << 20, 0);
        let seg_alloc = entry(TraceAction::SegmentAlloc, 0xa000, 2 << 20, 0);
        let count = |entries: &[TraceEntry]| {
            AllocTrace::from_entries(entries, "t")
                .events
                .iter()
                .filter(|e| **e == TraceEvent::EmptyCache)
                .count()
        };
        // empty_cache() between two frees; at the end; before an alloc served from the cache
        assert_eq!(count(&[alloc(1), seg_free.clone(), free(1)]), 1);
        assert_eq!(
            count(&[alloc(1), free(1), seg_free.clone(), seg_free.clone()]),
            1
        );
        assert_eq!(count(&[alloc(1), seg_free.clone(), alloc(2)]), 1);
        // release and retry: a new segment follows the release, then the alloc
        assert_eq!(
            count(&[alloc(1), seg_free.clone(), seg_alloc.clone(), alloc(2)]),
            0
        );
        let trace = AllocTrace::from_entries(&[alloc(1), free(1), seg_free.clone(), alloc(2)], "t");
        assert_eq!(
            trace.events[2],
            TraceEvent::EmptyCache,
            "in its place: {:?}",
            trace.events
        );
        let json = trace.to_json();
        assert!(json.contains(r#"{"op":"empty_cache"}"#), "{json}");
        assert_eq!(
            AllocTrace::from_json(&json).expect("reads back").events,
            trace.events
        );
    }

    #[test]
    fn an_empty_cache_event_releases_the_cache_in_a_replay() {
        let mut b = TraceBuilder::new();
        let a = b.alloc(3 << 20, 0);
        b.free(a);
        let mut trace = b.finish("empty");
        trace.events.push(TraceEvent::EmptyCache);
        let allocator =
            CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
        let stats = replay(&allocator, &trace).expect("replay");
        assert_eq!(
            stats.num_device_free, 1,
            "the cached 20 MiB segment went back"
        );
    }

    #[test]
    fn replay_reports_the_peaks_the_rules_give() {
        // 700 KiB and 300 KiB share one 2 MiB small segment; 3 MiB takes a 20 MiB large one.
        let mut b = TraceBuilder::new();
        let a = b.alloc(700 << 10, 0);
        let c = b.alloc(300 << 10, 0);
        let d = b.alloc(3 << 20, 0);
        b.free(a);
        b.free(c);
        b.free(d);
        let trace = b.finish("rules");
        let allocator =
            CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
        let stats = replay(&allocator, &trace).expect("replay");
        assert_eq!(stats.events, 6);
        assert_eq!(stats.peak_requested, (1000 << 10) + (3 << 20));
        assert_eq!(stats.peak_allocated, (1000 << 10) + (3 << 20));
        assert_eq!(stats.peak_reserved, (2 << 20) + (20 << 20));
        assert_eq!(stats.num_device_alloc, 2);
        assert_eq!(allocator.reserved_bytes(), 0, "replay empties the cache");
    }

    #[test]
    fn replay_on_a_too_small_device_names_the_event() {
        let mut b = TraceBuilder::new();
        b.alloc(1 << 20, 0);
        b.alloc(30 << 20, 0);
        let trace = b.finish("too big");
        let allocator =
            CachingAllocator::new(CpuBackend::new(16 << 20), "cpu", AllocatorConfig::default());
        let e = replay(&allocator, &trace).expect_err("out of memory");
        assert!(matches!(e, ReplayError::Alloc { index: 1, .. }), "{e}");
        assert_eq!(allocator.reserved_bytes(), 0);
    }
}
