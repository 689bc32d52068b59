//! `workbook replay` on a committed trace and on small traces whose numbers follow from the
//! allocator's rules; malformed traces fail with the event named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A committed trace under bench/traces/.
fn committed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/traces")
        .join(name)
}

/// Runs `workbook replay` with `args`; returns the output and its stdout and stderr as text.
fn replay(args: &[&str]) -> (Output, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_workbook"))
        .arg("replay")
        .args(args)
        .env_remove("GPUMEM_ALLOC_CONF")
        .output()
        .expect("workbook runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

/// `--json` output for one trace, parsed.
fn replay_json(path: &Path) -> serde_json::Value {
    let (output, stdout, stderr) = replay(&[
        path.to_str().expect("a UTF-8 path"),
        "--json",
        "--repeat",
        "2",
    ]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{stdout}");
    list[0].clone()
}

fn write_trace(dir: &tempfile::TempDir, name: &str, events: &str) -> PathBuf {
    let path = dir.path().join(name);
    let text = format!(
        "{{\"format\": \"gpumem-alloc-trace\", \"version\": 1, \"description\": \"test\",\n\"events\": [\n{events}\n]}}"
    );
    std::fs::write(&path, text).expect("a trace file");
    path
}

#[test]
fn replay_of_a_committed_trace_gives_the_peaks_the_rules_give() {
    let r = replay_json(&committed("interleaved-lifetimes.json"));
    assert_eq!(r["trace"], "interleaved-lifetimes");
    assert_eq!(r["allocator"], "gpumem");
    assert_eq!(r["device"], "cpu");
    assert_eq!(r["events"], 3000);
    assert_eq!(r["peak_requested_bytes"], 125_222_856);
    assert_eq!(r["peak_allocated_bytes"], 132_213_248);
    assert_eq!(r["peak_reserved_bytes"], 176_160_768); // 168 MiB
    assert_eq!(r["num_device_alloc"], 12);
    assert_eq!(r["num_device_free"], 0);
    let ratio = r["reserved_over_requested"].as_f64().expect("a number");
    assert_eq!(ratio, 176_160_768.0 / 125_222_856.0);
}

#[test]
fn replays_of_a_trace_with_address_ties_agree() {
    // transformer-step's decisions depend on which of two equal cached blocks has the lower
    // address; on host malloc addresses two replays once differed (84 and 85 device reservations).
    // The default 5 replays each run on a fresh cpu device and must give the same counts.
    let path = committed("transformer-step.json");
    let (output, stdout, stderr) = replay(&[path.to_str().expect("a UTF-8 path"), "--json"]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let r = &list[0];
    assert_eq!(r["trace"], "transformer-step");
    assert_eq!(r["events"], 5924);
    assert_eq!(r["peak_requested_bytes"], 2_236_760_068_u64);
    assert_eq!(r["peak_allocated_bytes"], 2_244_100_608_u64);
    assert_eq!(r["peak_reserved_bytes"], 2_489_319_424_u64);
    assert_eq!(r["num_device_alloc"], 85);
    assert_eq!(r["num_device_free"], 0);
}

#[test]
fn replay_follows_the_pools_segments_and_best_fit() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // 1000 B: the small pool, one 2 MiB segment. 5 MiB: a 20 MiB segment, split (15 MiB left).
    // 12 MiB + 1 (a block of 12 MiB + 512): best fit takes the 15 MiB left, no new segment.
    // Freeing 5 MiB leaves holes of 5 MiB and 3 MiB - 512: 8 MiB fits neither, so a new 20 MiB
    // segment (12 MiB left). Another 12 MiB + 512 fits nowhere: its own segment, rounded up to
    // 2 MiB: 14 MiB.
    let path = write_trace(
        &dir,
        "rules.json",
        r#"{"op":"alloc","id":0,"size":1000},
           {"op":"alloc","id":1,"size":5242880},
           {"op":"alloc","id":2,"size":12582913},
           {"op":"free","id":1},
           {"op":"alloc","id":3,"size":8388608},
           {"op":"alloc","id":4,"size":12582913},
           {"op":"free","id":0},
           {"op":"free","id":2},
           {"op":"free","id":3},
           {"op":"free","id":4}"#,
    );
    let r = replay_json(&path);
    assert_eq!(r["events"], 10);
    assert_eq!(
        r["peak_requested_bytes"],
        1000 + 2 * ((12 << 20) + 1) + (8 << 20)
    );
    assert_eq!(
        r["peak_allocated_bytes"],
        1024 + 2 * ((12 << 20) + 512) + (8 << 20)
    );
    assert_eq!(r["peak_reserved_bytes"], (2 + 20 + 20 + 14) << 20);
    assert_eq!(r["num_device_alloc"], 4);
}

#[test]
fn a_capacity_too_small_for_the_trace_names_the_event() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_trace(
        &dir,
        "big.json",
        r#"{"op":"alloc","id":0,"size":1000},
           {"op":"alloc","id":1,"size":33554432}"#,
    );
    let (output, stdout, stderr) = replay(&[
        path.to_str().unwrap(),
        "--capacity",
        "16MiB",
        "--repeat",
        "1",
    ]);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("event 1:"), "{stderr}");
    assert!(stderr.to_lowercase().contains("out of memory"), "{stderr}");
}

#[test]
fn the_table_has_every_column() {
    let (output, stdout, stderr) = replay(&[
        committed("ch05-full-batch-f32.json").to_str().unwrap(),
        "--repeat",
        "1",
    ]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for column in [
        "peak requested",
        "peak allocated",
        "peak reserved",
        "reserved/requested",
        "device allocs",
        "ns/event",
        "ch05-full-batch-f32",
    ] {
        assert!(stdout.contains(column), "missing {column:?} in:\n{stdout}");
    }
}

#[test]
fn a_malformed_trace_fails_naming_the_file_and_the_event() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_trace(
        &dir,
        "double.json",
        r#"{"op":"alloc","id":4,"size":512},
           {"op":"free","id":4},
           {"op":"free","id":4}"#,
    );
    let (output, stdout, stderr) = replay(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("double.json"), "{stderr}");
    assert!(
        stderr.contains("event 2: double free of id 4 (event 1 already freed it)"),
        "{stderr}"
    );

    let path = write_trace(
        &dir,
        "syntax.json",
        r#"{"op":"alloc","id":4,"size":512},
           {"op":"free" "id":4}"#,
    );
    let (output, _, stderr) = replay(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("malformed trace JSON: event 1:"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_device_is_refused() {
    let (output, _, stderr) = replay(&[
        committed("ch05-full-batch-f32.json").to_str().unwrap(),
        "--device",
        "tpu",
    ]);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("expected cpu, cuda or cuda:N"), "{stderr}");
    if !gpumem::cuda::is_available() {
        let (output, _, stderr) = replay(&[
            committed("ch05-full-batch-f32.json").to_str().unwrap(),
            "--device",
            "cuda",
        ]);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cuda:0"), "{stderr}");
    }
}

/// The fragmentation case of chapter 10's kind: a cached 100 MiB segment split by 30 MiB, then
/// 80 MiB on a 120 MiB device. Torch's defaults run out of memory with 90 MiB free in all; a
/// max_split_size keeps the big block whole; an expandable segment grows behind the free part.
fn fragmenting_trace(dir: &tempfile::TempDir) -> PathBuf {
    write_trace(
        dir,
        "fragmenting.json",
        r#"{"op":"alloc","id":0,"size":104857600},
           {"op":"free","id":0},
           {"op":"alloc","id":1,"size":31457280},
           {"op":"alloc","id":2,"size":83886080},
           {"op":"free","id":1},
           {"op":"free","id":2}"#,
    )
}

#[test]
fn what_if_compares_settings_side_by_side() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = fragmenting_trace(&dir);
    let (output, stdout, stderr) = replay(&[
        path.to_str().expect("a UTF-8 path"),
        "--capacity",
        "120MiB",
        "--json",
        "--alloc-conf",
        "",
        "--alloc-conf",
        "max_split_size_mb:64",
        "--alloc-conf",
        "expandable_segments:True",
    ]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let rows = rows.as_array().expect("a list");
    assert_eq!(rows.len(), 3);
    let mib = |n: u64| serde_json::Value::from(n << 20);
    // Defaults: out of memory at the 80 MiB request (event 3), after the one retry.
    assert_eq!(rows[0]["alloc_conf"], "");
    assert_eq!(rows[0]["oom_at_event"], 3);
    assert_eq!(rows[0]["num_alloc_retries"], 1);
    assert_eq!(rows[0]["peak_reserved_bytes"], mib(100));
    // max_split_size_mb:64: the 30 MiB request gets its own segment once the oversize 100 MiB
    // block is released; 80 MiB then fits beside it.
    assert_eq!(rows[1]["oom_at_event"], serde_json::Value::Null);
    assert_eq!(rows[1]["peak_reserved_bytes"], mib(110));
    assert_eq!(rows[1]["num_alloc_retries"], 0);
    // Expandable segments: one more 20 MiB page behind the free 70 MiB.
    assert_eq!(rows[2]["oom_at_event"], serde_json::Value::Null);
    assert_eq!(rows[2]["peak_reserved_bytes"], mib(120));
    assert_eq!(rows[2]["peak_allocated_bytes"], mib(110));
    assert_eq!(rows[2]["reserved_over_requested"], 120.0 / 110.0);
}

#[test]
fn what_if_prints_one_row_per_setting_with_every_column() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = fragmenting_trace(&dir);
    let (output, stdout, stderr) = replay(&[
        path.to_str().expect("a UTF-8 path"),
        "--capacity",
        "120MiB",
        "--alloc-conf",
        "",
        "--alloc-conf",
        "expandable_segments:True",
        "--alloc-conf",
        "release_lock_on_cudamalloc:True",
    ]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for column in [
        "setting",
        "peak allocated",
        "peak reserved",
        "reserved/requested",
        "out of memory",
        "retries",
    ] {
        assert!(stdout.contains(column), "{column}: {stdout}");
    }
    let line = |start: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no row {start}: {stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line("(torch's defaults)"),
        "(torch's defaults) 100.00 MiB 100.00 MiB 1.000 at event 3 1"
    );
    assert_eq!(
        line("expandable_segments:True"),
        "expandable_segments:True 110.00 MiB 120.00 MiB 1.091 no 0"
    );
    assert!(
        stdout.contains("note (release_lock_on_cudamalloc:True)"),
        "{stdout}"
    );
}

#[test]
fn what_if_with_a_bad_setting_names_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = fragmenting_trace(&dir);
    let (output, stdout, stderr) = replay(&[
        path.to_str().expect("a UTF-8 path"),
        "--alloc-conf",
        "max_split_size_mb:8",
    ]);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stderr.contains("--alloc-conf \"max_split_size_mb:8\"")
            && stderr.contains("max_split_size_mb too small, must be >= 20"),
        "{stderr}"
    );
}

#[test]
fn what_if_garbage_collection_needs_a_memory_fraction() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Two cached blocks (30 and 24 MiB), then 40 MiB: past half of 100 MiB, collection releases
    // both before reserving; without a fraction nothing is collected.
    let path = write_trace(
        &dir,
        "gc.json",
        r#"{"op":"alloc","id":0,"size":31457280},
           {"op":"alloc","id":1,"size":25165824},
           {"op":"free","id":0},
           {"op":"free","id":1},
           {"op":"alloc","id":2,"size":41943040},
           {"op":"free","id":2}"#,
    );
    let peak = |fraction: Option<&str>| {
        let mut args = vec![
            path.to_str().expect("a UTF-8 path"),
            "--capacity",
            "100MiB",
            "--json",
            "--alloc-conf",
            "garbage_collection_threshold:0.5",
        ];
        if let Some(f) = fraction {
            args.extend(["--memory-fraction", f]);
        }
        let (output, stdout, stderr) = replay(&args);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        let rows: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        rows[0]["peak_reserved_bytes"].as_u64().expect("a number")
    };
    assert_eq!(peak(None), 94 << 20);
    assert_eq!(peak(Some("1.0")), 54 << 20);
}
