#!/usr/bin/env python3
"""Replay gpumem allocation traces through PyTorch's CUDA caching allocator.

Prints the columns `workbook replay` prints for gpumem's allocator -- peak requested, peak
allocated, peak reserved, reserved/requested at the peak, device reservations (num_device_alloc),
time per event -- so that the two are compared on the same GPU in the same session:

    cargo run --release -p workbook -- replay --device cuda bench/traces/*.json
    python3 bench/torch_replay.py bench/traces/*.json

Each event is one call: torch.cuda.caching_allocator_alloc(size, device, stream) or
torch.cuda.caching_allocator_delete(ptr); the figures come from torch.cuda.memory_stats().
--raw calls the C++ entry points behind those two functions directly
(torch._C._cuda_cudaCachingAllocator_raw_alloc / _raw_delete), which removes most of the Python
wrapper's cost from the time per event (the allocator's rules, and so the peaks, are the same).

Needs PyTorch built with CUDA and an NVIDIA GPU; without them it stops with a message saying
which is missing (exit status 1). A malformed trace stops it with exit status 2. The trace format
is documented in bench/README.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

FORMAT = "gpumem-alloc-trace"
VERSION = 1


class TraceError(Exception):
    """A trace file that cannot be replayed."""


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def load_trace(path):
    """Reads and checks a trace; returns (description, steps, number of allocs, number of events).

    A step is (slot, size, stream) for an alloc and (slot,) for a free; slots number the allocs in
    order. The checks are those of gpumem::trace (unknown op, free of an unknown id, double free,
    reused id), each naming the event index.
    """
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(
            f"{path}: malformed trace JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    if not isinstance(data, dict):
        raise TraceError(
            f'{path}: a trace is an object {{"format": "{FORMAT}", "version": {VERSION}, '
            f'"events": [...]}}, not a {type(data).__name__}'
        )
    if data.get("format") != FORMAT:
        raise TraceError(f'{path}: not a gpumem allocation trace ("format" must be "{FORMAT}")')
    if data.get("version") != VERSION:
        raise TraceError(
            f"{path}: trace format version {data.get('version')!r} is not supported "
            f"(this script reads version {VERSION})"
        )
    events = data.get("events")
    if not isinstance(events, list):
        raise TraceError(f'{path}: not a gpumem allocation trace: no "events" list')
    ids = {}  # id -> [slot, alloc event, free event or None]
    steps = []
    for index, event in enumerate(events):
        where = f"{path}: event {index}"
        if not isinstance(event, dict):
            raise TraceError(f'{where}: expected an object such as {{"op":"free","id":3}}')
        op = event.get("op")
        if op not in ("alloc", "free", "empty_cache"):
            raise TraceError(
                f'{where}: unknown op {op!r} (expected "alloc", "free" or "empty_cache")'
            )
        allowed = {"alloc": {"op", "id", "size", "stream"}, "free": {"op", "id"}}.get(op, {"op"})
        extra = sorted(set(event) - allowed)
        if extra:
            raise TraceError(f"{where}: unknown field {extra[0]!r} in a {op} event")
        if op == "empty_cache":
            steps.append(())  # torch.cuda.empty_cache()
            continue
        ident = event.get("id")
        if not _whole(ident):
            raise TraceError(f'{where}: "id" must be a whole number >= 0, found {ident!r}')
        if op == "alloc":
            size = event.get("size")
            stream = event.get("stream", 0)
            if not _whole(size) or size == 0:
                raise TraceError(f'{where}: "size" must be a whole number >= 1, found {size!r}')
            if not _whole(stream):
                raise TraceError(f'{where}: "stream" must be a whole number >= 0, found {stream!r}')
            if ident in ids:
                raise TraceError(
                    f"{where}: id {ident} was already allocated by event {ids[ident][1]} "
                    "(ids are never reused)"
                )
            slot = len(ids)
            ids[ident] = [slot, index, None]
            steps.append((slot, size, stream))
        else:
            entry = ids.get(ident)
            if entry is None:
                raise TraceError(f"{where}: free of id {ident}, which no earlier event allocated")
            if entry[2] is not None:
                raise TraceError(
                    f"{where}: double free of id {ident} (event {entry[2]} already freed it)"
                )
            entry[2] = index
            steps.append((entry[0],))
    description = data.get("description", "")
    return description, steps, len(ids), len(events)


def import_torch_with_cuda(script):
    """PyTorch, once it is known to have CUDA and a GPU; else exits with a clear message."""
    try:
        import torch
    except ImportError:
        sys.exit(
            f"{script}: PyTorch is not installed for {sys.executable} (pip install torch). "
            "This script compares gpumem's allocator with PyTorch's on an NVIDIA GPU."
        )
    if not torch.cuda.is_available():
        sys.exit(
            f"{script}: PyTorch {torch.__version__} sees no CUDA GPU "
            f"(torch.cuda.is_available() is False; built with CUDA {torch.version.cuda}). "
            "Run it on a machine with an NVIDIA GPU and its driver."
        )
    return torch


def driver_version():
    """The NVIDIA driver's version from nvidia-smi, or 'unknown'."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else "unknown"
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def format_bytes(n):
    """As gpumem::format_bytes: 512 B, 2.00 MiB."""
    if n is None:
        return "n/a"
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"


def replay_once(torch, steps, slots, device, streams, alloc, delete):
    """One replay from an empty cache; returns (stats dict, elapsed ns)."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    torch.cuda.reset_accumulated_memory_stats(device)
    before = torch.cuda.memory_stats(device)
    if before.get("allocated_bytes.all.current", 0) != 0:
        sys.exit(
            "torch_replay.py: PyTorch's allocator already holds live blocks on this device; "
            "run the script in a fresh process"
        )
    ptrs = [0] * slots
    start = time.perf_counter_ns()
    for step in steps:
        if len(step) == 3:
            ptrs[step[0]] = alloc(step[1], streams[step[2]])
        elif not step:
            torch.cuda.empty_cache()
        else:
            delete(ptrs[step[0]])
            ptrs[step[0]] = 0
    elapsed = time.perf_counter_ns() - start
    stats = torch.cuda.memory_stats(device)
    for ptr in ptrs:
        if ptr:
            delete(ptr)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()

    def counter(key):
        if key not in stats:
            return None
        return stats[key] - before.get(key, 0)

    result = {
        "peak_requested_bytes": stats.get("requested_bytes.all.peak"),
        "peak_allocated_bytes": stats.get("allocated_bytes.all.peak"),
        "peak_reserved_bytes": stats.get("reserved_bytes.all.peak"),
        "num_device_alloc": counter("num_device_alloc"),
        "num_device_free": counter("num_device_free"),
        "num_alloc_retries": counter("num_alloc_retries"),
    }
    return result, elapsed


def python_loop_ns(steps, slots):
    """The same loop with calls that do nothing: the interpreter's share of the time per event."""

    def alloc(size, stream):
        return 1

    def delete(ptr):
        return None

    ptrs = [0] * slots
    start = time.perf_counter_ns()
    for step in steps:
        if len(step) == 3:
            ptrs[step[0]] = alloc(step[1], step[2])
        elif step:
            delete(ptrs[step[0]])
            ptrs[step[0]] = 0
    return (time.perf_counter_ns() - start) / max(len(steps), 1)


def main():
    parser = argparse.ArgumentParser(
        description="Replay gpumem allocation traces through PyTorch's CUDA caching allocator."
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE.json")
    parser.add_argument("--device", default="cuda:0", help="the GPU (default: cuda:0)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="replays per trace; the time per event is their median (default: 5)",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="call torch._C's raw_alloc/raw_delete instead of the Python wrappers",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    loaded = []
    for path in args.traces:
        try:
            loaded.append((path, *load_trace(path)))
        except TraceError as e:
            print(f"torch_replay.py: {e}", file=sys.stderr)
            sys.exit(2)

    torch = import_torch_with_cuda("torch_replay.py")
    device = torch.device(args.device)
    if device.type != "cuda":
        sys.exit(f"torch_replay.py: --device {args.device}: expected cuda or cuda:N")
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_device(index)
    device = torch.device("cuda", index)

    if args.raw:
        raw_alloc = torch._C._cuda_cudaCachingAllocator_raw_alloc
        delete = torch._C._cuda_cudaCachingAllocator_raw_delete
        api = "torch._C raw_alloc/raw_delete"

        def alloc(size, stream):
            return raw_alloc(size, stream)
    else:
        public_alloc = torch.cuda.caching_allocator_alloc
        delete = torch.cuda.caching_allocator_delete
        api = "torch.cuda.caching_allocator_alloc/delete"

        def alloc(size, stream):
            return public_alloc(size, index, stream)

    results = []
    for path, description, steps, slots, events in loaded:
        # Trace stream 0 is the legacy default stream (as in gpumem); others get a stream each.
        numbers = sorted({step[2] for step in steps if len(step) == 3})
        stream_objects = {
            n: torch.cuda.default_stream(device) if n == 0 else torch.cuda.Stream(device)
            for n in numbers
        }
        streams = {n: s.cuda_stream for n, s in stream_objects.items()}
        first = None
        times = []
        for _ in range(args.repeat):
            stats, elapsed = replay_once(torch, steps, slots, device, streams, alloc, delete)
            times.append(elapsed / max(events, 1))
            if first is None:
                first = stats
            elif stats != first:
                print(
                    f"torch_replay.py: warning: {path}: two replays gave different counts: "
                    f"{first} and {stats}",
                    file=sys.stderr,
                )
        requested = first["peak_requested_bytes"]
        reserved = first["peak_reserved_bytes"]
        ratio = reserved / requested if requested and reserved is not None else None
        results.append(
            {
                "trace": Path(path).stem,
                "path": str(path),
                "allocator": f"torch {torch.__version__}",
                "api": api,
                "device": str(device),
                "events": events,
                "allocs": slots,
                "frees": sum(1 for s in steps if len(s) == 1),
                **first,
                "reserved_over_requested": ratio,
                "ns_per_event": statistics.median(times),
                "python_loop_ns_per_event": python_loop_ns(steps, slots),
                "repeats": args.repeat,
            }
        )

    if args.json:
        print(json.dumps(results, indent=2))
        return
    props = torch.cuda.get_device_properties(device)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "torch's defaults"
    print(
        f"replay on {device} ({props.name}, driver {driver_version()}, "
        f"torch {torch.__version__} with CUDA {torch.version.cuda}; {api})"
    )
    print(
        f"allocator settings (PYTORCH_CUDA_ALLOC_CONF): {conf}; "
        f"time per event: the median of {args.repeat} replay(s)\n"
    )
    width = max([5] + [len(r["trace"]) for r in results])
    print(
        f"{'trace':<{width}}  {'events':>7}  {'peak requested':>14}  {'peak allocated':>14}  "
        f"{'peak reserved':>14}  {'reserved/requested':>18}  {'device allocs':>13}  "
        f"{'ns/event':>8}  {'python loop ns':>14}"
    )
    for r in results:
        ratio = "n/a" if r["reserved_over_requested"] is None else f"{r['reserved_over_requested']:.3f}"
        allocs = "n/a" if r["num_device_alloc"] is None else str(r["num_device_alloc"])
        print(
            f"{r['trace']:<{width}}  {r['events']:>7}  {format_bytes(r['peak_requested_bytes']):>14}  "
            f"{format_bytes(r['peak_allocated_bytes']):>14}  {format_bytes(r['peak_reserved_bytes']):>14}  "
            f"{ratio:>18}  {allocs:>13}  {r['ns_per_event']:>8.1f}  "
            f"{r['python_loop_ns_per_event']:>14.1f}"
        )


if __name__ == "__main__":
    main()
