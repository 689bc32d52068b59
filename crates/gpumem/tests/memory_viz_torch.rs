//! torch 2.15's own snapshot tools read gpumem's snapshots: `python -m torch.cuda._memory_viz`
//! with each of its commands on a pickle gpumem wrote.
//!
//! Needs a Python with torch 2.15 installed: set `GPUMEM_TORCH_PYTHON` to it (for example
//! `/root/.cache/gpumem-workbook/torch-2.15.0/bin/python`). Without it the test says so and
//! passes without checking anything.

use gpumem::allocator::{CachingAllocator, PendingUse, StreamId};
use gpumem::backend_cpu::CpuBackend;
use gpumem::snapshot_pickle::dump_snapshot;
use gpumem::{AllocatorConfig, HistoryOptions};
use std::process::Command;

const MIB: usize = 1 << 20;

/// Work on another stream, finished when the allocator next asks.
struct Idle;

impl PendingUse for Idle {
    fn is_done(&self) -> bool {
        true
    }
    fn wait(&self) {}
}

/// Calls `_memory_viz.<function>` on the pickle with a flame-graph formatter that returns its
/// input lines, and prints them.
const FLAME_LINES: &str = r#"
import pickle, sys
from torch.cuda import _memory_viz as viz
with open(sys.argv[1], 'rb') as f:
    snapshot = pickle.load(f)
args = [snapshot['segments']] * 2 if sys.argv[2] == 'compare' else [snapshot]
print(getattr(viz, sys.argv[2])(*args, format_flamegraph=lambda lines: lines))
"#;

/// Runs `cmd`; its standard output, or an error with its standard error.
fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "_memory_viz {what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn torch_2_15_memory_viz_reads_a_gpumem_snapshot_with_every_command() -> anyhow::Result<()> {
    let Some(python) = std::env::var_os("GPUMEM_TORCH_PYTHON") else {
        eprintln!(
            "skipped: set GPUMEM_TORCH_PYTHON to a Python with torch 2.15 to run torch's \
             _memory_viz on a gpumem snapshot"
        );
        return Ok(());
    };
    let a = CachingAllocator::new(CpuBackend::new(64 * MIB), "cpu", AllocatorConfig::default());
    a.record_history_options(HistoryOptions::default());
    let s0 = StreamId(0);
    let small = a.malloc(700 << 10, s0)?;
    let large = a.malloc(3 * MIB, s0)?;
    let other = a.malloc(12 * MIB, StreamId(1))?;
    a.free(small, vec![Box::new(Idle)]);
    a.free(other, Vec::new());
    a.empty_cache();
    assert!(a.malloc(100 * MIB, s0).is_err(), "an out-of-memory entry");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("gpumem.pickle");
    dump_snapshot(&a.snapshot(), &path)?;
    // The commands that print text or write the HTML viewer, as a user runs them.
    for (command, expect) in [
        ("stats", "total_reserved: 20.0MiB"),
        ("trace", "raise OutOfMemoryError"),
        ("trace_plot", ""),
        ("segment_plot", ""),
    ] {
        let html = dir.path().join(format!("{command}.html"));
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "torch.cuda._memory_viz", command])
            .arg(&path);
        if command.ends_with("_plot") {
            cmd.arg("-o").arg(&html);
        }
        let stdout = run(&mut cmd, command)?;
        assert!(stdout.contains(expect), "_memory_viz {command}:\n{stdout}");
        if command.ends_with("_plot") {
            let page = std::fs::read_to_string(&html)?;
            assert!(page.contains("<script"), "{command} wrote no viewer page");
        }
    }
    // `segments`, `memory` and `compare` end by running flamegraph.pl, which they download: their
    // functions are called with the flame graph's input lines returned instead. (torch 2.15's
    // `compare` command passes whole snapshots to `compare`, which wants segment lists, so it fails
    // on torch's own files too; the function is given the segment lists.)
    for (function, expect) in [
        ("segments", "stream_0;seg_"),
        ("memory", "stream_0;"),
        ("compare", "only_before = []"),
    ] {
        let mut cmd = Command::new(&python);
        cmd.arg("-c").arg(FLAME_LINES).arg(&path).arg(function);
        let stdout = run(&mut cmd, function)?;
        assert!(stdout.contains(expect), "_memory_viz.{function}:\n{stdout}");
    }
    a.free(large, Vec::new());
    Ok(())
}
