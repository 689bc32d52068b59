//! `workbook inspect` on the snapshot corpus (conformance/snapshots, written by
//! conformance/snapshot_corpus.py with Python's own pickle in the schemas torch wrote from 2.0 to
//! 2.15): every figure must be the one its independent reconstruction (MemoryViz.js's walk back
//! from the final segments, in Python) gives, in conformance/snapshots/expected.json; and the
//! edges (empty ranges, files without times, impossible sizes) are named.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn corpus(name: &str) -> String {
    repo(&format!("conformance/snapshots/{name}.pickle"))
        .display()
        .to_string()
}

fn workbook(args: &[&str]) -> (Output, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_workbook"))
        .args(args)
        .env_remove("GPUMEM_ALLOC_CONF")
        .output()
        .expect("workbook runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

fn inspect_json(name: &str) -> Value {
    let (o, out, err) = workbook(&["inspect", "--json", &corpus(name)]);
    assert!(o.status.success(), "{name}: {err}");
    serde_json::from_str(&out).expect("JSON")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(repo("conformance/snapshots/expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Compares one figure, naming the file, the device and both values.
fn same(file: &str, device: &Value, what: &str, got: &Value, want: &Value) -> Option<String> {
    let equal = match (got.as_f64(), want.as_f64()) {
        (Some(g), Some(w)) if got.is_f64() || want.is_f64() => (g - w).abs() <= 1e-9,
        _ => got == want,
    };
    (!equal)
        .then(|| format!("{file} device {device}: {what}: workbook {got}, reconstruction {want}"))
}

#[test]
fn every_figure_of_the_corpus_is_the_reconstructions() {
    let expected = expected();
    let mut problems = Vec::new();
    for (file, devices) in expected.as_object().unwrap() {
        let report = inspect_json(file);
        let got_devices = report["devices"].as_array().unwrap();
        let want_devices = devices.as_array().unwrap();
        assert_eq!(
            got_devices.len(),
            want_devices.len(),
            "{file}: devices reported"
        );
        for (got, want) in got_devices.iter().zip(want_devices) {
            let d = &want["device"];
            let pairs: [(&str, &Value, &Value); 14] = [
                ("device", &got["device"], &want["device"]),
                ("events", &got["events"], &want["events"]),
                ("history", &got["history"], &want["history"]),
                (
                    "peak allocated",
                    &got["peak_allocated"]["bytes"],
                    &want["peak_allocated"]["bytes"],
                ),
                (
                    "peak allocated's event",
                    &got["peak_allocated"]["event"],
                    &want["peak_allocated"]["event"],
                ),
                (
                    "peak reserved",
                    &got["peak_reserved"]["bytes"],
                    &want["peak_reserved"]["bytes"],
                ),
                (
                    "peak reserved's event",
                    &got["peak_reserved"]["event"],
                    &want["peak_reserved"]["event"],
                ),
                (
                    "reserved at the peak",
                    &got["reserved_at_peak"],
                    &want["reserved_at_peak"],
                ),
                (
                    "segments at the peak",
                    &got["segments_at_peak"],
                    &want["segments_at_peak"],
                ),
                (
                    "segments at the end",
                    &got["segments_at_end"],
                    &want["segments_at_end"],
                ),
                (
                    "reserved at the end",
                    &got["reserved_at_end"],
                    &want["reserved_at_end"],
                ),
                (
                    "allocated at the end",
                    &got["allocated_at_end"],
                    &want["allocated_at_end"],
                ),
                (
                    "out-of-memory entries",
                    &got["oom_count"],
                    &Value::from(want["ooms"].as_array().unwrap().len()),
                ),
                (
                    "free bytes by class at the peak",
                    &got["fragmentation"]["by_class"],
                    &want["fragmentation"]["by_class"],
                ),
            ];
            problems.extend(
                pairs
                    .iter()
                    .filter_map(|(what, g, w)| same(file, d, what, g, w)),
            );
            for key in [
                "largest_free_block",
                "reserved_minus_allocated",
                "viewer_fragmentation",
            ] {
                problems.extend(same(
                    file,
                    d,
                    key,
                    &got["fragmentation"][key],
                    &want["fragmentation"][key],
                ));
            }
            let got_ooms = got["ooms"].as_array().unwrap();
            for (i, want_oom) in want["ooms"].as_array().unwrap().iter().enumerate() {
                for (key, w) in want_oom.as_object().unwrap() {
                    let g = got_ooms.get(i).map_or(&Value::Null, |o| &o[key]);
                    problems.extend(same(file, d, &format!("oom {i} {key}"), g, w));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn segments_reserved_before_recording_count_at_the_peak() {
    let (o, out, err) = workbook(&["inspect", &corpus("pre-recording")]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(
            "at the allocated peak: 42.00 MiB reserved in 3 segments; 12.50 MiB allocated before \
             recording began"
        ),
        "{out}"
    );
    assert!(out.contains("largest free block        4.00 MiB"), "{out}");
    assert!(
        out.contains("peak reserved   106.00 MiB before the first event (when recording began)"),
        "{out}"
    );
}

#[test]
fn an_expandable_segment_that_ran_out_of_memory_adds_up() {
    let (o, out, err) = workbook(&["inspect", &corpus("expandable-oom")]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(
            "48.00 MiB was asked for; 60.00 MiB reserved (mapped pages of expandable segments) = \
             44.00 MiB held by live blocks (44.00 MiB asked for, 0 B rounding) + 16.00 MiB free in \
             the segments (largest piece 10.00 MiB); the device had 8.00 MiB more free."
        ),
        "{out}"
    );
    assert!(
        out.contains("24.00 MiB more would have had to be freed"),
        "{out}"
    );
    assert!(
        out.contains("at the end of the range: 60.00 MiB reserved in 2 segments"),
        "{out}"
    );
}

#[test]
fn state_only_snapshots_and_the_list_form_show_their_state() {
    for name in ["state-only", "list-form"] {
        let (o, out, err) = workbook(&["inspect", &corpus(name)]);
        assert!(o.status.success(), "{name}: {err}");
        assert!(
            out.contains("no history was recorded")
                && out.contains("torch.cuda.memory._record_memory_history()"),
            "{name}: {out}"
        );
        assert!(
            out.contains("state: 22.00 MiB reserved in 2 segments, 8.50 MiB allocated"),
            "{name}: {out}"
        );
        assert!(
            out.contains("largest free block        8.00 MiB"),
            "{name}: {out}"
        );
    }
}

#[test]
fn files_without_times_say_so() {
    for name in ["torch-2.0-block-history", "torch-2.1-no-time"] {
        let (o, out, err) = workbook(&["inspect", &corpus(name)]);
        assert!(o.status.success(), "{name}: {err}");
        assert!(
            out.contains("no timestamps in this file (torch 2.1 and older record no time_us)"),
            "{name}: {out}"
        );
        assert!(!out.contains("time_us 0"), "{name}: {out}");
    }
    let (o, _, err) = workbook(&[
        "inspect",
        &corpus("torch-2.1-no-time"),
        "--range",
        "1764000000000000us..1764000000000100us",
    ]);
    assert!(!o.status.success());
    assert!(
        err.contains("holds no event") && err.contains("no timestamps in this file"),
        "{err}"
    );
}

#[test]
fn an_empty_range_is_an_error_naming_the_files_extent() {
    let (o, out, err) = workbook(&["inspect", &corpus("pre-recording"), "--range", "50..60"]);
    assert!(!o.status.success(), "{out}");
    assert!(
        err.contains("--range from event 50 up to event 60 holds no event")
            && err.contains(
                "device 0 holds events 0..8, time_us 1764000000000000..=1764000000000070"
            ),
        "{err}"
    );
    let svg = std::env::temp_dir().join(format!("corpus-window-{}.svg", std::process::id()));
    let (o, _, err) = workbook(&[
        "viz",
        &corpus("pre-recording"),
        "--range",
        "50..60",
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(err.contains("holds no event"), "{err}");
}

#[test]
fn sizes_of_two_to_the_63_or_more_are_refused() {
    let (o, _, err) = workbook(&["inspect", &corpus("huge-size")]);
    assert!(!o.status.success());
    assert!(
        err.contains("'size' is 9223372036854775808 bytes, 2^63 or more"),
        "{err}"
    );
}

#[test]
fn the_state_before_the_first_entry_is_a_peak() {
    let report = inspect_json("two-devices");
    let d0 = &report["devices"][0];
    assert_eq!(d0["peak_allocated"]["bytes"], 1u64 << 30);
    assert_eq!(d0["peak_allocated"]["event"], Value::Null);
}

#[test]
fn replay_calls_a_state_only_snapshot_a_snapshot() {
    for name in ["state-only", "list-form"] {
        let (o, _, err) = workbook(&["replay", &corpus(name), "--repeat", "1"]);
        assert!(!o.status.success());
        assert!(
            err.contains("a snapshot with no allocations recorded (2 segment(s)")
                && err.contains("`workbook inspect` shows this file's state")
                && !err.contains("not a PyTorch memory snapshot"),
            "{name}: {err}"
        );
    }
}
