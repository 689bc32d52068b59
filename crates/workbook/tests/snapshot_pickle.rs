//! `workbook replay` and `workbook viz` on PyTorch snapshot pickles: a snapshot written by Python's
//! own pickler in torch's schema replays with the peaks of the trace it was made from,
//! `--snapshot-out` writes a snapshot Python reads and that replays the same again, and bad files
//! fail with the problem named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn committed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/traces")
        .join(name)
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

fn python(script: &str, args: &[&Path]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A gpumem trace as the snapshot PyTorch would have recorded for it: each block at an address of
/// its own, every free a free_requested then a free_completed, frames shared between entries, and
/// the entries' stream handles as torch writes them.
const TO_TORCH: &str = r#"
import json, pickle, sys
trace = json.load(open(sys.argv[1]))
frames = [{'filename': 'train.py', 'line': 3, 'name': 'step'}]
entries, addr, t = [], {}, 0
for e in trace['events']:
    t += 1
    if e['op'] == 'alloc':
        addr[e['id']] = (0x7f0000000000 + e['id'] * 0x100000000, e['size'], e.get('stream', 0))
        a, size, s = addr[e['id']]
        entries.append({'action': 'alloc', 'addr': a, 'size': size,
                        'stream': 0 if s == 0 else 93000000000 + s, 'time_us': t,
                        'frames': frames})
    else:
        a, size, s = addr[e['id']]
        for action in ('free_requested', 'free_completed'):
            entries.append({'action': action, 'addr': a, 'size': size,
                            'stream': 0 if s == 0 else 93000000000 + s, 'time_us': t,
                            'frames': frames})
snap = {'segments': [], 'device_traces': [entries], 'allocator_settings': {}}
pickle.dump(snap, open(sys.argv[2], 'wb'))
"#;

fn peaks(json: &str) -> Vec<(String, u64, u64, u64)> {
    let list: serde_json::Value = serde_json::from_str(json).expect("JSON");
    list.as_array()
        .expect("a list")
        .iter()
        .map(|r| {
            (
                r["trace"].as_str().unwrap().to_string(),
                r["peak_requested_bytes"].as_u64().unwrap(),
                r["peak_allocated_bytes"].as_u64().unwrap(),
                r["peak_reserved_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_torch_snapshot_replays_with_the_peaks_of_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let source = committed("interleaved-lifetimes.json");
    let pickle = dir.path().join("interleaved-lifetimes.pickle");
    python(TO_TORCH, &[&source, &pickle]);
    let (o1, from_trace, e1) = workbook(&[
        "replay",
        source.to_str().unwrap(),
        "--json",
        "--repeat",
        "1",
    ]);
    assert!(o1.status.success(), "{e1}");
    let (o2, from_pickle, e2) = workbook(&[
        "replay",
        pickle.to_str().unwrap(),
        "--json",
        "--repeat",
        "1",
    ]);
    assert!(o2.status.success(), "{e2}");
    assert_eq!(peaks(&from_pickle), peaks(&from_trace));
    assert_eq!(
        peaks(&from_pickle)[0],
        (
            "interleaved-lifetimes".to_string(),
            125_222_856,
            132_213_248,
            176_160_768
        )
    );
    // What-if on the pickle: the settings apply as they do to a trace.
    let (o3, table, e3) = workbook(&[
        "replay",
        pickle.to_str().unwrap(),
        "--alloc-conf",
        "",
        "--alloc-conf",
        "expandable_segments:True",
    ]);
    assert!(o3.status.success(), "{e3}");
    assert!(table.contains("interleaved-lifetimes\nsetting"), "{table}");
    assert!(table.contains("expandable_segments:True"), "{table}");
}

#[test]
fn snapshot_out_writes_the_state_after_the_replay_for_python_and_for_replay() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("after.pickle");
    let source = committed("interleaved-lifetimes.json");
    let (o, _, err) = workbook(&[
        "replay",
        source.to_str().unwrap(),
        "--repeat",
        "1",
        "--snapshot-out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("open it at pytorch.org/memory_viz"), "{err}");
    let counts = python(
        "import pickle,sys; s=pickle.load(open(sys.argv[1],'rb')); t=s['device_traces'][0]; \
         print(sum(e['action']=='alloc' for e in t), sum(e['action']=='free_requested' for e in t), \
         len(s['segments']) > 0, sorted(s['allocator_settings'])[0])",
        &[&out],
    );
    let (_, trace_json, _) = workbook(&[
        "replay",
        source.to_str().unwrap(),
        "--json",
        "--repeat",
        "1",
    ]);
    let trace: serde_json::Value = serde_json::from_str(&trace_json).unwrap();
    assert_eq!(
        counts.trim(),
        format!(
            "{} {} True PYTORCH_CUDA_ALLOC_CONF",
            trace[0]["allocs"], trace[0]["frees"]
        )
    );
    // The written snapshot's trace replays to the same peaks.
    let (o2, again, e2) = workbook(&["replay", out.to_str().unwrap(), "--json", "--repeat", "1"]);
    assert!(o2.status.success(), "{e2}");
    let p = peaks(&again);
    let q = peaks(&trace_json);
    assert_eq!((p[0].1, p[0].2, p[0].3), (q[0].1, q[0].2, q[0].3));
    // And `workbook viz` draws it.
    let svg = dir.path().join("after.svg");
    let (o3, _, e3) = workbook(&["viz", out.to_str().unwrap(), "-o", svg.to_str().unwrap()]);
    assert!(o3.status.success(), "{e3}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("Active memory timeline"), "{text}");
}

#[test]
fn snapshot_out_wants_one_trace() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.pickle");
    let a = committed("interleaved-lifetimes.json");
    let b = committed("growing-sizes.json");
    let (o, _, err) = workbook(&[
        "replay",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--repeat",
        "1",
        "--snapshot-out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        err.contains("--snapshot-out writes one snapshot: give one trace (these files hold 2)"),
        "{err}"
    );
}

#[test]
fn a_truncated_or_foreign_pickle_is_named_with_its_problem() {
    let dir = tempfile::tempdir().unwrap();
    let source = committed("growing-sizes.json");
    let whole = dir.path().join("whole.pickle");
    python(TO_TORCH, &[&source, &whole]);
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.pickle");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let (o, _, err) = workbook(&["replay", cut.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("reading the snapshot {}", cut.display())),
        "{err}"
    );
    assert!(
        err.contains(
            "truncated pickle: the file ends before the pickle's STOP (while reading at byte "
        ),
        "{err}"
    );
    let list = dir.path().join("list.pickle");
    python(
        "import pickle,sys; pickle.dump([{'segments': []}], open(sys.argv[1],'wb'))",
        &[&list],
    );
    let (o, _, err) = workbook(&["viz", list.to_str().unwrap(), "-o", "/dev/null"]);
    assert!(!o.status.success());
    assert!(
        err.contains(
            "not a PyTorch memory snapshot: the pickle holds a list (read as the segments \
             torch.cuda.memory.memory_snapshot() returns): segments[0]: no 'device'"
        ),
        "{err}"
    );
}

#[test]
fn a_replay_that_runs_out_of_memory_writes_its_snapshot_with_the_oom_last_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("oom.pickle");
    let source = committed("interleaved-lifetimes.json");
    let (o, _, err) = workbook(&[
        "replay",
        source.to_str().unwrap(),
        "--repeat",
        "1",
        "--capacity",
        "64MiB",
        "--snapshot-out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("which ran out of memory: its oom entry last"),
        "{err}"
    );
    assert!(err.contains("out of memory"), "{err}");
    let last = python(
        "import pickle,sys; t=pickle.load(open(sys.argv[1],'rb'))['device_traces'][0]; \
         print(t[-1]['action'], sum(e['action']=='oom' for e in t), t[-1]['size'] > 0)",
        &[&out],
    );
    assert_eq!(last.trim(), "oom 1 True");
}

#[test]
fn a_replayed_torch_snapshot_keeps_each_blocks_frames_and_a_trace_file_gets_none() {
    let dir = tempfile::tempdir().unwrap();
    let source = committed("growing-sizes.json");
    let pickle = dir.path().join("in.pickle");
    python(TO_TORCH, &[&source, &pickle]);
    let out = dir.path().join("out.pickle");
    let (o, _, err) = workbook(&[
        "replay",
        pickle.to_str().unwrap(),
        "--repeat",
        "1",
        "--snapshot-out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{err}");
    let frames = "import pickle,sys; t=pickle.load(open(sys.argv[1],'rb'))['device_traces'][0]; \
                  print(sorted({(e['action'], repr(e.get('frames', []))) for e in t}))";
    let seen = python(frames, &[&out]);
    assert_eq!(
        seen.trim(),
        "[('alloc', \"[{'filename': 'train.py', 'line': 3, 'name': 'step'}]\"), \
         ('free_completed', '[]'), ('free_requested', '[]'), \
         ('segment_alloc', \"[{'filename': 'train.py', 'line': 3, 'name': 'step'}]\")]"
    );
    let out2 = dir.path().join("out2.pickle");
    let (o, _, err) = workbook(&[
        "replay",
        source.to_str().unwrap(),
        "--repeat",
        "1",
        "--snapshot-out",
        out2.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{err}");
    let seen = python(
        "import pickle,sys; t=pickle.load(open(sys.argv[1],'rb'))['device_traces'][0]; \
         print(sum(len(e.get('frames', [])) for e in t), len(t) > 0)",
        &[&out2],
    );
    assert_eq!(seen.trim(), "0 True");
}

/// Adds torch 2.15's `host_segments` and `host_traces` (`record_pinned_host_memory=True`) to a
/// snapshot: one live 1 GiB pinned block, device -1, and its host trace.
const WITH_HOST: &str = r#"
import pickle, sys
snap = pickle.load(open(sys.argv[1], 'rb'))
size, addr = 1 << 30, 0x7e0000000000
block = {'address': addr, 'size': size, 'requested_size': size, 'state': 'active_allocated',
         'frames': []}
snap['external_annotations'] = []
snap['host_segments'] = [{'device': -1, 'address': addr, 'total_size': size,
                          'allocated_size': size, 'active_size': size, 'requested_size': size,
                          'stream': 0, 'segment_type': 'small', 'segment_pool_id': (0, 0),
                          'is_expandable': False, 'frames': [], 'blocks': [block]}]
snap['host_traces'] = [{'action': a, 'addr': addr, 'size': size, 'stream': 0, 'time_us': 1,
                        'frames': []} for a in ('segment_alloc', 'alloc')]
pickle.dump(snap, open(sys.argv[2], 'wb'), protocol=5)
"#;

#[test]
fn a_snapshot_with_pinned_host_memory_reads_as_the_same_snapshot_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let source = committed("interleaved-lifetimes.json");
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::create_dir(dir.path().join("b")).unwrap();
    let without = dir.path().join("a/step.pickle");
    let with = dir.path().join("b/step.pickle");
    python(TO_TORCH, &[&source, &without]);
    python(WITH_HOST, &[&without, &with]);
    let run = |args: &[&str]| {
        let (o, out, err) = workbook(args);
        assert!(o.status.success(), "workbook {args:?}: {err}");
        out
    };
    let replay = |p: &Path| run(&["replay", p.to_str().unwrap(), "--json", "--repeat", "1"]);
    assert_eq!(peaks(&replay(&with)), peaks(&replay(&without)));
    let inspect =
        |p: &Path| run(&["inspect", p.to_str().unwrap()]).replace(p.to_str().unwrap(), "FILE");
    let report = inspect(&with);
    assert!(report.contains("device 0:"), "{report}");
    assert_eq!(
        report,
        inspect(&without),
        "the host's 1 GiB block is not read as the device's"
    );
    let svg = dir.path().join("with.svg");
    run(&["viz", with.to_str().unwrap(), "-o", svg.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}
