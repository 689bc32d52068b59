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

/// Writes a snapshot pickle made by `code`, Python that builds `snap` with the corpus script's
/// helpers (conformance/snapshot_corpus.py: `frame`, `History`, `block`, `segment`, `snapshot`).
fn pickle_of(dir: &Path, name: &str, code: &str) -> String {
    let out = dir.join(format!("{name}.pickle"));
    let script = format!(
        "import pickle, sys\nsys.path.insert(0, {conformance:?})\nfrom snapshot_corpus import *\n\
         {code}\npickle.dump(snap, open({out:?}, 'wb'))\n",
        conformance = repo("conformance").display().to_string(),
        out = out.display().to_string(),
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .status()
        .expect("python3 runs");
    assert!(status.success(), "{script}");
    out.display().to_string()
}

#[test]
fn sites_are_the_users_lines_not_torchs_allocator_frames() {
    // Recorded with torch's default stacks: each stack starts with torch's C++ allocator and
    // torch/nn/modules/linear.py; the two 12 MiB blocks come from model.py lines 41 and 57.
    let report = inspect_json("cpp-frames");
    let sites: Vec<(Value, Value)> = report["devices"][0]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["frames"].clone(), s["bytes"].clone()))
        .collect();
    assert_eq!(
        sites,
        vec![
            (
                serde_json::json!(["/home/u/proj/model.py:41:forward"]),
                Value::from(12u64 << 20)
            ),
            (
                serde_json::json!(["/home/u/proj/model.py:57:forward"]),
                Value::from(12u64 << 20)
            ),
        ],
        "two user lines, two sites"
    );
    let (o, out, err) = workbook(&["inspect", &corpus("cpp-frames"), "--frames", "2"]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("     12.00 MiB         1  model.py:41:forward ← train.py:12:step")
            && out.contains("     12.00 MiB         1  model.py:57:forward ← train.py:12:step"),
        "{out}"
    );
    assert!(
        !out.contains("CUDACachingAllocator") && !out.contains("linear.py"),
        "torch's own frames are left out:\n{out}"
    );
}

#[test]
fn two_files_of_one_name_print_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let file = pickle_of(
        dir.path(),
        "same-name",
        "A = 0x7F0000000000\n\
         a = [frame('/home/u/a/model.py', 41, 'forward')]\n\
         b = [frame('/home/u/b/model.py', 41, 'forward')]\n\
         h = History()\n\
         h.add('segment_alloc', A, 20 * MIB, a)\n\
         h.add('alloc', A, 8 * MIB, a)\n\
         h.add('alloc', A + 8 * MIB, 8 * MIB, b)\n\
         snap = snapshot([segment(A, [block(A, 8 * MIB, 8 * MIB, 'active_allocated', a), \
         block(A + 8 * MIB, 8 * MIB, 8 * MIB, 'active_allocated', b), \
         block(A + 16 * MIB, 4 * MIB, 0, 'inactive')])], [h.entries])",
    );
    let (o, out, err) = workbook(&["inspect", &file]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("8.00 MiB         1  /home/u/a/model.py:41:forward")
            && out.contains("8.00 MiB         1  /home/u/b/model.py:41:forward"),
        "{out}"
    );
}

#[test]
fn diff_matches_sites_by_the_users_line_whatever_torchs_frames() {
    // The same program under two torch versions: linear.py's line and the allocator's C++
    // function differ, the user's line does not. Only the site whose bytes changed is listed.
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str, torch_line: u32, cpp: &str, data_mib: u32| {
        pickle_of(
            dir.path(),
            name,
            &format!(
                "A = 0x7F0000000000\n\
                 torch = [frame('??', 0, 'torch::unwind::unwind()'), \
                 frame('/pytorch/c10/cuda/CUDACachingAllocator.cpp', 0, '{cpp}'), \
                 frame('/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py', \
                 {torch_line}, 'forward')]\n\
                 fwd = torch + [frame('/home/u/proj/model.py', 41, 'forward')]\n\
                 data = torch + [frame('/home/u/proj/data.py', 8, 'load')]\n\
                 h = History()\n\
                 h.add('segment_alloc', A, 40 * MIB, fwd)\n\
                 h.add('alloc', A, 12 * MIB, fwd)\n\
                 h.add('alloc', A + 12 * MIB, {data_mib} * MIB, data)\n\
                 snap = snapshot([segment(A, [block(A, 12 * MIB, 12 * MIB, 'active_allocated', \
                 fwd), block(A + 12 * MIB, {data_mib} * MIB, {data_mib} * MIB, \
                 'active_allocated', data), block(A + (12 + {data_mib}) * MIB, \
                 (28 - {data_mib}) * MIB, 0, 'inactive')])], [h.entries])"
            ),
        )
    };
    let a = make("a", 125, "DeviceCachingAllocator::malloc", 4);
    let b = make("b", 134, "NativeCachingAllocator::malloc", 6);
    let (o, out, err) = workbook(&["diff", &a, &b, "--json"]);
    assert!(o.status.success(), "{err}");
    let d: Value = serde_json::from_str(&out).unwrap();
    let sites = d["devices"][0]["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{out}");
    assert_eq!(
        sites[0]["frames"],
        serde_json::json!(["/home/u/proj/data.py:8:load"])
    );
    assert_eq!(sites[0]["bytes"]["change"], 2 << 20);
}

#[test]
fn inspect_reports_every_device_by_default_and_one_with_device() {
    let (o, out, err) = workbook(&["inspect", &corpus("two-devices")]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(
            "reported: devices 0, 1: every device with entries or segments (--device N for one)"
        ),
        "{out}"
    );
    let report: Value = {
        let (o, out, err) =
            workbook(&["inspect", "--json", "--device", "1", &corpus("two-devices")]);
        assert!(o.status.success(), "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let devices = report["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["device"], 1);
    assert_eq!(
        devices[0]["peak_allocated"]["bytes"],
        10u64 * (1 << 30) + (512 << 20)
    );
    assert_eq!(
        report["device_choice"],
        "device 1 (--device 1; the file has devices 0, 1)"
    );
}

#[test]
fn a_device_the_file_does_not_have_is_an_error_naming_those_it_has() {
    let svg = std::env::temp_dir().join(format!("corpus-device-{}.svg", std::process::id()));
    let file = corpus("two-devices");
    for args in [
        vec!["inspect", &file, "--device", "2"],
        vec!["diff", &file, &file, "--device", "2"],
        vec!["viz", &file, "--device", "2", "-o", svg.to_str().unwrap()],
        vec!["replay", &file, "--snapshot-device", "2", "--repeat", "1"],
    ] {
        let (o, _, err) = workbook(&args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            err.contains("the snapshot holds nothing on device 2; it has devices 0, 1"),
            "{args:?}: {err}"
        );
    }
    assert!(!svg.exists(), "nothing drawn");
}

#[test]
fn viz_and_replay_take_the_device_with_the_largest_peak_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = corpus("two-devices");
    let svg = dir.path().join("two.svg");
    let (o, out, err) = workbook(&["viz", &file, "-o", svg.to_str().unwrap()]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(
            "drew device 1: its allocated peak (10.50 GiB) is the largest of devices 0, 1 \
             (--device N for another)"
        ),
        "{out}"
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("peak allocated 10.5 GiB"), "device 1 drawn");
    let (o, out, err) = workbook(&["viz", &file, "--device", "0", "-o", svg.to_str().unwrap()]);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("drew device 0 (--device 0)"), "{out}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("peak allocated 1 GiB"), "device 0 drawn");

    let (o, out, err) = workbook(&["replay", &file, "--repeat", "1", "--json"]);
    assert!(o.status.success(), "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 1, "one device replayed");
    assert_eq!(
        rows[0]["peak_allocated_bytes"],
        10u64 * (1 << 30) + (512 << 20)
    );
    let notes: Vec<&str> = rows[0]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.contains(
            &"replayed device 1: its allocated peak (10.50 GiB) is the largest of devices 0, 1 \
              (--snapshot-device N for another)"
        ),
        "{notes:?}"
    );
    let (o, out, err) = workbook(&["replay", &file, "--repeat", "1", "--snapshot-device", "0"]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("two-devices:cuda:0: replayed device 0 (--snapshot-device 0)"),
        "{out}"
    );
}

#[test]
fn diff_compares_every_device_both_files_hold() {
    let file = corpus("two-devices");
    let (o, out, err) = workbook(&["diff", &file, &file, "--json"]);
    assert!(o.status.success(), "{err}");
    let d: Value = serde_json::from_str(&out).unwrap();
    let devices: Vec<&Value> = d["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["device"])
        .collect();
    assert_eq!(devices, [&Value::from(0), &Value::from(1)]);
    let (o, out, err) = workbook(&["diff", &file, &file, "--device", "1"]);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("compared: device 1 (--device 1)"), "{out}");
    assert!(
        out.contains("peak allocated                   10.50 GiB     10.50 GiB             0"),
        "{out}"
    );
}

#[test]
fn an_oom_from_fragmentation_under_a_cap_is_called_fragmentation() {
    // 272 MiB free in the first segment's holes, 160 MiB asked, no piece over 32 MiB; the device
    // had 76.61 GiB free, so a cap refused the new segment. Both are said, fragmentation first.
    let (o, out, err) = workbook(&["inspect", &corpus("frag-oom")]);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(
            "160.00 MiB was asked for; 1.88 GiB reserved = 1.61 GiB held by live blocks (1.61 GiB \
             asked for, 0 B rounding) + 272.00 MiB free in the segments (largest piece 32.00 \
             MiB); the device had 76.61 GiB more free. Fragmentation: more than was asked was \
             free in the cached segments, but not in one piece"
        ) && out.contains("a cap on this process refused the new memory")
            && out.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets torch unmap"),
        "{out}"
    );
}

#[test]
fn a_replay_of_the_fragmentation_oom_fails_as_recorded_and_fits_with_expandable_segments() {
    let file = corpus("frag-oom");
    // Under the job's 2 GiB, torch's defaults fail at the recorded request, with the numbers
    // torch's message gives for this state.
    let (o, _, err) = workbook(&["replay", &file, "--repeat", "1", "--capacity", "2GiB"]);
    assert!(!o.status.success());
    assert!(
        err.contains("Tried to allocate 160.00 MiB")
            && err.contains("1.61 GiB is allocated by gpumem, and 272.00 MiB is reserved by gpumem but unallocated"),
        "{err}"
    );
    let (o, out, err) = workbook(&[
        "replay",
        &file,
        "--capacity",
        "2GiB",
        "--alloc-conf",
        "",
        "--alloc-conf",
        "expandable_segments:True",
        "--json",
    ]);
    assert!(o.status.success(), "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["alloc_conf"], "");
    assert!(rows[0]["oom_at_event"].is_u64(), "{out}");
    assert_eq!(rows[1]["alloc_conf"], "expandable_segments:True");
    assert_eq!(rows[1]["oom_at_event"], Value::Null, "{out}");
}
