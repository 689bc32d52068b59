//! `dump_snapshot` writes torch's snapshot schema as a pickle that Python's own `pickle` module
//! reads, with every field PyTorch's tools (torch/cuda/_memory_viz.py, MemoryViz.js) read.
//! The checks run `python3` (present on the developers' machines and on CI).

use anyhow::{Context, Result, ensure};
use gpumem::allocator::{CachingAllocator, PendingUse, StreamId};
use gpumem::backend_cpu::CpuBackend;
use gpumem::snapshot_pickle::dump_snapshot;
use gpumem::{AllocatorConfig, Snapshot};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const MIB: usize = 1 << 20;

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

/// Runs `script` with python3 on `pickle_path` and the snapshot's JSON; returns its stdout.
fn python(script: &str, pickle_path: &Path, snapshot: &Snapshot) -> Result<String> {
    let json = pickle_path.with_extension("json");
    std::fs::write(&json, snapshot.to_json())?;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(pickle_path)
        .arg(&json)
        .output()
        .context("running python3 (it must be installed)")?;
    ensure!(
        out.status.success(),
        "python3 failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The reads torch's tools make, written here: `segsum`'s accounting, `trace`'s walk over the
/// actions (with `device_free` for an OOM), `_block_extra`'s frames and requested sizes, and the
/// keys MemoryViz.js takes from segments, blocks and entries. Every value is compared with the
/// snapshot's own JSON.
const CHECK: &str = r#"
import json, pickle, sys
with open(sys.argv[1], 'rb') as f:
    raw = f.read()
assert raw[0] == 0x80 and raw[1] == 4, 'protocol %r' % raw[:2]
snap = pickle.loads(raw)
want = json.load(open(sys.argv[2]))
assert set(snap) == {'segments', 'device_traces', 'allocator_settings'}, sorted(snap)
segs = snap['segments']
assert len(segs) == len(want['segments'])
for s, w in zip(segs, want['segments']):
    for k in ('device', 'address', 'total_size', 'allocated_size', 'active_size',
              'requested_size', 'stream', 'segment_type', 'segment_pool_id',
              'is_expandable', 'frames', 'blocks'):
        assert k in s, k
    assert s['device'] == 0
    for k in ('address', 'total_size', 'allocated_size', 'active_size', 'stream',
              'segment_type', 'is_expandable'):
        assert s[k] == w[k], (k, s[k], w[k])
    assert s['segment_pool_id'] == (0, 0)
    assert s['requested_size'] == sum(b['requested_size'] for b in s['blocks'])
    assert s['frames'] == []
    assert len(s['blocks']) == len(w['blocks'])
    addr = s['address']
    internal = external = allocated = 0
    for b, wb in zip(s['blocks'], w['blocks']):
        assert set(b) == {'address', 'size', 'requested_size', 'state', 'frames'}, sorted(b)
        assert b['address'] == addr == wb['address']
        assert (b['size'], b['requested_size'], b['state']) == \
            (wb['size'], wb['requested_size'], wb['state'])
        addr += b['size']
        if b['state'] == 'active_allocated':
            allocated += b['requested_size']
            internal += b['size'] - b['requested_size']
        else:
            external += b['size']
    assert internal + external + allocated == s['total_size']
traces = snap['device_traces']
assert isinstance(traces, list) and len(traces) == 1
entries = traces[0]
assert len(entries) == len(want['trace'])
for e, w in zip(entries, want['trace']):
    assert e['action'] == w['action'], (e['action'], w['action'])
    addr_key = 'device_free' if e['action'] == 'oom' else 'addr'
    assert set(e) == {'action', addr_key, 'size', 'stream', 'time_us', 'frames'}, sorted(e)
    assert (e[addr_key], e['size'], e['stream'], e['time_us']) == \
        (w['addr'], w['size'], w['stream'], w['time_us'])
    assert e['frames'] == []
settings = snap['allocator_settings']
for k in ('PYTORCH_CUDA_ALLOC_CONF', 'max_split_size', 'garbage_collection_threshold',
          'expandable_segments', 'pinned_num_register_threads', 'release_lock_on_cudamalloc',
          'pinned_use_cuda_host_register', 'roundup_power2_divisions'):
    assert k in settings, k
print(' '.join(e['action'] for e in entries))
print(settings['PYTORCH_CUDA_ALLOC_CONF'], settings['max_split_size'],
      settings['garbage_collection_threshold'], settings['expandable_segments'])
print(sorted(int(k) for k in settings['roundup_power2_divisions'])[-1],
      settings['roundup_power2_divisions']['1'])
print(sorted({b['state'] for s in segs for b in s['blocks']}))
"#;

#[test]
fn python_reads_every_field_torchs_tools_read() -> Result<()> {
    let config = AllocatorConfig::parse("max_split_size_mb:64,roundup_power2_divisions:4")?;
    let a = CachingAllocator::new(CpuBackend::new(64 * MIB), "cpu", config);
    a.record_history(true);
    let s0 = StreamId(0);
    let x = a.malloc(700 << 10, s0)?;
    let y = a.malloc(300 << 10, s0)?;
    let big = a.malloc(3 * MIB, s0)?;
    a.free(x, Vec::new());
    // Used on another stream whose work is not done: it stays active until the work is.
    let done = Arc::new(AtomicBool::new(false));
    a.free(y, vec![Box::new(Flag(done.clone()))]);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("pending.pickle");
    let snapshot = a.snapshot();
    dump_snapshot(&snapshot, &path)?;
    let out = python(CHECK, &path, &snapshot)?;
    let lines: Vec<&str> = out.lines().collect();
    let before = "segment_alloc alloc alloc segment_alloc alloc free_requested free_completed \
                  free_requested snapshot";
    assert_eq!(lines[0], before);
    assert_eq!(
        lines[1],
        "max_split_size_mb:64,roundup_power2_divisions:4 67108864 0.0 False"
    );
    assert_eq!(lines[2], "32768 4");
    assert_eq!(
        lines[3],
        "['active_allocated', 'active_pending_free', 'inactive']"
    );
    // The OOM path waits for every stream (torch's synchronize_and_free_events), so the pending
    // free completes and the emptied small segment goes back before the OOM is recorded.
    let err = a
        .malloc(100 * MIB, s0)
        .expect_err("more than the device holds");
    assert!(
        err.to_string()
            .starts_with("Out of memory on the cpu device"),
        "{err}"
    );
    let path = dir.path().join("oom.pickle");
    let snapshot = a.snapshot();
    dump_snapshot(&snapshot, &path)?;
    let out = python(CHECK, &path, &snapshot)?;
    assert_eq!(
        out.lines().next(),
        Some(format!("{before} free_completed segment_free oom snapshot").as_str())
    );
    assert_eq!(out.lines().nth(3), Some("['active_allocated', 'inactive']"));
    a.free(big, Vec::new());
    Ok(())
}

#[test]
fn an_unset_max_split_size_is_written_as_torch_writes_size_max() -> Result<()> {
    let a = CachingAllocator::new(CpuBackend::new(64 * MIB), "cpu", AllocatorConfig::default());
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("empty.pickle");
    let snapshot = a.snapshot();
    dump_snapshot(&snapshot, &path)?;
    let out = python(CHECK, &path, &snapshot)?;
    assert_eq!(out.lines().nth(1), Some(" -1 0.0 False"));
    Ok(())
}

#[test]
fn a_snapshot_on_cuda_1_puts_its_trace_second_in_device_traces() -> Result<()> {
    let a = CachingAllocator::new(
        CpuBackend::new(64 * MIB),
        "cuda:1",
        AllocatorConfig::default(),
    );
    a.record_history(true);
    let b = a.malloc(512, StreamId(0))?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("cuda1.pickle");
    dump_snapshot(&a.snapshot(), &path)?;
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import pickle,sys; s=pickle.load(open(sys.argv[1],'rb')); \
             print([len(t) for t in s['device_traces']], s['segments'][0]['device'])",
        )
        .arg(&path)
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout)?.trim(), "[0, 3] 1");
    a.free(b, Vec::new());
    Ok(())
}

#[test]
fn dump_snapshot_names_the_file_it_cannot_write() {
    let a = CachingAllocator::new(CpuBackend::new(MIB), "cpu", AllocatorConfig::default());
    let e = dump_snapshot(&a.snapshot(), Path::new("/nonexistent-dir/snap.pickle"))
        .expect_err("no such directory");
    assert!(
        e.to_string().starts_with("/nonexistent-dir/snap.pickle: "),
        "{e}"
    );
}
