//! `workbook inspect` and `workbook diff` on snapshots whose every figure is known: the hand-made
//! history of `bench/make_big_snapshot.py fixture`, written by Python's own pickle in torch 2.15's
//! schema at protocols 2 to 5, gpumem's own snapshot (JSON) and a gpumem trace; and bad files,
//! each named with its problem. (No snapshot recorded by torch on a GPU: there is none here.)

use gpumem::allocator::StreamId;
use gpumem::backend_cpu::CpuBackend;
use gpumem::{AllocatorConfig, CachingAllocator};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const T0: u64 = 1_764_000_000_000_000;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
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

/// The fixture snapshot (`before` or `after`) at a pickle protocol, in `dir`.
fn fixture(dir: &Path, variant: &str, protocol: u8) -> PathBuf {
    let out = dir.join(format!("{variant}-{protocol}.pickle"));
    let status = Command::new("python3")
        .arg(repo("bench/make_big_snapshot.py"))
        .args(["fixture", out.to_str().unwrap(), "--variant", variant])
        .args(["--protocol", &protocol.to_string()])
        .status()
        .expect("python3 runs");
    assert!(status.success());
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..2], &[0x80, protocol], "pickle protocol {protocol}");
    out
}

fn json(args: &[&str]) -> Value {
    let (o, out, err) = workbook(args);
    assert!(o.status.success(), "{err}");
    serde_json::from_str(&out).expect("JSON")
}

fn frames(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect()
}

// The first user frame of each site (the default `--frames 1`): the optimizer's blocks are
// allocated in torch/optim/adam.py, torch's own, so their site is the user's line that called it.
const FWD: [&str; 1] = ["model.py:41:forward"];
const OPT: [&str; 1] = ["train.py:14:step"];
const DATA: [&str; 1] = ["data.py:8:load"];

#[test]
fn inspect_reports_every_figure_of_the_fixture_at_protocols_2_to_5() {
    let dir = tempfile::tempdir().unwrap();
    for protocol in 2..=5 {
        let path = fixture(dir.path(), "before", protocol);
        let r = json(&["inspect", path.to_str().unwrap(), "--json"]);
        assert_eq!(r["alloc_conf"], "");
        let d = &r["devices"][0];
        assert_eq!(r["devices"].as_array().unwrap().len(), 1);
        assert_eq!(d["device"], 0);
        assert_eq!(d["events"], 12);
        assert_eq!(d["events_in_range"], 12);
        assert_eq!((&d["allocs"], &d["frees"]), (&5.into(), &2.into()));
        assert_eq!(
            (&d["segment_allocs"], &d["segment_frees"]),
            (&2.into(), &0.into())
        );
        assert_eq!(d["time_us"], serde_json::json!([T0, T0 + 110]));
        // Allocated peaks after event 5 (8 + 4 + 6 MiB + 512 KiB); reserved first reaches
        // 20 + 2 MiB at event 4.
        assert_eq!(
            d["peak_allocated"],
            serde_json::json!({"bytes": 18 * MIB + 512 * KIB, "event": 5, "time_us": T0 + 50})
        );
        assert_eq!(
            d["peak_reserved"],
            serde_json::json!({"bytes": 22 * MIB, "event": 4, "time_us": T0 + 40})
        );
        assert_eq!(d["reserved_at_peak"], 22 * MIB);
        assert_eq!(d["segments_at_peak"], 2);
        assert_eq!(d["unrecorded_at_peak"], 0);
        let blocks: Vec<(u64, u64, Vec<&str>)> = d["largest_blocks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["size"].as_u64().unwrap(),
                    b["allocated_at"].as_u64().unwrap(),
                    frames(&b["frames"]),
                )
            })
            .collect();
        assert_eq!(
            blocks,
            vec![
                (8 * MIB, 1, FWD.to_vec()),
                (6 * MIB, 3, FWD.to_vec()),
                (4 * MIB, 2, OPT.to_vec()),
                (512 * KIB, 5, DATA.to_vec()),
            ]
        );
        let sites: Vec<(u64, u64, Vec<&str>)> = d["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["bytes"].as_u64().unwrap(),
                    s["blocks"].as_u64().unwrap(),
                    frames(&s["frames"]),
                )
            })
            .collect();
        assert_eq!(
            sites,
            vec![
                (14 * MIB, 2, FWD.to_vec()),
                (4 * MIB, 1, OPT.to_vec()),
                (512 * KIB, 1, DATA.to_vec()),
            ]
        );
        assert_eq!(d["site_count"], 3);
        let f = &d["fragmentation"];
        assert_eq!(f["reserved_minus_allocated"], 3 * MIB + 512 * KIB);
        // The 20 MiB segment's free tail (18..20 MiB); the 2 MiB one has 1.5 MiB free.
        assert_eq!(f["largest_free_block"], 2 * MIB);
        assert_eq!(
            f["by_class"],
            serde_json::json!([
                {"class": "2 MiB", "segments": 1, "reserved": 2 * MIB, "free": 1536 * KIB},
                {"class": "20 MiB", "segments": 1, "reserved": 20 * MIB, "free": 2 * MIB},
            ])
        );
        // MemoryViz.js: (2 MiB² + 1.5 MiB²) / 22 MiB² = 6.25 / 484.
        let measure = f["viewer_fragmentation"].as_f64().unwrap();
        assert!((measure - 6.25 / 484.0).abs() < 1e-12, "{measure}");
        let o = &d["ooms"][0];
        assert_eq!(d["ooms"].as_array().unwrap().len(), 1);
        assert_eq!(o["event"], 8);
        assert_eq!(o["time_us"], T0 + 80);
        assert_eq!(o["requested"], 16 * MIB);
        assert_eq!(o["device_free"], 3 * MIB);
        assert_eq!(o["allocated"], 14 * MIB + 512 * KIB);
        assert_eq!(o["reserved"], 22 * MIB);
        // a2's 4 MiB (8..12 MiB) was freed: the largest gap then.
        assert_eq!(o["largest_free_block"], 4 * MIB);
        assert_eq!(
            o["why"],
            "16.00 MiB was asked for; 22.00 MiB reserved = 14.50 MiB held by live blocks \
             (14.50 MiB asked for, 0 B rounding) + 7.50 MiB free in the segments (largest piece \
             4.00 MiB); the device had 3.00 MiB more free. The memory was in use: 5.50 MiB more \
             would have had to be freed (fewer or smaller live tensors: a smaller batch, \
             activation checkpointing)"
        );
        assert_eq!(frames(&o["frames"]), FWD.to_vec());
        assert_eq!(d["leak_count"], 3);
        assert_eq!(d["leak_bytes"], 6 * MIB + 768 * KIB);
        let leaks: Vec<(u64, u64)> = d["leak_candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["size"].as_u64().unwrap(),
                    b["allocated_at"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(leaks, vec![(6 * MIB, 3), (512 * KIB, 5), (256 * KIB, 9)]);
    }
}

#[test]
fn inspect_prints_the_figures_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), "before", 4);
    let (o, out, err) = workbook(&["inspect", path.to_str().unwrap(), "--frames", "1"]);
    assert!(o.status.success(), "{err}");
    for line in [
        "allocator settings: (torch's defaults)",
        "range: the whole history",
        "device 0: 12 events in the range of 12 (5 allocs, 2 frees, 2 segment allocs, 0 segment \
         frees, 1 out of memory)",
        "  peak allocated  18.50 MiB at event 5 (time_us 1764000000000050)",
        "  peak reserved   22.00 MiB at event 4 (time_us 1764000000000040)",
        "  at the allocated peak: 22.00 MiB reserved in 2 segments; 0 B allocated before \
         recording began (no frames)",
        "      8.00 MiB         1  model.py:41:forward",
        "    512.00 KiB         5  data.py:8:load",
        "  allocation sites live at the peak, by bytes (3 sites in all)",
        "     14.00 MiB         2  model.py:41:forward",
        "      4.00 MiB         1  train.py:14:step",
        "    reserved - allocated      3.50 MiB",
        "    largest free block        2.00 MiB",
        "    free in 2 MiB  segments   1.50 MiB of 2.00 MiB in 1 segment",
        "    free in 20 MiB segments   2.00 MiB of 20.00 MiB in 1 segment",
        "    torch viewer's calculate_fragmentation (sum of free gaps squared / reserved \
         squared): 0.012913",
        "    event 8 (time_us 1764000000000080): 14.50 MiB allocated, 22.00 MiB reserved",
        "      at model.py:41:forward",
        "  leak candidates: 3 blocks (6.75 MiB) allocated in the range and alive at its end",
        "    256.00 KiB         9  data.py:8:load",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "missing line {line:?} in\n{out}"
        );
    }
}

#[test]
fn a_range_of_events_or_microseconds_limits_the_peak_and_the_leak_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), "before", 3);
    let p = path.to_str().unwrap();
    for range in ["0..5", "..5", "1764000000000000us..1764000000000050us"] {
        let d = &json(&["inspect", p, "--json", "--range", range])["devices"][0];
        assert_eq!(d["events_in_range"], 5, "{range}");
        assert_eq!(d["peak_allocated"]["bytes"], 18 * MIB, "{range}");
        assert_eq!(d["peak_allocated"]["event"], 3, "{range}");
        // a1, a2 and a3, alive when event 5 comes.
        assert_eq!(d["leak_count"], 3, "{range}");
        assert_eq!(d["leak_bytes"], 18 * MIB, "{range}");
        assert_eq!(d["ooms"].as_array().unwrap().len(), 0, "{range}");
    }
    let d = &json(&["inspect", p, "--json", "--range", "6.."])["devices"][0];
    assert_eq!(d["events_in_range"], 6);
    // The state before the range counts: after event 5, 18.5 MiB is live, and nothing in the
    // range allocates more: the peak is the state the range starts from.
    assert_eq!(d["peak_allocated"]["bytes"], 18 * MIB + 512 * KIB);
    assert_eq!(d["peak_allocated"]["event"], 5);
    assert_eq!(d["leak_count"], 1);
    assert_eq!(d["leak_bytes"], 256 * KIB);
    assert_eq!(d["ooms"][0]["event"], 8);
    for (bad, message) in [
        ("5", "expected START..END"),
        ("5..5", "the range is empty"),
        (
            "1..20us",
            "give both ends as event indices or both in microseconds",
        ),
        ("a..3", "\"a\" is not a whole number"),
    ] {
        let (o, _, err) = workbook(&["inspect", p, "--range", bad]);
        assert!(!o.status.success());
        assert!(err.contains(message), "{bad}: {err}");
    }
}

#[test]
fn diff_shows_the_peaks_and_the_sites_that_grew_or_shrank() {
    let dir = tempfile::tempdir().unwrap();
    let a = fixture(dir.path(), "before", 2);
    let b = fixture(dir.path(), "after", 5);
    let diffs = json(&["diff", a.to_str().unwrap(), b.to_str().unwrap(), "--json"]);
    assert_eq!(diffs["compared"], "device 0 (the only one with anything)");
    let d = &diffs["devices"][0];
    let change = |a: u64, b: u64| serde_json::json!({"a": a, "b": b, "change": i128::from(b) - i128::from(a)});
    assert_eq!(d["peak_allocated"], change(18 * MIB + 512 * KIB, 17 * MIB));
    assert_eq!(d["peak_reserved"], change(22 * MIB, 22 * MIB));
    assert_eq!(d["reserved_at_peak"], change(22 * MIB, 22 * MIB));
    assert_eq!(d["segments_at_peak"], change(2, 2));
    assert_eq!(
        d["reserved_minus_allocated"],
        change(3 * MIB + 512 * KIB, 5 * MIB)
    );
    // After: a2 is 2 MiB, so a3 ends at 16 MiB and 4 MiB of the 20 MiB segment is free.
    assert_eq!(d["largest_free_block"], change(2 * MIB, 4 * MIB));
    assert_eq!(d["ooms"], change(1, 1));
    assert_eq!(
        d["leak_bytes"],
        change(6 * MIB + 768 * KIB, 7 * MIB + 256 * KIB)
    );
    let sites = d["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 2, "the forward site did not change");
    assert_eq!(frames(&sites[0]["frames"]), OPT.to_vec());
    assert_eq!(sites[0]["bytes"], change(4 * MIB, 2 * MIB));
    assert_eq!(sites[0]["blocks"], change(1, 1));
    assert_eq!(frames(&sites[1]["frames"]), DATA.to_vec());
    assert_eq!(sites[1]["bytes"], change(512 * KIB, MIB));
    let (o, text, err) = workbook(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(o.status.success(), "{err}");
    for line in [
        "peak allocated                   18.50 MiB     17.00 MiB     -1.50 MiB",
        "peak reserved                    22.00 MiB     22.00 MiB             0",
        "largest free block at it          2.00 MiB      4.00 MiB     +2.00 MiB",
        "segments at the peak                     2             2            +0",
        "allocation sites whose live bytes at the peak changed (2)",
        "   -2.00 MiB      4.00 MiB      2.00 MiB     1->1  train.py:14:step",
        " +512.00 KiB    512.00 KiB      1.00 MiB     1->1  data.py:8:load",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[test]
fn inspect_reads_gpumems_own_snapshot_and_a_trace_file() {
    let _guard = gpumem::testing::device();
    let a = CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
    a.record_history(true);
    let first_line = line!() + 1;
    let x = a.malloc(700 * KIB as usize, StreamId(0)).unwrap();
    let y = a.malloc(300 * KIB as usize, StreamId(0)).unwrap();
    let z = a.malloc(3 * MIB as usize, StreamId(0)).unwrap();
    a.free(x, Vec::new());
    let snapshot = a.snapshot();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpumem.json");
    std::fs::write(&path, snapshot.to_json()).unwrap();
    let r = json(&["inspect", path.to_str().unwrap(), "--json"]);
    assert_eq!(r["kind"], "a gpumem snapshot (JSON)");
    let d = &r["devices"][0];
    // 700 + 300 KiB in a 2 MiB small segment, 3 MiB in a 20 MiB large one.
    assert_eq!(d["peak_allocated"]["bytes"], 4072 * KIB);
    assert_eq!(d["peak_reserved"]["bytes"], 22 * MIB);
    assert_eq!(d["segments_at_peak"], 2);
    assert_eq!(d["fragmentation"]["largest_free_block"], 17 * MIB);
    // Each malloc above is a site of its own: gpumem records the caller's file and line.
    let sites: Vec<(u64, String)> = d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["bytes"].as_u64().unwrap(), frames(&s["frames"]).join(" ")))
        .collect();
    let line = |n: u32| format!("crates/workbook/tests/inspect.rs:{n}:");
    assert_eq!(
        sites,
        vec![
            (3 * MIB, line(first_line + 2)),
            (700 * KIB, line(first_line)),
            (300 * KIB, line(first_line + 1)),
        ]
    );
    assert_eq!(d["leak_bytes"], 3 * MIB + 300 * KIB);
    a.free(y, Vec::new());
    a.free(z, Vec::new());

    // A trace file is replayed once on cpu; its peaks are `workbook replay`'s.
    let trace = repo("bench/traces/interleaved-lifetimes.json");
    let r = json(&["inspect", trace.to_str().unwrap(), "--json"]);
    assert_eq!(
        r["kind"],
        "a gpumem trace, replayed once on cpu with torch's default settings"
    );
    let d = &r["devices"][0];
    assert_eq!(d["peak_allocated"]["bytes"], 125_222_856_u64);
    assert_eq!(d["peak_reserved"]["bytes"], 176_160_768_u64);
    assert_eq!(d["sites"][0]["frames"], serde_json::json!([]));
}

#[test]
fn viz_range_draws_a_window_with_the_segments_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), "before", 4);
    let svg = dir.path().join("w.svg");
    let (o, _, err) = workbook(&[
        "viz",
        path.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
        "--range",
        "0..4",
    ]);
    assert!(o.status.success(), "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    // Events 0..4: the 20 MiB segment and its three blocks (18 MiB), no small segment yet.
    assert!(text.contains("4 events"), "{text}");
    assert!(text.contains("peak allocated 18 MiB"), "{text}");
    assert!(text.contains("peak reserved 20 MiB"), "{text}");
    assert!(text.contains("1 segment"), "{text}");
}

/// Bytes of a pickle: protocol 4, then `body`, then STOP.
fn raw_pickle(dir: &Path, name: &str, body: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let mut bytes = vec![0x80, 4];
    bytes.extend_from_slice(body);
    bytes.push(b'.');
    std::fs::write(&path, bytes).unwrap();
    path
}

fn fails_with(path: &Path, message: &str) {
    for command in ["inspect", "diff"] {
        let p = path.to_str().unwrap();
        let args: Vec<&str> = if command == "diff" {
            vec![command, p, p]
        } else {
            vec![command, p]
        };
        let (o, out, err) = workbook(&args);
        assert_eq!(o.status.code(), Some(2), "{command}: {out}{err}");
        assert!(err.contains(message), "{command}: {message:?} not in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn bad_files_are_named_with_their_problem() {
    let dir = tempfile::tempdir().unwrap();
    let whole = fixture(dir.path(), "before", 4);
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.pickle");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(
        &cut,
        "truncated pickle: the file ends before the pickle's STOP",
    );
    let script = |name: &str, code: &str| {
        let path = dir.path().join(name);
        let status = Command::new("python3")
            .args(["-c", code, path.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        path
    };
    let schema = script(
        "schema.pickle",
        "import pickle,sys; pickle.dump({'segments': []}, open(sys.argv[1],'wb'))",
    );
    fails_with(&schema, "not a PyTorch memory snapshot: no 'device_traces'");
    let huge = script(
        "huge.pickle",
        "import pickle,sys; pickle.dump({'segments': [], 'device_traces': [[{'action': 'alloc', \
         'addr': 0, 'size': 2**80, 'stream': 0, 'time_us': 0, 'frames': []}]]}, \
         open(sys.argv[1],'wb'))",
    );
    fails_with(
        &huge,
        "device_traces[0][0]: 'size' is 1208925819614629174706176, not a byte count or address",
    );
    let empty = script(
        "empty.pickle",
        "import pickle,sys; pickle.dump({'segments': [], 'device_traces': [[]]}, \
         open(sys.argv[1],'wb'))",
    );
    fails_with(
        &empty,
        "the snapshot has neither trace entries nor segments",
    );
    // A million lists, each appended into the one below it.
    let n = 1_000_000;
    let mut body = vec![b']'; n];
    body.extend(std::iter::repeat_n(b'a', n - 1));
    let bomb = raw_pickle(dir.path(), "bomb.pickle", &body);
    fails_with(
        &bomb,
        "containers nested more than 32 deep (a snapshot nests 6): not a snapshot, or a bomb of \
         nested lists",
    );
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    fails_with(&text, "is neither a snapshot");
}

#[test]
fn replay_range_replays_only_the_window_from_an_empty_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), "before", 4);
    let p = path.to_str().unwrap();
    let row = |range: &str| {
        let r = json(&["replay", p, "--json", "--repeat", "1", "--range", range]);
        let r = &r[0];
        (
            r["allocs"].as_u64().unwrap(),
            r["frees"].as_u64().unwrap(),
            r["peak_requested_bytes"].as_u64().unwrap(),
        )
    };
    // Entries 0..6: the four allocations up to the peak, no free.
    assert_eq!(row("0..6"), (4, 0, 18 * MIB + 512 * KIB));
    // From entry 6: a2's and a1's frees are of blocks allocated before the window; b2 remains,
    // and the request that ran out of memory (16 MiB) is replayed as an alloc.
    assert_eq!(row("6.."), (2, 0, 16 * MIB + 256 * KIB));
    assert_eq!(
        row("1764000000000000us..1764000000000060us"),
        (4, 0, 18 * MIB + 512 * KIB)
    );
    let trace = repo("bench/traces/interleaved-lifetimes.json");
    let (o, _, err) = workbook(&["replay", trace.to_str().unwrap(), "--range", "5us..9us"]);
    assert!(!o.status.success());
    assert!(
        err.contains("--range: a gpumem trace records no times; give event indices"),
        "{err}"
    );
    let r = json(&[
        "replay",
        trace.to_str().unwrap(),
        "--json",
        "--repeat",
        "1",
        "--range",
        "0..10",
    ]);
    // What the file's first ten events hold: their allocs, and the frees of those.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let mut ids = std::collections::HashSet::new();
    let (mut allocs, mut frees) = (0, 0);
    for e in file["events"].as_array().unwrap().iter().take(10) {
        if e["op"] == "alloc" {
            ids.insert(e["id"].as_u64().unwrap());
            allocs += 1;
        } else if ids.contains(&e["id"].as_u64().unwrap()) {
            frees += 1;
        }
    }
    assert_eq!(
        (&r[0]["allocs"], &r[0]["frees"]),
        (&allocs.into(), &frees.into())
    );
    assert_eq!(r[0]["events"], allocs + frees);
}
