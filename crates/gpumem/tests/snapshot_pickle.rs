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
assert list(snap) == ['segments', 'device_traces', 'allocator_settings', 'external_annotations', 'host_segments', 'host_traces'], list(snap)
assert snap['host_segments'] == [] and snap['host_traces'] == []
notes = [e for e in want['trace'] if e['action'] == 'annotation']
assert [(a['name'], a['stage'], a['device'], a['time_us']) for a in snap['external_annotations']] == [(e['label'], 'START', 0, e['time_us']) for e in notes], snap['external_annotations']
assert all(e['action'] != 'annotation' for t in snap['device_traces'] for e in t)
segs = snap['segments']
assert len(segs) == len(want['segments'])
# torch's segments carry the frames of the call that reserved them, live blocks those of the call
# that allocated them: here, those of the trace's last segment_alloc / alloc at that address.
def frames_of(w):
    return [{'filename': f['filename'], 'line': f['line'], 'name': f['name']}
            for f in w.get('frames', [])]
seg_frames, blk_frames = {}, {}
for w in want['trace']:
    if w['action'] in ('segment_alloc', 'segment_map'):
        seg_frames.setdefault(w['addr'], frames_of(w))
    elif w['action'] in ('segment_free', 'segment_unmap'):
        seg_frames.pop(w['addr'], None)
    elif w['action'] == 'alloc':
        blk_frames[w['addr']] = frames_of(w)
    elif w['action'] == 'free_completed':
        blk_frames.pop(w['addr'], None)
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
    assert s['frames'] == seg_frames.get(s['address'], []), (s['address'], s['frames'])
    assert len(s['blocks']) == len(w['blocks'])
    addr = s['address']
    internal = external = allocated = 0
    for b, wb in zip(s['blocks'], w['blocks']):
        assert set(b) == {'address', 'size', 'requested_size', 'state', 'frames'}, sorted(b)
        assert b['address'] == addr == wb['address']
        assert (b['size'], b['requested_size'], b['state']) == \
            (wb['size'], wb['requested_size'], wb['state'])
        want_frames = [] if b['state'] == 'inactive' else blk_frames.get(b['address'], [])
        assert b['frames'] == want_frames, (b['address'], b['frames'], want_frames)
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
    keys = ['action', addr_key, 'size', 'stream', 'time_us', 'compile_context', 'user_metadata',
            'pool_id'] + (['frames'] if w.get('frames') else [])
    assert list(e) == keys, list(e)
    assert (e[addr_key], e['size'], e['stream'], e['time_us']) == \
        (w['addr'], w['size'], w['stream'], w['time_us'])
    assert (e['compile_context'], e['user_metadata'], e['pool_id']) == ('', '', (0, 0))
    assert e.get('frames', []) == [{'filename': f['filename'], 'line': f['line'], 'name': f['name']}
                                   for f in w.get('frames', [])]
settings = snap['allocator_settings']
# torch's keys in torch's order (torch/csrc/cuda/memory_snapshot.cpp, as the Python API's
# THCPModule_memorySnapshot writes them too).
assert list(settings) == [
    'PYTORCH_CUDA_ALLOC_CONF', 'max_split_size', 'garbage_collection_threshold',
    'expandable_segments', 'pinned_num_register_threads', 'release_lock_on_cudamalloc',
    'pinned_use_cuda_host_register', 'graph_capture_record_stream_reuse',
    'roundup_power2_divisions'], list(settings)
assert settings['graph_capture_record_stream_reuse'] is False
print(' '.join(e['action'] for e in entries))
print(settings['PYTORCH_CUDA_ALLOC_CONF'], settings['max_split_size'],
      settings['garbage_collection_threshold'], settings['expandable_segments'])
print(sorted(int(k) for k in settings['roundup_power2_divisions'])[-1],
      settings['roundup_power2_divisions']['1'])
print(sorted({b['state'] for s in segs for b in s['blocks']}))
print(sorted({(e['action'], f['filename'].split('/')[-1]) for e in entries for f in e.get('frames', [])}))
print(sum(1 for s in segs if s['frames']), sum(1 for s in segs for b in s['blocks'] if b['frames']))
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
                  free_requested";
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
    // Each malloc's entries carry its call site (`#[track_caller]`): this file.
    assert_eq!(
        lines[4],
        "[('alloc', 'snapshot_pickle.rs'), ('segment_alloc', 'snapshot_pickle.rs')]"
    );
    // Both segments carry their reserving call's frames, and so do the two active blocks (the
    // allocated one and the one pending on the side stream); the free block has none.
    assert_eq!(lines[5], "2 2");
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
        Some(format!("{before} snapshot free_completed segment_free oom").as_str())
    );
    assert_eq!(out.lines().nth(3), Some("['active_allocated', 'inactive']"));
    assert_eq!(out.lines().nth(5), Some("1 1"));
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
    assert_eq!(String::from_utf8(out.stdout)?.trim(), "[0, 2] 1");
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

// ---- reading snapshot pickles ----

use gpumem::snapshot_pickle::{
    SnapshotPickleError, load_snapshot, read_alloc_traces, read_snapshot,
};
use gpumem::trace::replay;

/// A workload with splits, reuse, two streams and frees: its recorded history is the fixture.
fn workload(a: &CachingAllocator<CpuBackend>) -> Result<()> {
    let mut live = Vec::new();
    for i in 0..40usize {
        let size = [512, 3000, 700 << 10, 3 * MIB, 13 * MIB][i % 5] + i * 100;
        let stream = StreamId((i % 3 == 0) as u64 * 7);
        live.push(a.malloc(size, stream)?);
        if i % 4 == 3 {
            a.free(live.remove(i % live.len()), Vec::new());
            a.free(live.remove(0), Vec::new());
        }
    }
    Ok(())
}

#[test]
fn a_gpumem_pickle_reads_back_entry_for_entry() -> Result<()> {
    let a = CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
    a.record_history(true);
    workload(&a)?;
    let snapshot = a.snapshot();
    let mut bytes = Vec::new();
    gpumem::snapshot_pickle::write_snapshot(&snapshot, &mut bytes)?;
    let mut read = Vec::new();
    let contents = read_snapshot(bytes.as_slice(), |device, e| read.push((device, e)))?;
    assert_eq!(contents.devices, 1);
    assert_eq!(contents.entries, vec![snapshot.trace.len()]);
    let key = |e: &gpumem::TraceEntry| (e.action, e.addr, e.size, e.stream, e.time_us);
    assert_eq!(
        read.iter().map(|(_, e)| key(e)).collect::<Vec<_>>(),
        snapshot.trace.iter().map(key).collect::<Vec<_>>()
    );
    assert!(read.iter().all(|(d, _)| *d == 0));
    let segments: Vec<_> = contents.segments.into_iter().map(|(_, s)| s).collect();
    assert_eq!(segments, snapshot.segments);
    assert_eq!(contents.alloc_conf.as_deref(), Some(""));
    Ok(())
}

/// Turns gpumem's JSON snapshot into torch's dict and pickles it with Python's own pickler
/// (protocol given), the way `_dump_snapshot` does: repeated frames shared between entries (the
/// pickler writes them once and refers back), strings memoised, stream handles as large ints, a
/// `user_defined` annotation gpumem does not model, and an empty device list before the real one.
const TORCH_FIXTURE: &str = r#"
import json, pickle, sys
src = json.load(open(sys.argv[1]))
frames = [{'filename': 'train.py', 'line': 12, 'name': 'forward'},
          {'filename': 'torch/nn/modules/linear.py', 'line': 125, 'name': 'forward'}]
def stream(s):
    return 0 if s == 0 else 94000000000000 + s
entries = [{'action': 'user_defined', 'addr': 0, 'size': 0, 'stream': 0, 'time_us': 1,
            'frames': frames, 'user_metadata': 'step 0'}]
for e in src['trace']:
    d = {'action': e['action'], 'size': e['size'], 'stream': stream(e['stream']),
         'time_us': e['time_us'], 'frames': frames, 'compile_context': 'N/A',
         'user_metadata': ''}
    d['device_free' if e['action'] == 'oom' else 'addr'] = e['addr']
    entries.append(d)
segments = []
for s in src['segments']:
    blocks = [{'address': b['address'], 'size': b['size'],
               'requested_size': b['requested_size'], 'state': b['state'], 'frames': frames}
              for b in s['blocks']]
    segments.append({'device': 1, 'address': s['address'], 'total_size': s['total_size'],
                     'allocated_size': s['allocated_size'], 'active_size': s['active_size'],
                     'requested_size': sum(b['requested_size'] for b in s['blocks']),
                     'stream': stream(s['stream']), 'segment_type': s['segment_type'],
                     'segment_pool_id': (0, 0), 'is_expandable': s['is_expandable'],
                     'frames': frames, 'blocks': blocks})
snap = {'segments': segments, 'device_traces': [[], entries],
        'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:False',
                               'max_split_size': -1, 'garbage_collection_threshold': 0.0,
                               'expandable_segments': False,
                               'roundup_power2_divisions': {'1': 0, '2': 0}},
        'external_annotations': []}
with open(sys.argv[2], 'wb') as f:
    pickle.dump(snap, f, protocol=int(sys.argv[3]))
"#;

fn torch_fixture(dir: &Path, snapshot: &Snapshot, protocol: u8) -> Result<std::path::PathBuf> {
    let json = dir.join("gpumem.json");
    std::fs::write(&json, snapshot.to_json())?;
    let path = dir.join(format!("torch-p{protocol}.pickle"));
    let out = Command::new("python3")
        .arg("-c")
        .arg(TORCH_FIXTURE)
        .arg(&json)
        .arg(&path)
        .arg(protocol.to_string())
        .output()
        .context("running python3")?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(path)
}

#[test]
fn a_torch_schema_pickle_written_by_python_replays_with_the_same_peaks() -> Result<()> {
    let a = CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
    a.record_history(true);
    workload(&a)?;
    let stats = a.device_stats();
    let snapshot = a.snapshot();
    let dir = tempfile::tempdir()?;
    for protocol in [2, 4, 5] {
        let path = torch_fixture(dir.path(), &snapshot, protocol)?;
        let traces = read_alloc_traces(&path)?;
        assert_eq!(traces.len(), 1, "protocol {protocol}");
        let (device, trace) = &traces[0];
        assert_eq!(*device, 1);
        let fresh =
            CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
        let replayed = replay(&fresh, trace)?;
        assert_eq!(replayed.peak_allocated, stats.allocated_bytes.all.peak);
        assert_eq!(replayed.peak_reserved, stats.reserved_bytes.all.peak);
        assert_eq!(replayed.peak_requested, stats.requested_bytes.all.peak);
        assert_eq!(replayed.summary.allocs, 40);

        let drawn = load_snapshot(&path)?;
        assert_eq!(drawn.segments, {
            // torch's stream handles are kept as they are.
            let mut s = snapshot.segments.clone();
            s.iter_mut()
                .filter(|s| s.stream != 0)
                .for_each(|s| s.stream += 94000000000000);
            s
        });
        assert_eq!(
            drawn.trace.len(),
            snapshot.trace.len(),
            "user_defined left out"
        );
        let last = drawn.trace.last().unwrap();
        assert_eq!(last.reserved, stats.reserved_bytes.all.current);
        let max_reserved = drawn.trace.iter().map(|e| e.reserved).max().unwrap();
        assert_eq!(max_reserved, stats.reserved_bytes.all.peak);
    }
    Ok(())
}

fn read_error(bytes: &[u8]) -> SnapshotPickleError {
    read_snapshot(bytes, |_, _| {}).expect_err("the pickle should be rejected")
}

fn python_pickle(expr: &str) -> Result<Vec<u8>> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import pickle,sys; sys.stdout.buffer.write(pickle.dumps({expr}, protocol=4))"
        ))
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

#[test]
fn bad_pickles_get_an_error_naming_the_problem() -> Result<()> {
    let e = read_error(b"");
    assert_eq!(
        e.to_string(),
        "not a readable pickle at byte 0: the file is empty"
    );
    let e = read_error(br#"{"segments": []}"#);
    assert!(
        e.to_string()
            .starts_with("not a readable pickle at byte 0: it starts with byte 0x7b"),
        "{e}"
    );
    let e = read_error(&[0x80, 1, b'.']);
    assert!(e.to_string().contains("pickle protocol 1"), "{e}");
    // An opcode no snapshot has (GLOBAL: a pickle that would import code).
    let e = read_error(b"\x80\x04cos\nsystem\n.");
    assert!(e.to_string().contains("opcode 0x63 ('c')"), "{e}");
    // A string that claims 2^40 bytes.
    let mut huge = vec![0x80, 4, 0x8d];
    huge.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let e = read_error(&huge);
    assert_eq!(
        e.to_string(),
        "not a readable pickle at byte 11: a string of 1099511627776 bytes is larger than any \
         snapshot field (67108864 bytes at most): the file is corrupt"
    );
    Ok(())
}

#[test]
fn a_truncated_snapshot_says_where_it_ends() -> Result<()> {
    let a = CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
    a.record_history(true);
    workload(&a)?;
    let mut bytes = Vec::new();
    gpumem::snapshot_pickle::write_snapshot(&a.snapshot(), &mut bytes)?;
    let cut = bytes.len() / 2;
    let e = read_error(&bytes[..cut]);
    let SnapshotPickleError::Truncated { offset } = e else {
        panic!("expected Truncated, got {e:?}");
    };
    assert!(
        offset as usize <= cut && cut - (offset as usize) < 256,
        "{offset} vs {cut}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "truncated pickle: the file ends before the pickle's STOP (while reading at byte \
             {offset})"
        )
    );
    Ok(())
}

#[test]
fn a_pickle_of_another_shape_is_not_a_snapshot() -> Result<()> {
    let e = read_error(&python_pickle("[1, 2]")?);
    assert_eq!(
        e.to_string(),
        "not a PyTorch memory snapshot: the pickle holds a list whose item 0 is an int: neither \
         a snapshot dict nor the list of segment dicts torch.cuda.memory.memory_snapshot() returns"
    );
    // A dict with segments and no trace.
    let e = read_error(&python_pickle("{'segments': []}")?);
    assert!(
        e.to_string()
            .starts_with("not a PyTorch memory snapshot: no 'device_traces' (torch.cuda"),
        "{e}"
    );
    let e = read_error(&python_pickle(
        "{'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 1, 'size': -5}]]}",
    )?);
    assert_eq!(
        e.to_string(),
        "not a PyTorch memory snapshot: device_traces[0][0]: 'size' is -5, not a byte count or \
         address"
    );
    let e = read_error(&python_pickle(
        "{'segments': [], 'device_traces': [[{'action': 'alloc', 'size': 5}]]}",
    )?);
    assert_eq!(
        e.to_string(),
        "not a PyTorch memory snapshot: device_traces[0][0]: no 'addr'"
    );
    let e = read_error(&python_pickle(
        "{'segments': [{'device': 0}], 'device_traces': []}",
    )?);
    assert_eq!(
        e.to_string(),
        "not a PyTorch memory snapshot: segments[0]: no 'address'"
    );
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("no-history.pickle");
    std::fs::write(
        &path,
        python_pickle("{'segments': [], 'device_traces': [[]]}")?,
    )?;
    let e = read_alloc_traces(&path).expect_err("nothing to replay");
    // A genuine snapshot: no "not a PyTorch memory snapshot" for it, and what to do.
    assert!(
        e.to_string()
            .starts_with("a snapshot with no allocations recorded")
            && e.to_string()
                .contains("Record a history with torch.cuda.memory._record_memory_history()"),
        "{e}"
    );
    Ok(())
}

#[test]
fn annotations_go_to_external_annotations_not_the_trace() -> Result<()> {
    let a = CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
    a.record_history(true);
    a.record_annotation("1. make a block");
    let b = a.malloc(4096, StreamId(0))?;
    a.record_annotation("2. drop it");
    a.free(b, Vec::new());
    let snapshot = a.snapshot();
    let mut bytes = Vec::new();
    gpumem::snapshot_pickle::write_snapshot(&snapshot, &mut bytes)?;
    let mut read = Vec::new();
    let contents = read_snapshot(bytes.as_slice(), |_, e| read.push(e.action))?;
    let without: Vec<_> = snapshot
        .trace
        .iter()
        .map(|e| e.action)
        .filter(|a| *a != gpumem::TraceAction::Annotation)
        .collect();
    assert_eq!(read, without);
    assert_eq!(contents.entries, vec![without.len()]);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("annotated.pickle");
    dump_snapshot(&snapshot, &path)?;
    let script = r#"
import pickle, sys
snap = pickle.load(open(sys.argv[1], 'rb'))
print([a['name'] for a in snap['external_annotations']])
"#;
    let out = python(script, &path, &snapshot)?;
    assert_eq!(out.trim(), "['1. make a block', '2. drop it']");
    Ok(())
}
