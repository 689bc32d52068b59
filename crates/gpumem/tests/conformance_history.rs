//! `record_memory_history`'s options and the snapshot's keys against torch 2.15.0
//! (`conformance/goldens/history.json`): the defaults of `_record_memory_history`, its messages
//! for bad options (checked before CUDA is touched, so recorded on the CPU), and the keys of
//! `_snapshot()` with nothing recorded.

mod conformance_support;

use conformance_support::Conformance;
use gpumem::testing::device;
use gpumem::{ContextLevel, HistoryLevel, HistoryOptions, Stacks};
use serde_json::{Value, json};

#[test]
fn history_options_and_snapshot_keys_match_torch_2_15() {
    let dev = device();
    let mut c = Conformance::load("history");
    let d = HistoryOptions::default();
    let s = "_record_memory_history";
    let level = |l: Option<HistoryLevel>| match l {
        Some(HistoryLevel::All) => json!("all"),
        Some(HistoryLevel::State) => json!("state"),
        None => Value::Null,
    };
    c.check(s, "default enabled", level(d.enabled));
    c.check(
        s,
        "default context",
        match d.context {
            Some(ContextLevel::All) => json!("all"),
            Some(ContextLevel::Alloc) => json!("alloc"),
            Some(ContextLevel::State) => json!("state"),
            None => Value::Null,
        },
    );
    c.check(
        s,
        "default stacks",
        match d.stacks {
            Stacks::All => "all",
            Stacks::Python => "python",
        },
    );
    // torch's sys.maxsize and gpumem's usize::MAX both mean "keep every entry".
    c.check(
        s,
        "default max_entries",
        if d.max_entries == usize::MAX {
            json!("sys.maxsize")
        } else {
            json!(d.max_entries)
        },
    );
    c.check(s, "default clear_history", d.clear_history);
    // torch's None is the empty list: nothing skipped.
    c.check(
        s,
        "default skip_actions",
        if d.skip_actions == gpumem::ActionSet::default() {
            Value::Null
        } else {
            json!("some")
        },
    );
    c.check(
        s,
        "default record_pinned_host_memory",
        d.record_pinned_host_memory,
    );
    c.check(s, "default record_cuda", d.record_cuda);

    let error = |e: Option<&str>, ctx: Option<&str>, st: &str, pinned: bool| {
        HistoryOptions::from_torch(e, ctx, st, pinned)
            .err()
            .map(|e| e.to_string())
    };
    for (scenario, got) in [
        (
            "enabled='everything'",
            error(Some("everything"), Some("all"), "all", false),
        ),
        (
            "context='free'",
            error(Some("all"), Some("free"), "all", false),
        ),
        (
            "stacks='cpp'",
            error(Some("all"), Some("all"), "cpp", false),
        ),
        (
            "enabled='everything', context='free'",
            error(Some("everything"), Some("free"), "all", false),
        ),
        (
            "enabled=None, record_pinned_host_memory=True",
            error(None, Some("all"), "all", true),
        ),
        (
            "enabled=None, record_pinned_host_memory=True, context='free'",
            error(None, Some("free"), "all", true),
        ),
    ] {
        c.check(scenario, "error", got);
    }

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.pickle");
    dev.dump_snapshot(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    c.check(
        "_snapshot() without recording",
        "keys",
        top_level_keys(&bytes),
    );
    let snapshot = dev.snapshot();
    c.check(
        "_snapshot() without recording",
        "host_segments",
        serde_json::to_value(&snapshot.host_segments).unwrap(),
    );
    c.check(
        "_snapshot() without recording",
        "host_traces",
        serde_json::to_value(&snapshot.host_traces).unwrap(),
    );
    c.finish();
}

/// The keys of the pickle's top-level dict, in the order written: each of torch's six candidate
/// keys found as a pickled short string (`SHORT_BINUNICODE`, its length, its bytes), by position.
fn top_level_keys(bytes: &[u8]) -> Vec<String> {
    let mut found: Vec<(usize, &str)> = [
        "segments",
        "device_traces",
        "allocator_settings",
        "external_annotations",
        "host_segments",
        "host_traces",
    ]
    .into_iter()
    .filter_map(|k| {
        let mut pattern = vec![0x8c, k.len() as u8];
        pattern.extend_from_slice(k.as_bytes());
        bytes
            .windows(pattern.len())
            .position(|w| w == pattern.as_slice())
            .map(|at| (at, k))
    })
    .collect();
    found.sort();
    found.into_iter().map(|(_, k)| k.to_string()).collect()
}
