//! `workbook inspect` on snapshots torch really wrote on a GPU (conformance/real-snapshots: an
//! H100, torch 2.11.0+cu130, 2026-11-27, by bench/record_torch_snapshot.py), against the counters
//! torch printed in the same process right after each dump (`torch.cuda.memory_stats()`, in
//! torch-counters.json). The first three were recorded with `stacks="python"`, the rest with
//! torch's default (C++ frames too), an `empty_cache()`, and a fragmentation OOM.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance/real-snapshots")
}

/// `workbook inspect` on a file of the folder: the JSON report's first device, and the text.
fn inspect(file: &str) -> (Value, String) {
    let path = folder().join(file);
    let run = |json: bool| {
        let mut args = vec!["inspect"];
        if json {
            args.push("--json");
        }
        let output = Command::new(env!("CARGO_BIN_EXE_workbook"))
            .args(args)
            .arg(&path)
            .env_remove("GPUMEM_ALLOC_CONF")
            .output()
            .expect("workbook runs");
        assert!(
            output.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let report: Value = serde_json::from_str(&run(true)).expect("inspect --json prints JSON");
    (report["devices"][0].clone(), run(false))
}

fn counters() -> Vec<Value> {
    let text = std::fs::read_to_string(folder().join("torch-counters.json")).expect("counters");
    serde_json::from_str::<Vec<Value>>(&text).expect("a JSON list")
}

#[test]
fn inspect_ends_where_torchs_counters_ended() {
    let all = counters();
    assert_eq!(all.len(), 8, "eight recorded files");
    for c in &all {
        let file = c["file"].as_str().unwrap();
        let (d, _) = inspect(file);
        let expandable = c["mode"].as_str().unwrap().ends_with("-expandable");
        let pairs = [
            ("allocated_at_end", "allocated_bytes.all.current"),
            ("reserved_at_end", "reserved_bytes.all.current"),
            ("oom_count", "num_ooms"),
        ];
        for (ours, torchs) in pairs {
            assert_eq!(
                d[ours], c[torchs],
                "{file}: {ours} against torch's {torchs}"
            );
        }
        assert_eq!(
            d["peak_reserved"]["bytes"], c["reserved_bytes.all.peak"],
            "{file}: the reserved peak"
        );
        if expandable {
            // torch's segment counter leaves expandable segments out (it said 0 with 1.84 GiB
            // mapped); inspect counts each stream's reserved range.
            // inspect counts the mapped ranges, as torch's own `_snapshot()` lists them at the
            // end of the file (one per pool and stream, more where pages were unmapped between):
            // 2 in the OOM file, 8 in the fragmentation file, whose retry unmapped eight pages.
            assert_eq!(c["segment.all.current"], 0, "{file}");
            let ranges = if c["mode"] == "oom-expandable" { 2 } else { 8 };
            assert_eq!(d["segments_at_end"], ranges, "{file}: mapped ranges");
        } else {
            assert_eq!(
                d["segments_at_end"], c["segment.all.current"],
                "{file}: segments"
            );
        }
        // inspect counts the bytes asked for (as torch's _memory_viz.py does), torch's counter
        // the blocks' sizes rounded up to 512 B: the same at the out-of-memory peaks (every live
        // tensor a multiple of 512 B), 508 B apart at the training peak (a 4-byte loss).
        let ours = d["peak_allocated"]["bytes"].as_u64().unwrap();
        let torchs = c["allocated_bytes.all.peak"].as_u64().unwrap();
        assert!(
            ours <= torchs && torchs - ours < 512,
            "{file}: peak allocated {ours}, torch's {torchs}"
        );
    }
}

#[test]
fn an_oom_under_a_cap_is_blamed_on_the_cap_not_on_fragmentation() {
    for (file, what) in [
        ("h100-torch-2.11-oom.pickle", "segment"),
        ("h100-torch-2.11-oom-expandable.pickle", "pages"),
    ] {
        let (d, text) = inspect(file);
        assert_eq!(d["oom_count"], 1, "{file}");
        assert!(
            text.contains(&format!(
                "the driver was never short: a cap on this process refused the new {what}"
            )),
            "{file}: the device had 76.61 GiB free, torch's message said '2.00 GiB allowed':\n{text}"
        );
        assert!(
            !text.contains("not in one piece"),
            "{file}: not fragmentation:\n{text}"
        );
    }
}

#[test]
fn memory_from_before_the_recording_is_counted() {
    // The training file's 23 segments and 259.09 MiB of live blocks all predate its trace.
    let (d, text) = inspect("h100-torch-2.11-train.pickle");
    assert_eq!(d["segment_allocs"], 0);
    assert_eq!(d["segments_at_peak"], 23);
    assert_eq!(d["unrecorded_at_peak"], 271_679_488);
    assert!(
        text.contains("259.09 MiB allocated before recording began"),
        "{text}"
    );
}

/// `workbook replay` with `args`, its exit status, stdout and stderr.
fn replay(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_workbook"))
        .arg("replay")
        .args(args)
        .env_remove("GPUMEM_ALLOC_CONF")
        .output()
        .expect("workbook runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn path(file: &str) -> String {
    folder().join(file).display().to_string()
}

#[test]
fn a_replay_starts_where_the_recording_did_and_peaks_where_torch_did() {
    // The training file: 36 blocks older than its trace, allocated first; then the same peaks
    // as torch's counters, to the byte.
    let (ok, out, err) = replay(&[
        "--repeat",
        "1",
        "--json",
        &path("h100-torch-2.11-train.pickle"),
    ]);
    assert!(ok, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    let torch = &counters()[0];
    assert_eq!(torch["mode"], "train");
    assert_eq!(
        rows[0]["peak_allocated_bytes"],
        torch["allocated_bytes.all.peak"]
    );
    assert_eq!(
        rows[0]["peak_reserved_bytes"],
        torch["reserved_bytes.all.peak"]
    );
    assert!(
        rows[0]["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("36 blocks (323.12 MiB) held before recording began, allocated first"),
        "{out}"
    );
}

#[test]
fn a_job_that_ran_out_of_memory_runs_out_at_the_same_request_under_its_cap() {
    let oom = path("h100-torch-2.11-oom.pickle");
    // Under no limit the request fits, and the note says why.
    let (ok, out, err) = replay(&["--repeat", "1", &oom]);
    assert!(ok, "{err}");
    assert!(
        out.contains("(event 284, 192.00 MiB) fit here: this cpu replay has no capacity limit"),
        "{out}"
    );
    // Under the job's 2 GiB the same request fails, with torch's own numbers: 1.82 GiB allocated
    // and 18.88 MiB reserved but unallocated (torch-counters.json's message).
    let (ok, _, err) = replay(&["--repeat", "1", "--capacity", "2GiB", &oom]);
    assert!(!ok, "out of memory is an error of a plain replay");
    assert!(err.contains("the recording ran out of memory too"), "{err}");
    assert!(
        err.contains("event 284: Out of memory")
            && err.contains("1.82 GiB is allocated by gpumem, and 18.88 MiB is reserved"),
        "{err}"
    );
    let torch = &counters()[1];
    assert!(
        torch["oom"]
            .as_str()
            .unwrap()
            .contains("1.82 GiB is allocated by PyTorch, and 18.88 MiB is reserved")
    );
    // The what-if table marks it, and no setting saves a job over its cap.
    let (ok, out, err) = replay(&[
        "--capacity",
        "2GiB",
        "--alloc-conf",
        "",
        "--alloc-conf",
        "expandable_segments:True",
        &oom,
    ]);
    assert!(ok, "{err}");
    assert_eq!(out.matches("at 284, as recorded").count(), 2, "{out}");
    assert!(
        out.contains("the recording ran with allocator settings none (torch's defaults)"),
        "{out}"
    );
}

#[test]
fn a_replay_uses_the_settings_the_file_recorded() {
    let file = path("h100-torch-2.11-oom-expandable.pickle");
    let (ok, out, err) = replay(&["--repeat", "1", &file]);
    assert!(ok, "{err}");
    assert!(
        out.contains("allocator settings: expandable_segments:True (the file's)"),
        "{out}"
    );
}

#[test]
fn replaying_one_setting_gives_the_peak_torch_reserved_under_the_other() {
    // The expandable-segments job, replayed under its own setting and under torch's defaults,
    // reserves at its peak what torch reserved in each of the two real runs (same program, same
    // cap), to the byte.
    let (ok, out, err) = replay(&[
        "--json",
        "--capacity",
        "2GiB",
        "--alloc-conf",
        "",
        "--alloc-conf",
        "expandable_segments:True",
        &path("h100-torch-2.11-oom-expandable.pickle"),
    ]);
    assert!(ok, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    let torch = counters();
    let peak = |mode: &str| {
        torch.iter().find(|c| c["mode"] == mode).expect("a run")["reserved_bytes.all.peak"].clone()
    };
    assert_eq!(rows[0]["alloc_conf"], "");
    assert_eq!(rows[0]["peak_reserved_bytes"], peak("oom"));
    assert_eq!(rows[1]["peak_reserved_bytes"], peak("oom-expandable"));
    for row in &rows {
        assert_eq!(
            row["peak_allocated_bytes"],
            torch[1]["allocated_bytes.all.peak"]
        );
    }
}

#[test]
fn sites_are_lines_of_the_users_script_not_torchs_modules() {
    // torch recorded each block's Python stack from torch/nn/modules/linear.py up; the user's
    // lines are bench/record_torch_snapshot.py's (the backward pass's blocks, allocated on
    // autograd's thread, have no Python frames).
    let (d, text) = inspect("h100-torch-2.11-train.pickle");
    let sites = d["sites"].as_array().unwrap();
    assert!(!sites.is_empty());
    for s in sites {
        let frames = s["frames"].as_array().unwrap();
        if let Some(first) = frames.first() {
            let first = first.as_str().unwrap();
            assert!(
                first.starts_with("/work/main/bench/record_torch_snapshot.py:")
                    && first.ends_with(":step"),
                "{first}"
            );
        }
    }
    assert!(
        !text.contains("linear.py") && !text.contains("module.py:"),
        "torch's own frames are left out:\n{text}"
    );
    assert!(text.contains("record_torch_snapshot.py:45:step"), "{text}");
}

#[test]
fn blocks_from_before_recording_and_blocks_without_frames_are_two_sites() {
    // 28 blocks predate the trace (the file holds no stack for them); 8 were allocated by the
    // backward pass on autograd's thread, where torch records no Python frame.
    let (_, text) = inspect("h100-torch-2.11-oom-expandable.pickle");
    assert!(
        text.contains("    259.09 MiB        28  (allocated before recording began)")
            && text.contains("     64.03 MiB         8  (no frames recorded)"),
        "{text}"
    );
}

#[test]
fn a_fragmentation_oom_is_named_so_and_replays_with_torchs_numbers() {
    // The `frag` program (bench/record_torch_snapshot.py): under a 2 GiB cap, every other 30 MiB
    // block freed between live 64 MiB ones; 160 MiB then fails with 272 MiB free in pieces.
    let frag = path("h100-torch-2.11-frag.pickle");
    let torch = counters();
    let run = |mode: &str| {
        torch
            .iter()
            .find(|c| c["mode"] == mode)
            .expect("a run")
            .clone()
    };
    let message = run("frag")["oom"].as_str().unwrap().to_string();
    assert!(message.contains("1.61 GiB is allocated by PyTorch, and 272.00 MiB is reserved"));
    let (d, text) = inspect("h100-torch-2.11-frag.pickle");
    assert_eq!(d["oom_count"], 1);
    assert!(
        text.contains("+ 272.00 MiB free in the segments (largest piece 32.00 MiB)")
            && text.contains("Fragmentation: more than was asked was free in the cached segments"),
        "{text}"
    );
    // Replayed under the job's cap, the same request fails with the numbers of torch's message.
    let (ok, _, err) = replay(&["--repeat", "1", "--capacity", "2GiB", &frag]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("event 48: Out of memory")
            && err.contains("Tried to allocate 160.00 MiB")
            && err.contains("1.61 GiB is allocated by gpumem, and 272.00 MiB is reserved"),
        "{err}"
    );
    // With expandable segments it fits, as it did when torch ran the same program with that
    // setting (`frag-expandable`: no OOM), at the allocated peak torch counted.
    let (ok, out, err) = replay(&[
        "--repeat",
        "1",
        "--capacity",
        "2GiB",
        "--alloc-conf",
        "expandable_segments:True",
        "--json",
        &frag,
    ]);
    assert!(ok, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    let expandable = run("frag-expandable");
    assert_eq!(expandable["num_ooms"], 0);
    assert_eq!(rows[0]["oom_at_event"], Value::Null, "{out}");
    assert_eq!(
        rows[0]["peak_allocated_bytes"],
        expandable["allocated_bytes.all.peak"]
    );
}

#[test]
fn the_real_expandable_run_replays_without_running_out() {
    // torch's own run of the same program with `expandable_segments:True`: its retry unmapped
    // eight free 20 MiB pages and mapped the 160 MiB; the replay, under the file's setting and
    // the same cap, fits too and ends with what torch held.
    let file = path("h100-torch-2.11-frag-expandable.pickle");
    let (ok, out, err) = replay(&["--repeat", "1", "--capacity", "2GiB", "--json", &file]);
    assert!(ok, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    assert_eq!(rows[0]["allocator_settings"], "expandable_segments:True");
    assert_eq!(rows[0]["num_alloc_retries"], 1, "{out}");
    let (d, text) = inspect("h100-torch-2.11-frag-expandable.pickle");
    assert_eq!(d["oom_count"], 0);
    assert!(
        text.contains("allocator settings: expandable_segments:True"),
        "{text}"
    );
}

#[test]
fn an_empty_cache_inside_the_recording_is_replayed() {
    // `empty-cache`: torch.cuda.empty_cache() between two steps freed segments with no block
    // freed; the replay does the same and peaks where torch's counters did, to the byte.
    let (ok, out, err) = replay(&[
        "--repeat",
        "1",
        "--json",
        &path("h100-torch-2.11-empty-cache.pickle"),
    ]);
    assert!(ok, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    let torch = counters();
    let c = torch.iter().find(|c| c["mode"] == "empty-cache").unwrap();
    assert_eq!(rows[0]["peak_reserved_bytes"], c["reserved_bytes.all.peak"]);
    assert_eq!(
        rows[0]["peak_allocated_bytes"],
        c["allocated_bytes.all.peak"]
    );
    let notes = rows[0]["notes"].to_string();
    assert!(notes.contains("1 empty_cache() call replayed"), "{notes}");
}

#[test]
fn cpp_stacks_show_the_users_line_or_the_operator_never_the_allocator() {
    // torch's default `stacks="all"`: every stack starts in torch's C++ allocator. A block with
    // a Python frame is shown at the script's line; one allocated by the backward pass on
    // autograd's thread (no Python frame) at the operator autograd ran (`at::_ops::mm::call`,
    // `sum_dim_IntList`), so that the two are two sites.
    for file in [
        "h100-torch-2.11-train-cpp.pickle",
        "h100-torch-2.11-oom-cpp.pickle",
    ] {
        let (d, text) = inspect(file);
        let firsts: Vec<String> = d["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["frames"][0].as_str().map(str::to_string))
            .collect();
        assert!(firsts.len() >= 3, "{file}: {firsts:?}");
        for first in &firsts {
            assert!(
                first.contains("record_torch_snapshot.py:") || first.contains("at::_ops::"),
                "{file}: {first}"
            );
        }
        assert!(
            firsts.iter().any(|f| f.contains("at::_ops::mm::call")),
            "{file}: {firsts:?}"
        );
        assert!(!text.contains("CachingAllocator"), "{file}:\n{text}");
    }
}
