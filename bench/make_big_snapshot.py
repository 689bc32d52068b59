#!/usr/bin/env python3
"""Writes a memory snapshot pickle in torch 2.15's schema with Python's own pickle module.

The schema is that of torch.cuda.memory._snapshot() (torch/cuda/memory.py, torch 2.15.0): a dict
with 'segments' (each with its 'blocks'), 'device_traces' (one list of trace entries per device),
'allocator_settings' and 'external_annotations'. Every trace entry carries 'frames', a list of
frame dicts ('filename', 'line', 'name'). torch builds each distinct frame dict once and shares it
between the entries' lists (py_symbolize in torch/csrc/profiler/combined_traceback.cpp), so
pickle writes each frame once and refers back to it; this script shares them the same way.

Two kinds of snapshot:

  fixture  a small, hand-made history whose every figure is known (the tests of `workbook
           inspect` and `workbook diff` assert them); `--variant after` is the same program
           after a change (one site smaller, another larger). Written with pickle.dump at the
           protocol asked for (2 to 5).
  big      a training loop's history of about --size bytes (default 1 GiB), for measuring
           `workbook inspect` on a file torch's viewer cannot open. The entries are made by a
           generator and written by Python's pure-Python pickler (pickle._Pickler), so that
           the writer's memory stays small: entry dicts and their frame lists are not memoized
           (every other object is, as pickle.dump does), since nothing refers to them twice.

Usage:
  python3 bench/make_big_snapshot.py fixture OUT.pickle [--protocol N] [--variant before|after]
  python3 bench/make_big_snapshot.py big /tmp/big.pickle [--size BYTES] [--protocol N]
"""

import argparse
import pickle
import random
import sys

KIB = 1024
MIB = 1024 * KIB
T0 = 1_764_000_000_000_000  # time_us of the first entry (2025-11-24, microseconds since 1970)


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def settings(conf=""):
    return {
        "PYTORCH_CUDA_ALLOC_CONF": conf,
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(64)},
    }


def fixture(variant):
    """The hand-made history: two segments, three sites, one OOM, three blocks left alive."""
    fwd = [frame("model.py", 41, "forward"), frame("train.py", 12, "step"),
           frame("train.py", 30, "<module>")]
    opt = [frame("torch/optim/adam.py", 160, "_init_group"), frame("train.py", 14, "step"),
           frame("train.py", 30, "<module>")]
    data = [frame("data.py", 8, "load"), frame("train.py", 11, "step"),
            frame("train.py", 30, "<module>")]
    a2 = 4 * MIB if variant == "before" else 2 * MIB
    b1 = 512 * KIB if variant == "before" else 1 * MIB
    A, B = 0x7F0000000000, 0x7F0010000000
    a1_at, a2_at, a3_at = A, A + 8 * MIB, A + 8 * MIB + a2
    b1_at, b2_at = B, B + b1
    t = iter(range(T0, T0 + 1000, 10))

    def entry(action, addr, size, frames):
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": next(t),
             "frames": list(frames), "pool_id": (0, 0)}
        if action == "oom":
            e["device_free"] = e.pop("addr")
        return e

    trace = [
        entry("segment_alloc", A, 20 * MIB, fwd),
        entry("alloc", a1_at, 8 * MIB, fwd),
        entry("alloc", a2_at, a2, opt),
        entry("alloc", a3_at, 6 * MIB, fwd),
        entry("segment_alloc", B, 2 * MIB, data),
        entry("alloc", b1_at, b1, data),
        entry("free_requested", a2_at, a2, opt),
        entry("free_completed", a2_at, a2, opt),
        entry("oom", 3 * MIB, 16 * MIB, fwd),
        entry("alloc", b2_at, 256 * KIB, data),
        entry("free_requested", a1_at, 8 * MIB, fwd),
        entry("free_completed", a1_at, 8 * MIB, fwd),
    ]

    def block(addr, size, state, frames):
        return {"address": addr, "size": size, "requested_size": size if state != "inactive" else 0,
                "state": state, "frames": list(frames) if state != "inactive" else []}

    def segment(addr, total, kind, blocks):
        live = [b for b in blocks if b["state"] != "inactive"]
        return {"device": 0, "address": addr, "total_size": total,
                "allocated_size": sum(b["size"] for b in live),
                "active_size": sum(b["size"] for b in live),
                "requested_size": sum(b["requested_size"] for b in live),
                "stream": 0, "segment_type": kind, "segment_pool_id": (0, 0),
                "is_expandable": False, "frames": [], "blocks": blocks}

    segments = [
        segment(A, 20 * MIB, "large", [
            block(A, 8 * MIB + a2, "inactive", []),
            block(a3_at, 6 * MIB, "active_allocated", fwd),
            block(a3_at + 6 * MIB, 20 * MIB - (8 * MIB + a2 + 6 * MIB), "inactive", []),
        ]),
        segment(B, 2 * MIB, "small", [
            block(b1_at, b1, "active_allocated", data),
            block(b2_at, 256 * KIB, "active_allocated", data),
            block(b2_at + 256 * KIB, 2 * MIB - b1 - 256 * KIB, "inactive", []),
        ]),
    ]
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": settings(), "external_annotations": []}


class Streamed:
    """A list whose items come from a generator as they are pickled."""

    def __init__(self, items):
        self.items = items


class StreamingPickler(pickle._Pickler):
    """Python's pure-Python pickler, writing a Streamed as a list without holding it."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_streamed(self, obj):
        self.write(pickle.EMPTY_LIST)
        self._batch_appends(obj.items)  # APPENDS in batches of 1000, as for any list

    dispatch[Streamed] = save_streamed

    def save_dict(self, obj):
        if "action" in obj:  # a trace entry: written once, never referred to again
            self.write(pickle.EMPTY_DICT)
            self._batch_setitems(iter(obj.items()))
            return
        pickle._Pickler.save_dict(self, obj)

    dispatch[dict] = save_dict

    def save_list(self, obj):
        if obj and type(obj[0]) is dict and "filename" in obj[0]:  # an entry's frames
            self.write(pickle.EMPTY_LIST)
            self._batch_appends(obj)
            return
        pickle._Pickler.save_list(self, obj)

    dispatch[list] = save_list


def big(size, seed=0):
    """A training loop: per step, a batch, forward activations, backward gradients, an optimizer
    step; blocks come from a simple caching model (a freed block's address is reused by the next
    request of its size), so the segments and the trace agree."""
    rng = random.Random(seed)
    files = ["model.py", "layers.py", "attention.py", "mlp.py", "train.py", "data.py",
             "torch/nn/modules/module.py", "torch/nn/modules/linear.py",
             "torch/nn/functional.py", "torch/autograd/graph.py", "torch/optim/adam.py",
             "torch/utils/data/dataloader.py"]
    names = ["forward", "_call_impl", "_wrapped_call_impl", "linear", "attention", "mlp",
             "backward", "_engine_run_backward", "step", "_init_group", "load", "__next__",
             "<module>", "main", "train_epoch", "collate"]
    frames = [frame(rng.choice(files), rng.randrange(1, 2000), rng.choice(names))
              for _ in range(400)]
    # 48 allocation sites, each a stack of 12 to 30 frames with its own size.
    sites = []
    for i in range(48):
        depth = rng.randrange(12, 31)
        stack = [frames[rng.randrange(len(frames))] for _ in range(depth)]
        kib = rng.choice([4, 64, 512, 1024, 2048, 8192, 16384, 65536])
        sites.append((stack, kib * KIB))
    free_stack = [frame("torch/autograd/graph.py", 825, "_engine_run_backward"),
                  frame("train.py", 20, "step")]
    segment_base = [0x7F0000000000]
    free_by_size = {}
    segments = {}  # address -> size

    def place(nbytes):
        pool = free_by_size.get(nbytes)
        if pool:
            return pool.pop(), None
        total = 2 * MIB if nbytes <= MIB else max(20 * MIB, (nbytes + 2 * MIB - 1) // (2 * MIB) * (2 * MIB))
        at = segment_base[0]
        segment_base[0] += total
        segments[at] = total
        # A small segment holds several blocks of one size; the rest go to the free list.
        if nbytes <= MIB:
            free_by_size.setdefault(nbytes, []).extend(
                at + k * nbytes for k in range(total // nbytes - 1, 0, -1))
        return at, total

    state = {"t": T0, "written": 0, "live": {}}

    def entry(action, addr, nbytes, stack):
        state["t"] += 3
        # The bytes of an entry, about: the dict's keys and ints, and a reference per frame.
        state["written"] += 64 + 3 * len(stack)
        return {"action": action, "addr": addr, "size": nbytes, "stream": 0,
                "time_us": state["t"], "frames": list(stack), "pool_id": (0, 0)}

    def entries():
        step = 0
        while state["written"] < size:
            step += 1
            held = []
            for stack, nbytes in rng.sample(sites, 24):
                at, new_segment = place(nbytes)
                if new_segment:
                    yield entry("segment_alloc", at, new_segment, stack)
                yield entry("alloc", at, nbytes, stack)
                state["live"][at] = (nbytes, stack)
                held.append((at, nbytes, stack))
            rng.shuffle(held)
            keep = 1 if step % 50 == 0 else 0  # now and then a block outlives its step
            for at, nbytes, stack in held[keep:]:
                yield entry("free_requested", at, nbytes, free_stack)
                yield entry("free_completed", at, nbytes, free_stack)
                free_by_size.setdefault(nbytes, []).append(at)
                del state["live"][at]

    def final_segments():
        # Pickled after device_traces (the dict's order), so the whole history has been made.
        live = sorted(state["live"].items())
        for at in sorted(segments):
            total = segments[at]
            blocks, cursor = [], at
            while live and live[0][0] < at + total:
                addr, (nbytes, stack) = live.pop(0)
                if addr > cursor:
                    blocks.append({"address": cursor, "size": addr - cursor, "requested_size": 0,
                                   "state": "inactive", "frames": []})
                blocks.append({"address": addr, "size": nbytes, "requested_size": nbytes,
                               "state": "active_allocated", "frames": stack})
                cursor = addr + nbytes
            if cursor < at + total:
                blocks.append({"address": cursor, "size": at + total - cursor,
                               "requested_size": 0, "state": "inactive", "frames": []})
            used = sum(b["requested_size"] for b in blocks)
            yield {"device": 0, "address": at, "total_size": total, "allocated_size": used,
                   "active_size": used, "requested_size": used, "stream": 0,
                   "segment_type": "small" if total == 2 * MIB else "large",
                   "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                   "blocks": blocks}

    return {"device_traces": [Streamed(entries())],
            "segments": Streamed(final_segments()),
            "allocator_settings": settings(),
            "external_annotations": []}, segments


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=["fixture", "big"])
    p.add_argument("out")
    p.add_argument("--protocol", type=int, default=4, choices=[2, 3, 4, 5])
    p.add_argument("--variant", choices=["before", "after"], default="before")
    p.add_argument("--size", type=int, default=1 << 30, help="about how many bytes (big)")
    args = p.parse_args()
    with open(args.out, "wb") as f:
        if args.kind == "fixture":
            pickle.dump(fixture(args.variant), f, protocol=args.protocol)
        else:
            snap, _ = big(args.size)
            StreamingPickler(f, protocol=args.protocol).dump(snap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
