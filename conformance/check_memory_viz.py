#!/usr/bin/env python3
"""Runs torch 2.15.0's torch/cuda/_memory_viz.py on gpumem's snapshot pickles: every command.

    python3 conformance/check_memory_viz.py VIEWER_DIR BEFORE.pickle AFTER.pickle [MORE.pickle...]

VIEWER_DIR holds _memory_viz.py (scripts/torch-viewer-files.sh prints it). The text commands
(`stats`, `trace`) run as torch's command line runs them, and must exit 0 and print the
snapshot's segments and trace. The flamegraph commands (`segments`, `memory`, `compare`) run
through the module's own functions with the flamegraph lines returned as they are, because
turning them into SVG needs flamegraph.pl from GitHub, which CI cannot reach; the lines are
what _memory_viz.py reads out of the snapshot. `compare` gets the two snapshots' segment lists:
torch 2.15.0's own command line passes it whole snapshots and fails on every snapshot (see below). The HTML commands (`trace_plot`, with and without
`--segments`, and `segment_plot`) must write a page that embeds the snapshot. Needs no torch.

A snapshot with pinned host memory (torch 2.15's `host_segments` and `host_traces`, written with
`record_pinned_host_memory=True`) must have both keys in torch's layout, and every command above
must work on it. torch 2.15.0's _memory_viz.py never reads those keys (the file names neither),
so its text output is checked to be the same with the host keys removed: the host data is
ignored, not misread. (MemoryViz.js, the web viewer, is not in the wheel and is not checked.)
"""

import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile


def main():
    viewer, before, after = sys.argv[1:4]
    more = sys.argv[4:]
    script = os.path.join(viewer, "_memory_viz.py")
    spec = importlib.util.spec_from_file_location("_memory_viz", script)
    viz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(viz)
    failures = []

    def check(name, ok, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(name)

    for path in [before, after] + more:
        with open(path, "rb") as f:
            data = pickle.load(f)
        label = os.path.basename(path)
        for key in ["host_segments", "host_traces"]:
            check(f"{key} {label}", isinstance(data.get(key), list), "a list, as torch 2.15 writes")
        if data.get("host_segments"):
            check_host(data, label, check)
            check_host_ignored(script, data, path, label, check)
        segments = len(data["segments"])
        traced = sum(len(t) for t in data["device_traces"])
        for command in ["stats", "trace"]:
            run = subprocess.run([sys.executable, script, command, path],
                                 capture_output=True, text=True)
            text = run.stdout
            ok = run.returncode == 0 and text.strip() != ""
            if command == "stats":
                ok = ok and f"{segments} segments" in text.replace("segment ", "segments ") or (
                    ok and "Summary" in text)
            if command == "trace":
                ok = ok and (traced == 0 or text.count("\n") >= traced)
            check(f"{command} {label}", ok,
                  f"exit {run.returncode}, {len(text.splitlines())} lines"
                  + (f"; stderr: {run.stderr.strip()[-300:]}" if run.returncode else ""))
        identity = lambda lines: lines  # noqa: E731
        for name, fn in [("segments", viz.segments), ("memory", viz.memory)]:
            try:
                lines = fn(data, format_flamegraph=identity)
                check(f"{name} {label}", bool(lines.strip()), f"{len(lines.splitlines())} flamegraph lines")
            except Exception as e:  # noqa: BLE001
                check(f"{name} {label}", False, repr(e))
        with tempfile.TemporaryDirectory() as tmp:
            for command, extra in [("trace_plot", []), ("trace_plot", ["--segments"]),
                                   ("segment_plot", [])]:
                out = os.path.join(tmp, "out.html")
                run = subprocess.run([sys.executable, script, command, path, "-o", out] + extra,
                                     capture_output=True, text=True)
                html = open(out).read() if os.path.exists(out) else ""
                ok = run.returncode == 0 and "MemoryViz.js" in html and len(html) > 1000
                check(f"{command} {' '.join(extra)} {label}".replace("  ", " "), ok,
                      f"exit {run.returncode}, {len(html)} bytes of HTML"
                      + (f"; stderr: {run.stderr.strip()[-300:]}" if run.returncode else ""))
    with open(before, "rb") as f:
        a = pickle.load(f)
    with open(after, "rb") as f:
        b = pickle.load(f)
    # torch 2.15.0's command line passes compare() whole snapshots (its _read makes a dict even of
    # a bare segment list), which compare() iterates as segment lists: `compare` fails with
    # "TypeError: string indices must be integers" on every snapshot, torch's own included. The
    # function itself takes the segment lists, as here.
    try:
        lines = viz.compare(a["segments"], b["segments"], format_flamegraph=lambda lines: lines)
        check("compare", isinstance(lines, str), f"{len(lines.splitlines())} flamegraph lines")
    except Exception as e:  # noqa: BLE001
        check("compare", False, repr(e))
    if failures:
        print(f"{len(failures)} of torch 2.15.0's _memory_viz.py commands failed on gpumem's snapshots")
        return 1
    print("every command of torch 2.15.0's _memory_viz.py works on gpumem's snapshots")
    return 0


HOST_SEGMENT_KEYS = ["device", "address", "total_size", "allocated_size", "active_size",
                     "requested_size", "stream", "segment_type", "segment_pool_id",
                     "is_expandable", "frames", "blocks"]
HOST_BLOCK_KEYS = ["address", "size", "requested_size", "state", "frames"]
# A trace entry's keys in torch 2.15 (its frames come last, and only with a recorded stack).
TRACE_KEYS = ["action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata",
              "pool_id"]
TRACE_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free"}


def check_host(data, label, check):
    """The host keys in torch 2.15's layout (THCPModule_memorySnapshot in its libtorch_python.so):
    each pinned block a segment of device -1 with one block the whole size; the trace entries as
    the device's, with the host allocator's actions only."""
    for i, s in enumerate(data["host_segments"]):
        blocks = s.get("blocks", [])
        ok = (list(s) == HOST_SEGMENT_KEYS and s["device"] == -1 and s["stream"] == 0
              and s["segment_type"] == "small" and s["segment_pool_id"] == (0, 0)
              and len(blocks) == 1 and list(blocks[0]) == HOST_BLOCK_KEYS
              and blocks[0]["size"] == s["total_size"] == s["requested_size"]
              and blocks[0]["state"] in ("active_allocated", "active_pending_free", "inactive"))
        check(f"host_segments[{i}] {label}", ok, f"keys {list(s)}")
    actions = [e.get("action") for e in data["host_traces"]]
    ok = bool(actions) and set(actions) <= TRACE_ACTIONS and all(
        list(e) in (TRACE_KEYS, TRACE_KEYS + ["frames"]) for e in data["host_traces"])
    check(f"host_traces {label}", ok, f"{len(actions)} entries: {sorted(set(actions))}")


def check_host_ignored(script, data, path, label, check):
    """_memory_viz.py's text commands print the same with and without the host keys."""
    stripped = {k: v for k, v in data.items() if k not in ("host_segments", "host_traces")}
    with tempfile.TemporaryDirectory() as tmp:
        other = os.path.join(tmp, os.path.basename(path))
        with open(other, "wb") as f:
            pickle.dump(stripped, f)
        for command in ["stats", "trace"]:
            outs = [subprocess.run([sys.executable, script, command, p], capture_output=True,
                                   text=True).stdout.replace(other, path) for p in [path, other]]
            check(f"{command} ignores the host keys {label}", outs[0] == outs[1])


if __name__ == "__main__":
    sys.exit(main())
