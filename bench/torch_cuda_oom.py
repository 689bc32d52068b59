"""Real out-of-memory errors and checkpoint loads on an NVIDIA GPU, as chapters 14 to 16 describe them.

Needs torch with CUDA and a GPU (the lent GPU hosts: torch 2.11, CUDA 13); run in a fresh process:
    python3 bench/torch_cuda_oom.py
Each case caps the process with set_per_process_memory_fraction, so the GPU's own size does not
matter, and prints torch's message whole, with torch's counters, for chapter 14's classifier:

1. capacity: tensors of 192 MiB until one fails (the cap is what runs out);
2. fragmentation: a 512 MiB tensor freed, 16 tensors of 30 MiB carved from its cached segment, 22
   of 64 MiB, every other 30 MiB one freed (272 MiB free in the segment), then one of 160 MiB;
3. what a caught error keeps alive: a 64 MiB local made in the failing function, with the
   exception held (inside `except`) and after it is gone;
4. loading a checkpoint saved from cuda:0 (chapter 15 and 16): torch.load with no map_location
   (onto cuda:0, where it was saved), with map_location="cpu", and load_state_dict's peak from a
   state dict loaded onto the GPU against one loaded onto the CPU.
"""

import gc
import io
import json
import sys

import torch

MiB = 1 << 20
dev = torch.device("cuda:0")


def counters():
    s = torch.cuda.memory_stats(dev)
    return {k: s[k] for k in ("allocated_bytes.all.current", "reserved_bytes.all.current",
                              "allocated_bytes.all.peak", "num_ooms")}


def reset():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)


def report(case, err):
    print(json.dumps({"case": case, "message": str(err), **counters()}))


def cap(bytes_):
    torch.cuda.set_per_process_memory_fraction(bytes_ / torch.cuda.get_device_properties(0).total_memory, 0)


print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                  "device": torch.cuda.get_device_name(0)}))
torch.empty(1, device=dev)  # the context, before any cap
cap(2 << 30)

# 1. capacity
hold = []
try:
    for _ in range(64):
        hold.append(torch.empty(192 * MiB, dtype=torch.uint8, device=dev))
except torch.OutOfMemoryError as e:
    report("capacity", e)
del hold
reset()

# 2. fragmentation (bench/record_torch_snapshot.py's `frag` program)
big = torch.empty(512 * MiB, dtype=torch.uint8, device=dev)
del big  # its 512 MiB segment stays cached
small = [torch.empty(30 * MiB, dtype=torch.uint8, device=dev) for _ in range(16)]
fill = [torch.empty(64 * MiB, dtype=torch.uint8, device=dev) for _ in range(22)]
for i in range(0, 16, 2):
    small[i] = None  # 8 holes of 30 MiB in the 512 MiB segment, 32 MiB free at its end
try:
    torch.empty(160 * MiB, dtype=torch.uint8, device=dev)
except torch.OutOfMemoryError as e:
    report("fragmentation", e)
del small, fill
reset()


# 3. what a caught error keeps alive
def step():
    activations = torch.empty(64 * MiB, dtype=torch.uint8, device=dev)  # noqa: F841, a local of this frame
    torch.empty(4 << 30, dtype=torch.uint8, device=dev)  # over the cap


try:
    step()
except torch.OutOfMemoryError as e:
    inside = torch.cuda.memory_allocated(dev)
    report("caught", e)
after = torch.cuda.memory_allocated(dev)
print(json.dumps({"case": "caught-kept", "allocated_inside_except": inside, "allocated_after_except": after}))
reset()

# 4. checkpoints saved from cuda:0
torch.cuda.set_per_process_memory_fraction(1.0, 0)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(6)]).to(dev)  # 24 MiB + biases
buf = io.BytesIO()
torch.save(model.state_dict(), buf)
weights = torch.cuda.memory_allocated(dev)
for where in (None, "cpu"):
    buf.seek(0)
    before = torch.cuda.memory_allocated(dev)
    sd = torch.load(buf, map_location=where, weights_only=True)
    on = {str(t.device) for t in sd.values()}
    print(json.dumps({"case": "torch.load", "map_location": where, "tensors_on": sorted(on),
                      "cuda_allocated_by_load": torch.cuda.memory_allocated(dev) - before}))
    torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev)
    model.load_state_dict(sd)
    print(json.dumps({"case": "load_state_dict", "state_dict_on": sorted(on), "model_bytes": weights,
                      "peak_above_before_load": torch.cuda.max_memory_allocated(dev) - before,
                      "peak_during_load_state_dict_above_start": torch.cuda.max_memory_allocated(dev) - base}))
    del sd
    reset()
sys.stdout.flush()
