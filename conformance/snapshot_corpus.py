#!/usr/bin/env python3
"""The snapshot corpus: small snapshot pickles in the schemas torch wrote from 2.0 to 2.15, each
with a history whose every figure is known, written with Python's own pickle; and the figures,
computed by an independent reconstruction that walks each trace back from the final segments as
torch's MemoryViz.js does.

  write DIR     writes the pickles into DIR and DIR/expected.json (the figures `workbook inspect
                --json` must give; the tests in crates/workbook/tests/snapshot_corpus.rs read them)
  check DIR VIEWER_DIR
                checks every pickle that torch 2.15's _memory_viz.py reads (VIEWER_DIR holds it:
                scripts/torch-viewer-files.sh prints it) against the reconstruction: its `stats`
                (segsum) must give the final state's segments, reserved and allocated bytes.

The files (see FILES below, and conformance/README.md):
  torch-2.0-block-history  2.0's schema: blocks without addresses, sizes asked for only in each
                           block's `history`; entries without `time_us`
  torch-2.1-no-time        2.1's schema: `requested_size` and `frames` on blocks; no `time_us`
  pre-recording            2.15: segments and blocks from before recording began (the trace cut
                           by max_entries), one of them freed by empty_cache() in the trace
  expandable-oom           2.15 with expandable_segments:True: pages mapped before recording, maps
                           and unmaps (one from the middle, splitting the mapping), an OOM
  cpp-frames               2.15 recorded with context="all": C++ and Python frames, two user
                           lines under the same allocator frames
  two-devices              2.15: device 0's peak is before its first entry, device 1 holds 10.5 GiB
  frag-oom                 2.15: bench/record_torch_snapshot.py's `frag` program as torch's allocator
                           runs it under a 2 GiB cap: an OOM from fragmentation (272 MiB free in
                           one segment, 160 MiB asked, no piece over 32 MiB)
  state-only               torch.cuda.memory._snapshot() with no history recorded (empty traces)
  list-form                the list torch.cuda.memory.memory_snapshot() returns (segments only)
  huge-size                an entry of 2^63 bytes: no snapshot holds one; to be refused

Python 3 standard library only.
"""

import json
import os
import pickle
import sys

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
T0 = 1_764_000_000_000_000


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


TRAIN = [frame("/home/u/proj/model.py", 41, "forward"), frame("/home/u/proj/train.py", 12, "step"),
         frame("/home/u/proj/train.py", 30, "<module>")]
DATA = [frame("/home/u/proj/data.py", 8, "load"), frame("/home/u/proj/train.py", 11, "step"),
        frame("/home/u/proj/train.py", 30, "<module>")]


def settings(conf="", expandable=False):
    return {
        "PYTORCH_CUDA_ALLOC_CONF": conf,
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": expandable,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(64)},
    }


class History:
    """Entries of one device in torch's schema (`time_us` left out for torch 2.1 and older)."""

    def __init__(self, times=True):
        self.entries = []
        self.times = times

    def add(self, action, addr, size, frames=(), stream=0):
        e = {"action": action, "addr": addr, "size": size, "stream": stream,
             "frames": list(frames)}
        if self.times:
            e["time_us"] = T0 + 10 * len(self.entries)
            e["pool_id"] = (0, 0)
        if action == "oom":
            e["device_free"] = e.pop("addr")
        self.entries.append(e)


def block(addr, size, requested, state, frames=()):
    return {"address": addr, "size": size, "requested_size": requested, "state": state,
            "frames": list(frames) if state != "inactive" else []}


def segment(addr, blocks, kind="large", device=0, stream=0, expandable=False):
    total = sum(b["size"] for b in blocks)
    live = [b for b in blocks if b["state"] != "inactive"]
    return {"device": device, "address": addr, "total_size": total,
            "allocated_size": sum(b["size"] for b in live if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in live),
            "requested_size": sum(b["requested_size"] for b in live),
            "stream": stream, "segment_type": kind, "segment_pool_id": (0, 0),
            "is_expandable": expandable, "frames": [], "blocks": blocks}


def snapshot(segments, traces, conf="", expandable=False):
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": settings(conf, expandable), "external_annotations": []}


def torch_2_0():
    """2.0: blocks carry `size`, `state` and a `history` of {addr, real_size, frames}."""
    A = 0x7F0000000000
    h = History(times=False)
    h.add("segment_alloc", A, 20 * MIB, TRAIN)
    h.add("alloc", A, 8 * MIB, TRAIN)
    h.add("alloc", A + 8 * MIB, 3 * MIB, TRAIN)
    h.add("free_requested", A, 8 * MIB, TRAIN)
    h.add("free_completed", A, 8 * MIB, TRAIN)
    seg = {"device": 0, "address": A, "total_size": 20 * MIB, "allocated_size": 3 * MIB,
           "active_size": 3 * MIB, "stream": 0, "segment_type": "large",
           "blocks": [
               {"size": 8 * MIB, "state": "inactive", "history": []},
               {"size": 3 * MIB, "state": "active_allocated",
                "history": [{"addr": A + 8 * MIB, "real_size": 3 * MIB, "frames": TRAIN}]},
               {"size": 9 * MIB, "state": "inactive", "history": []},
           ]}
    return {"segments": [seg], "device_traces": [h.entries]}


def torch_2_1():
    """2.1: no `time_us` in the entries yet."""
    A = 0x7F0000000000
    h = History(times=False)
    h.add("segment_alloc", A, 2 * MIB, DATA)
    h.add("alloc", A, 512 * KIB, DATA)
    h.add("alloc", A + 512 * KIB, 1 * MIB, DATA)
    h.add("free_requested", A, 512 * KIB, DATA)
    h.add("free_completed", A, 512 * KIB, DATA)
    h.add("oom", 1 * MIB, 64 * MIB, TRAIN)
    seg = segment(A, [block(A, 512 * KIB, 0, "inactive"),
                      block(A + 512 * KIB, MIB, MIB, "active_allocated", DATA),
                      block(A + 1536 * KIB, 512 * KIB, 0, "inactive")], kind="small")
    return {"segments": [seg], "device_traces": [h.entries],
            "allocator_settings": settings()}


def pre_recording():
    """Four segments reserved before recording began: the trace (cut by max_entries) starts
    with weights and a cached 64 MiB segment already there; it frees one old block and, by
    empty_cache(), the empty 64 MiB segment."""
    A, B, C, D = 0x7F0000000000, 0x7F0002000000, 0x7F0004000000, 0x7F0010000000
    h = History()
    h.add("alloc", A + 12 * MIB, 6 * MIB, TRAIN)
    h.add("free_requested", B, 8 * MIB, TRAIN)
    h.add("free_completed", B, 8 * MIB, TRAIN)
    h.add("alloc", B, 16 * MIB, TRAIN)
    h.add("segment_free", D, 64 * MIB, TRAIN)
    h.add("alloc", C + 512 * KIB, 256 * KIB, DATA)
    h.add("free_requested", A + 12 * MIB, 6 * MIB, TRAIN)
    h.add("free_completed", A + 12 * MIB, 6 * MIB, TRAIN)
    segs = [
        segment(A, [block(A, 12 * MIB, 12 * MIB, "active_allocated"),
                    block(A + 12 * MIB, 8 * MIB, 0, "inactive")]),
        segment(B, [block(B, 16 * MIB, 16 * MIB, "active_allocated", TRAIN),
                    block(B + 16 * MIB, 4 * MIB, 0, "inactive")]),
        segment(C, [block(C, 512 * KIB, 512 * KIB, "active_allocated"),
                    block(C + 512 * KIB, 256 * KIB, 256 * KIB, "active_allocated", DATA),
                    block(C + 768 * KIB, 1280 * KIB, 0, "inactive")], kind="small"),
    ]
    return snapshot(segs, [h.entries])


def expandable_oom():
    """expandable_segments:True: one reserved range on stream 0 whose pages are mapped 20 MiB at
    a time; 60 MiB were mapped before recording began; the job runs out of memory at the end."""
    E = 0x7E0000000000
    h = History()
    h.add("free_requested", E + 40 * MIB, 10 * MIB, TRAIN)
    h.add("free_completed", E + 40 * MIB, 10 * MIB, TRAIN)
    h.add("segment_unmap", E + 40 * MIB, 20 * MIB, TRAIN)
    h.add("segment_map", E + 40 * MIB, 40 * MIB, TRAIN)
    h.add("alloc", E + 40 * MIB, 30 * MIB, TRAIN)
    h.add("alloc", E + 70 * MIB, 4 * MIB, DATA)
    h.add("free_requested", E + 40 * MIB, 30 * MIB, TRAIN)
    h.add("free_completed", E + 40 * MIB, 30 * MIB, TRAIN)
    # empty_cache() unmaps the free pages in the middle: two mapped ranges are left.
    h.add("segment_unmap", E + 40 * MIB, 20 * MIB, TRAIN)
    h.add("oom", 8 * MIB, 48 * MIB, TRAIN)
    segs = [
        segment(E, [block(E, 40 * MIB, 40 * MIB, "active_allocated")], expandable=True),
        segment(E + 60 * MIB, [block(E + 60 * MIB, 10 * MIB, 0, "inactive"),
                               block(E + 70 * MIB, 4 * MIB, 4 * MIB, "active_allocated", DATA),
                               block(E + 74 * MIB, 6 * MIB, 0, "inactive")], expandable=True),
    ]
    return snapshot(segs, [h.entries], conf="expandable_segments:True", expandable=True)


def cpp_frames():
    """Recorded with context='all': each stack starts with torch's C++ allocator frames."""
    A = 0x7F0000000000
    cpp = [frame("??", 0, "torch::unwind::unwind()"),
           frame("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 0,
                 "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
           frame("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 0,
                 "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"),
           frame("/pytorch/aten/src/ATen/native/TensorFactories.cpp", 0, "at::native::empty_cuda"),
           frame("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward")]
    site1 = cpp + [frame("/home/u/proj/model.py", 41, "forward"),
                   frame("/home/u/proj/train.py", 12, "step")]
    site2 = cpp + [frame("/home/u/proj/model.py", 57, "forward"),
                   frame("/home/u/proj/train.py", 12, "step")]
    h = History()
    h.add("segment_alloc", A, 40 * MIB, site1)
    h.add("alloc", A, 12 * MIB, site1)
    h.add("alloc", A + 12 * MIB, 12 * MIB, site2)
    segs = [segment(A, [block(A, 12 * MIB, 12 * MIB, "active_allocated", site1),
                        block(A + 12 * MIB, 12 * MIB, 12 * MIB, "active_allocated", site2),
                        block(A + 24 * MIB, 16 * MIB, 0, "inactive")])]
    return snapshot(segs, [h.entries])


def frag_oom():
    """bench/record_torch_snapshot.py's `frag` program as torch 2.15's allocator runs it
    (CUDACachingAllocator.cpp) under a 2 GiB cap: a 2 MiB small segment from before recording
    (torch.empty(1)); a 512 MiB tensor freed, its segment cached; 16 tensors of 30 MiB carved
    from it; 22 of 64 MiB, each in a segment of its own (32 MiB is left in the first); every other
    30 MiB tensor freed (272 MiB free in the first segment, none of it 160 MiB in one piece); then
    160 MiB is asked for: a new segment would be 2,082 MiB under the 2,048 MiB cap, torch frees
    the only whole free segment (the small one: segment_free) and gives up (oom)."""
    A, B, S = 0x7F0000000000, 0x7F4000000000, 0x7E0000000000
    user = [frame("/home/u/proj/frag.py", 9, "fragment"), frame("/home/u/proj/frag.py", 30, "<module>")]
    small_at = [A + i * 30 * MIB for i in range(16)]
    fill_at = [B + i * 64 * MIB for i in range(22)]
    h = History()
    h.add("segment_alloc", A, 512 * MIB, user)
    h.add("alloc", A, 512 * MIB, user)
    h.add("free_requested", A, 512 * MIB, user)
    h.add("free_completed", A, 512 * MIB, user)
    for a in small_at:
        h.add("alloc", a, 30 * MIB, user)
    for a in fill_at:
        h.add("segment_alloc", a, 64 * MIB, user)
        h.add("alloc", a, 64 * MIB, user)
    for a in small_at[0::2]:
        h.add("free_requested", a, 30 * MIB, user)
        h.add("free_completed", a, 30 * MIB, user)
    h.add("segment_free", S, 2 * MIB, user)
    h.add("oom", 82_262_327_296, 160 * MIB, user)
    first = []
    for i, a in enumerate(small_at):
        if i % 2 == 0:
            first.append(block(a, 30 * MIB, 0, "inactive"))
        else:
            first.append(block(a, 30 * MIB, 30 * MIB, "active_allocated", user))
    first.append(block(A + 480 * MIB, 32 * MIB, 0, "inactive"))
    segs = [segment(A, first)] + [
        segment(a, [block(a, 64 * MIB, 64 * MIB, "active_allocated", user)]) for a in fill_at]
    return snapshot(segs, [h.entries])


def two_devices():
    """Device 0 frees 1 GiB held from before recording (its peak is before its first entry);
    device 1 reserves and allocates 10.5 GiB."""
    A, B = 0x7F0000000000, 0x7E0000000000
    size = 10 * GIB + 512 * MIB
    d0, d1 = History(), History()
    d0.add("free_requested", A, GIB, TRAIN)
    d0.add("free_completed", A, GIB, TRAIN)
    d1.add("segment_alloc", B, size, TRAIN)
    d1.add("alloc", B, size, TRAIN)
    segs = [segment(A, [block(A, GIB, 0, "inactive")], device=0),
            segment(B, [block(B, size, size, "active_allocated", TRAIN)], device=1)]
    return snapshot(segs, [d0.entries, d1.entries])


def state_segments():
    A, C = 0x7F0000000000, 0x7F0004000000
    return [
        segment(A, [block(A, 6 * MIB, 6 * MIB, "active_allocated", TRAIN),
                    block(A + 6 * MIB, 4 * MIB, 0, "inactive"),
                    block(A + 10 * MIB, 2 * MIB, 2 * MIB, "active_allocated", TRAIN),
                    block(A + 12 * MIB, 8 * MIB, 0, "inactive")]),
        segment(C, [block(C, 512 * KIB, 512 * KIB, "active_allocated", DATA),
                    block(C + 512 * KIB, 1536 * KIB, 0, "inactive")], kind="small"),
    ]


def state_only():
    """torch.cuda.memory._snapshot() when no history was recorded: the traces are empty."""
    return snapshot(state_segments(), [[]])


def list_form():
    """torch.cuda.memory.memory_snapshot(): the list of segments alone."""
    return state_segments()


def huge_size():
    A = 0x7F0000000000
    h = History()
    h.add("alloc", A, 1 << 63, TRAIN)
    return snapshot([], [h.entries])


FILES = {
    "torch-2.0-block-history": torch_2_0,
    "torch-2.1-no-time": torch_2_1,
    "pre-recording": pre_recording,
    "expandable-oom": expandable_oom,
    "cpp-frames": cpp_frames,
    "two-devices": two_devices,
    "frag-oom": frag_oom,
    "state-only": state_only,
    "list-form": list_form,
    "huge-size": huge_size,
}


# --- The independent reconstruction: MemoryViz.js's walk back from the final segments. ---

def rounded(n):
    return (n + 511) // 512 * 512


def requested_of(b):
    """What a block asked for, as _memory_viz.py's _block_extra reads it in every schema."""
    if "requested_size" in b:
        return b["requested_size"]
    if b.get("history"):
        return b["history"][0]["real_size"]
    return b["size"]


def final_state(segments, device):
    """(mapped ranges {start: [size, stream, expandable]}, blocks {addr: (extent, asked)})."""
    mapped, blocks = {}, {}
    for s in segments:
        if s["device"] != device:
            continue
        mapped[s["address"]] = [s["total_size"], s["stream"], s.get("is_expandable", False)]
        at = s["address"]
        for b in s["blocks"]:
            addr = b.get("address", at)
            if b["state"] != "inactive":
                blocks[addr] = (b["size"], requested_of(b))
            at = addr + b["size"]
    return mapped, blocks


def unmap_range(mapped, start, size):
    end = start + size
    for a in sorted(mapped):
        s, stream, exp = mapped[a]
        if a < end and a + s > start:
            del mapped[a]
            if a < start:
                mapped[a] = [start - a, stream, exp]
            if a + s > end:
                mapped[end] = [a + s - end, stream, exp]


def segments_of(mapped):
    """torch's segments: contiguous mapped ranges of one stream's expandable segment are one."""
    out = []
    for a in sorted(mapped):
        s, stream, exp = mapped[a]
        if out and exp and out[-1][3] and out[-1][2] == stream and out[-1][0] + out[-1][1] == a:
            out[-1][1] += s
        else:
            out.append([a, s, stream, exp])
    return out


def figures(mapped, blocks):
    segs = segments_of(mapped)
    frees, by_class = [], {}
    for a, s, _, exp in segs:
        inside = sorted((b, blocks[b][0]) for b in blocks if a <= b < a + s)
        cursor, free = a, []
        for b, extent in inside:
            if b > cursor:
                free.append(b - cursor)
            cursor = max(cursor, b + extent)
        if cursor < a + s:
            free.append(a + s - cursor)
        frees += free
        cls = "expandable" if exp else {2 * MIB: "2 MiB", 20 * MIB: "20 MiB"}.get(s, "other")
        row = by_class.setdefault(cls, {"class": cls, "segments": 0, "reserved": 0, "free": 0})
        row["segments"] += 1
        row["reserved"] += s
        row["free"] += sum(free)
    reserved = sum(s for _, s, _, _ in segs)
    order = ["2 MiB", "20 MiB", "other", "expandable"]
    return {
        "segments": len(segs),
        "reserved": reserved,
        "allocated": sum(asked for _, asked in blocks.values()),
        "largest_free_block": max(frees, default=0),
        "free_in_segments": sum(frees),
        "by_class": sorted(by_class.values(), key=lambda r: order.index(r["class"])),
        "viewer_fragmentation": (sum(f * f for f in frees) / (reserved * reserved)
                                 if reserved else 0.0),
    }


def undo(e, mapped, blocks):
    a, s = e.get("addr"), e["size"]
    act = e["action"]
    if act == "alloc":
        blocks.pop(a, None)
    elif act == "free_completed":
        blocks[a] = (rounded(s), s)
    elif act == "segment_alloc":
        mapped.pop(a, None)
    elif act == "segment_free":
        mapped[a] = [s, e["stream"], False]
    elif act == "segment_map":
        unmap_range(mapped, a, s)
    elif act == "segment_unmap":
        mapped[a] = [s, e["stream"], True]


def redo(e, mapped, blocks):
    a, s = e.get("addr"), e["size"]
    act = e["action"]
    if act == "alloc":
        blocks[a] = (rounded(s), s)
    elif act == "free_completed":
        blocks.pop(a, None)
    elif act == "segment_alloc":
        mapped[a] = [s, e["stream"], False]
    elif act == "segment_free":
        mapped.pop(a, None)
    elif act == "segment_map":
        mapped[a] = [s, e["stream"], True]
    elif act == "segment_unmap":
        unmap_range(mapped, a, s)


def reconstruct(data):
    """Per device: the figures at the allocated peak, at the end, and at each OOM."""
    if isinstance(data, list):
        data = {"segments": data, "device_traces": []}
    traces = data.get("device_traces", [])
    devices = sorted({s["device"] for s in data["segments"]} |
                     {d for d, t in enumerate(traces) if t})
    out = []
    for d in devices:
        trace = traces[d] if d < len(traces) else []
        mapped, blocks = final_state(data["segments"], d)
        end = figures(mapped, blocks)
        for e in reversed(trace):
            undo(e, mapped, blocks)
        before = figures(mapped, blocks)
        peak = (before["allocated"], None, before)
        peak_reserved = (before["reserved"], None)
        ooms = []
        for i, e in enumerate(trace):
            redo(e, mapped, blocks)
            allocated = sum(asked for _, asked in blocks.values())
            if allocated > peak[0]:
                peak = (allocated, i, figures(mapped, blocks))
            reserved = sum(s for s, _, _ in mapped.values())
            if reserved > peak_reserved[0]:
                peak_reserved = (reserved, i)
            if e["action"] == "oom":
                f = figures(mapped, blocks)
                ooms.append({"event": i, "requested": e["size"], "device_free": e["device_free"],
                             "allocated": f["allocated"], "reserved": f["reserved"],
                             "largest_free_block": f["largest_free_block"],
                             "free_in_segments": f["free_in_segments"]})
        at = peak[2]
        out.append({
            "device": d,
            "events": len(trace),
            "history": bool(trace),
            "peak_allocated": {"bytes": peak[0], "event": peak[1]},
            "peak_reserved": {"bytes": peak_reserved[0], "event": peak_reserved[1]},
            "reserved_at_peak": at["reserved"],
            "segments_at_peak": at["segments"],
            "fragmentation": {"largest_free_block": at["largest_free_block"],
                              "reserved_minus_allocated": at["reserved"] - peak[0],
                              "by_class": at["by_class"],
                              "viewer_fragmentation": at["viewer_fragmentation"]},
            "segments_at_end": end["segments"],
            "reserved_at_end": end["reserved"],
            "allocated_at_end": end["allocated"],
            "ooms": ooms,
        })
    return out


def write(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    expected = {}
    for name, make in FILES.items():
        data = make()
        with open(os.path.join(out_dir, name + ".pickle"), "wb") as f:
            pickle.dump(data, f, protocol=4)
        if name != "huge-size":
            expected[name] = reconstruct(data)
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


def check(out_dir, viewer_dir):
    """torch 2.15's _memory_viz.py `stats` on each file it reads: its final segments, reserved
    and allocated bytes must be the reconstruction's (every device's together)."""
    sys.path.insert(0, viewer_dir)
    import _memory_viz  # noqa: E402  (torch 2.15's file, never committed)

    expected = json.load(open(os.path.join(out_dir, "expected.json")))
    failures = 0
    for name in expected:
        data = pickle.load(open(os.path.join(out_dir, name + ".pickle"), "rb"))
        if isinstance(data, list):  # as _memory_viz.py's _read does
            data = {"segments": data, "traces": []}
        text = _memory_viz.segsum(data)
        got = {line.split(":")[0]: line.split(":", 1)[1].strip()
               for line in text.splitlines() if line.startswith(("segments:", "total_"))}
        devices = expected[name]
        want = {
            "segments": str(sum(d["segments_at_end"] for d in devices)),
            "total_reserved": repr(_memory_viz.Bytes(sum(d["reserved_at_end"] for d in devices))),
            "total_allocated": repr(_memory_viz.Bytes(sum(d["allocated_at_end"] for d in devices))),
        }
        for key, value in want.items():
            ok = got.get(key) == value
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: {key} torch {got.get(key)}, "
                  f"reconstruction {value}")
    return failures


def main(argv):
    if len(argv) >= 2 and argv[0] == "write":
        write(argv[1])
        return 0
    if len(argv) >= 3 and argv[0] == "check":
        return 1 if check(argv[1], argv[2]) else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
