#!/usr/bin/env python3
"""Record real torch memory snapshots on an NVIDIA GPU, as fixtures for the snapshot tools.

    python3 bench/record_torch_snapshot.py train OUT.pickle     # a small training loop, torch's defaults
    python3 bench/record_torch_snapshot.py oom OUT.pickle       # the same, then an out-of-memory error
    python3 bench/record_torch_snapshot.py oom-expandable OUT.pickle   # with expandable_segments:True
    python3 bench/record_torch_snapshot.py train-cpp OUT.pickle # train, recorded with torch's default stacks
    python3 bench/record_torch_snapshot.py oom-cpp OUT.pickle   # oom, recorded with torch's default stacks
    python3 bench/record_torch_snapshot.py empty-cache OUT.pickle   # train, free the model, empty_cache(), train again
    python3 bench/record_torch_snapshot.py frag OUT.pickle      # an OOM from fragmentation under a 2 GiB cap
    python3 bench/record_torch_snapshot.py frag-expandable OUT.pickle  # the same program with expandable_segments:True

Each mode runs in its own process (the allocator's settings are read once). The model: a 4-layer MLP
(2048 wide, f32) trained with Adam for 3 steps on a 256-row batch; recording starts after the first
step, so the file also holds segments and blocks reserved before recording began, as a user's file
does. The `oom` modes cap the process at 2 GiB with set_per_process_memory_fraction and then ask for
tensors until one fails; the snapshot is dumped in the `except` clause, as torch's documentation
suggests. The `-cpp` modes call `_record_memory_history(max_entries=100_000)` and leave `stacks` at
torch's default ("all": C++ frames beside Python's), the file a user gets by following torch's
documentation. `empty-cache` frees the model and optimizer inside the recording, calls
`torch.cuda.empty_cache()` (segments freed with no block freed in them), then trains a new model.
`frag` is a program whose out-of-memory error is fragmentation's: under a 2 GiB cap, a 512 MiB tensor
is freed, 16 tensors of 30 MiB are carved from its cached segment, 22 of 64 MiB fill most of the
rest, every other 30 MiB tensor is freed (272 MiB free in the segment, 128 MiB under the cap), and
160 MiB is asked for. `frag-expandable` runs the same program with expandable_segments:True, where
torch unmaps the free pages and maps them again at the end: it fits, and the file shows it.
Prints one JSON line of what torch's own counters said, to compare with `workbook inspect`.
"""

import json
import os
import sys


MODES = ("train", "oom", "oom-expandable", "train-cpp", "oom-cpp", "empty-cache", "frag", "frag-expandable")
MiB = 1 << 20


def fragment(torch, dev):
    """The `frag` program; returns torch's message (None when it fits) and the tensors still held."""
    big = torch.empty(512 * MiB, dtype=torch.uint8, device=dev)
    del big  # its segment stays cached
    small = [torch.empty(30 * MiB, dtype=torch.uint8, device=dev) for _ in range(16)]
    fill = [torch.empty(64 * MiB, dtype=torch.uint8, device=dev) for _ in range(22)]
    for i in range(0, 16, 2):
        small[i] = None
    try:
        wanted = torch.empty(160 * MiB, dtype=torch.uint8, device=dev)
        del wanted
        return None, (small, fill)
    except torch.OutOfMemoryError as e:
        return str(e), (small, fill)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in MODES:
        sys.exit(__doc__)
    mode, out = sys.argv[1], sys.argv[2]
    if mode.endswith("-expandable"):
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    if not torch.cuda.is_available():
        sys.exit("record_torch_snapshot.py: torch sees no CUDA device")
    dev = torch.device("cuda:0")
    oom_mode = mode.startswith("oom")
    if oom_mode or mode.startswith("frag"):
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((2 << 30) / total, 0)
    torch.manual_seed(0)
    oom = None
    if mode.startswith("frag"):
        torch.empty(1, device=dev)  # the context first, outside the recording
        torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
        message, held = fragment(torch, dev)  # dumped while the tensors are held, as in a user's except
        finish(torch, dev, mode, out, message and message.splitlines()[0], message)
        del held
        return

    def build():
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(2048, 2048), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers).to(dev)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3)

    model, opt = build()
    x = torch.randn(256, 2048, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    if mode.endswith("-cpp"):
        torch.cuda.memory._record_memory_history(max_entries=100_000)
    else:
        torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
    for _ in range(3):
        step()
    if mode == "empty-cache":
        del model, opt
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        model, opt = build()
        step()
    if oom_mode:
        hold = []
        try:
            for _ in range(64):
                hold.append(torch.empty(192 << 20, dtype=torch.uint8, device=dev))
        except torch.OutOfMemoryError as e:
            oom = str(e).splitlines()[0]
        del hold
    finish(torch, dev, mode, out, oom)


def finish(torch, dev, mode, out, oom, message=None):
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(out)
    torch.cuda.memory._record_memory_history(enabled=None)
    s = torch.cuda.memory_stats(0)
    print(json.dumps({
        "mode": mode,
        "file": out,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "allocated_bytes.all.peak": s["allocated_bytes.all.peak"],
        "reserved_bytes.all.peak": s["reserved_bytes.all.peak"],
        "allocated_bytes.all.current": s["allocated_bytes.all.current"],
        "reserved_bytes.all.current": s["reserved_bytes.all.current"],
        "segment.all.current": s["segment.all.current"],
        "num_ooms": s["num_ooms"],
        "oom": oom,
        "message": message,
    }))


if __name__ == "__main__":
    main()
