#!/usr/bin/env python3
"""Record real torch memory snapshots on an NVIDIA GPU, as fixtures for the snapshot tools.

    python3 bench/record_torch_snapshot.py train OUT.pickle     # a small training loop, torch's defaults
    python3 bench/record_torch_snapshot.py oom OUT.pickle       # the same, then an out-of-memory error
    python3 bench/record_torch_snapshot.py oom-expandable OUT.pickle   # with expandable_segments:True

Each mode runs in its own process (the allocator's settings are read once). The model: a 4-layer MLP
(2048 wide, f32) trained with Adam for 3 steps on a 256-row batch; recording starts after the first
step, so the file also holds segments and blocks reserved before recording began, as a user's file
does. The `oom` modes cap the process at 2 GiB with set_per_process_memory_fraction and then ask for
tensors until one fails; the snapshot is dumped in the `except` clause, as torch's documentation
suggests. Prints one JSON line of what torch's own counters said, to compare with `workbook inspect`.
"""

import json
import os
import sys


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("train", "oom", "oom-expandable"):
        sys.exit(__doc__)
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "oom-expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    if not torch.cuda.is_available():
        sys.exit("record_torch_snapshot.py: torch sees no CUDA device")
    dev = torch.device("cuda:0")
    if mode != "train":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((2 << 30) / total, 0)
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(256, 2048, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
    for _ in range(3):
        step()
    oom = None
    if mode != "train":
        hold = []
        try:
            for _ in range(64):
                hold.append(torch.empty(192 << 20, dtype=torch.uint8, device=dev))
        except torch.OutOfMemoryError as e:
            oom = str(e).splitlines()[0]
        del hold
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
    }))


if __name__ == "__main__":
    main()
