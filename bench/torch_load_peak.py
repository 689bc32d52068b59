"""What loading a checkpoint holds at its peak, measured with torch on the CPU (chapter 16).

A model of LAYERS linear layers (WIDTH x WIDTH float32 weights and a bias each) is saved once,
then loaded four ways, each in a fresh profiler session:

  a. build the model, torch.load the checkpoint, model.load_state_dict(sd)     (the usual way)
  b. build the model, torch.load(..., mmap=True), model.load_state_dict(sd)
  c. build the model on torch.device("meta"), torch.load, load_state_dict(sd, assign=True)
  d. both: the meta device, mmap=True and assign=True

How it measures, and why:
- "allocator peak" is the most bytes that torch's CPU allocator held at once during the case: the
  profiler (torch.profiler.profile(profile_memory=True)) records every allocation and free the
  allocator makes, with its size; the peak is the highest running sum. This counts the memory
  the process owns (anonymous memory), which is what runs out. The bytes of a tensor whose
  storage is a mapped file are not allocated by the allocator, so they are not in this count.
- "mapped resident" is, for mmap=True, how much of the checkpoint file is mapped into this
  process and resident (the Rss of the file's mappings in /proc/self/smaps), read at the end of
  the case while the model is alive. Those pages are the file's page cache: the kernel can drop
  and read them again, they are not copies the process owns.

Then the bytes of one layer's weight in float32, bfloat16, int8 with a scale per output channel,
and 4 bits (two values packed in each byte) with a scale per group of GROUP values along a row:
each is made with torch ops and measured with untyped_storage().nbytes(), the scales' too.

Run with torch 2.15.0 (any machine, no GPU):  python bench/torch_load_peak.py
Its output is bench/torch_load_peak.txt, which chapter 16's page includes.
"""

import datetime
import gc
import os
import sys
import tempfile

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

LAYERS = 4
WIDTH = 1024
MIB = 1 << 20
OUT, IN, GROUP = 1024, 1000, 128  # the quantized layer: a row of 1000 is 8 groups, the last short


def build(device=None):
    return torch.nn.Sequential(
        *[torch.nn.Linear(WIDTH, WIDTH, device=device) for _ in range(LAYERS)]
    )


def allocator_peak(prof, mapped):
    """The highest running sum of the CPU allocations and frees in a profile, leaving out those
    whose address lies in one of the `mapped` (start, end) ranges."""
    events = []

    def walk(event):
        fields = event.extra_fields
        if (event.tag == _EventType.Allocation and fields.device.type == "cpu"
                and not any(start <= fields.ptr < end for start, end in mapped)):
            events.append((event.start_time_ns, fields.alloc_size))
        for child in event.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events.sort(key=lambda e: e[0])  # a stable sort: equal times keep the recorded order
    live = peak = 0
    for _, size in events:
        live += size
        peak = max(peak, live)
    return peak


def mappings(path):
    """The (start, end) address ranges of `path`'s mappings in this process."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == path:
                start, end = fields[0].split("-")
                ranges.append((int(start, 16), int(end, 16)))
    return ranges


def mapped_resident(path):
    """Bytes of `path` mapped into this process and resident (the Rss of its mappings)."""
    total = 0
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == path
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def case(label, path, *, meta, mmap):
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = build("meta" if meta else None)
        sd = torch.load(path, mmap=mmap, weights_only=True)
        mapped = mappings(path)
        model.load_state_dict(sd, assign=meta)
        resident = mapped_resident(path)
        del sd
    # Use the weights: one forward pass reads every page of them.
    with torch.no_grad():
        model(torch.ones(1, WIDTH))
    touched = mapped_resident(path)
    print(f"{label:<44} {allocator_peak(prof, mapped):>10} {resident:>10} {touched:>13}")
    del model
    gc.collect()


print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, device cpu, {datetime.date.today()}")
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "model.pt")
    torch.manual_seed(0)
    torch.save(build().state_dict(), path)
    gc.collect()
    weights = sum(p.numel() * p.element_size() for p in build("meta").parameters())
    print(f"model: {LAYERS} x nn.Linear({WIDTH}, {WIDTH}), float32: {weights} bytes "
          f"({weights / MIB:.2f} MiB) of weights and biases; checkpoint file "
          f"{os.path.getsize(path)} bytes")
    print()
    print("bytes: the allocator's peak; the checkpoint's mapped pages resident after")
    print("load_state_dict and after one forward pass")
    print()
    print(f"{'case':<44} {'peak':>10} {'after load':>10} {'after forward':>13}")
    case("a. build, torch.load, load_state_dict", path, meta=False, mmap=False)
    case("b. build, torch.load(mmap=True), load", path, meta=False, mmap=True)
    case("c. meta, torch.load, load(assign=True)", path, meta=True, mmap=False)
    case("d. meta, torch.load(mmap=True), assign=True", path, meta=True, mmap=True)


def nbytes(*tensors):
    return sum(t.untyped_storage().nbytes() for t in tensors)


def int8_per_channel(w, scale_dtype):
    scale = w.abs().amax(dim=1, keepdim=True) / 127
    q = (w / scale).round().clamp(-127, 127).to(torch.int8)
    return q, scale.to(scale_dtype)


def int4_per_group(w, group, scale_dtype):
    rows, cols = w.shape
    groups = -(-cols // group)
    padded = torch.nn.functional.pad(w, (0, groups * group - cols)).view(rows, groups, group)
    scale = padded.abs().amax(dim=2, keepdim=True) / 7
    q = (padded / scale).round().clamp(-8, 7).to(torch.int8).view(rows, -1)[:, :cols]
    q = torch.nn.functional.pad(q, (0, cols % 2))  # an odd row ends in half a byte
    packed = ((q[:, 0::2] & 0xF) | ((q[:, 1::2] & 0xF) << 4)).to(torch.uint8)
    return packed, scale.view(rows, groups).to(scale_dtype)


print()
print(f"one weight of nn.Linear({IN}, {OUT}) ({OUT} rows of {IN}), bytes, measured with "
      "untyped_storage().nbytes()")
print()
print(f"{'storage':<54} {'values':>8} {'scales':>7} {'total':>8}")
w = torch.randn(OUT, IN)
rows = [
    ("float32", (w,), ()),
    ("bfloat16", (w.to(torch.bfloat16),), ()),
]
for dtype in (torch.float32, torch.bfloat16):
    q, scale = int8_per_channel(w, dtype)
    rows.append((f"int8, a {dtype} scale per row", (q,), (scale,)))
for dtype in (torch.float32, torch.bfloat16):
    packed, scale = int4_per_group(w, GROUP, dtype)
    rows.append((f"4-bit packed, a {dtype} scale per {GROUP} in a row", (packed,), (scale,)))
for group in (32, 64):
    packed, scale = int4_per_group(w, group, torch.bfloat16)
    rows.append((f"4-bit packed, a torch.bfloat16 scale per {group} in a row", (packed,), (scale,)))
q = torch.quantize_per_channel(w, torch.ones(OUT), torch.zeros(OUT, dtype=torch.int32), 0,
                               torch.qint8)
rows.append(("torch.quantize_per_channel(qint8)",
             (q,), (q.q_per_channel_scales(), q.q_per_channel_zero_points())))
for label, values, scales in rows:
    print(f"{label:<54} {nbytes(*values):>8} {nbytes(*scales):>7} "
          f"{nbytes(*values) + nbytes(*scales):>8}")
print(f"torch.quantize_per_channel keeps its scales as {q.q_per_channel_scales().dtype} and its "
      f"zero points as {q.q_per_channel_zero_points().dtype}")
try:
    torch.quantize_per_channel(w, torch.ones(OUT), torch.zeros(OUT, dtype=torch.int32), 0,
                               torch.quint4x2)
    print("torch.quantize_per_channel(quint4x2): made")
except NotImplementedError as e:
    print(f"torch.quantize_per_channel(quint4x2): NotImplementedError: {str(e).splitlines()[0]}")
