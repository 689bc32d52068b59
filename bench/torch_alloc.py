#!/usr/bin/env python3
"""Time alloc+free pairs through PyTorch's CUDA caching allocator, the anchor of gpumem's
`alloc_free_pair` bench (cargo bench -p gpumem --bench allocator):

    python3 bench/torch_alloc.py [--device cuda:0] [--pairs 100000] [--repeat 5] [--json]

For each size (512 B, 64 KiB, 4 MiB, 64 MiB) the cache is warmed with one pair, so every timed
pair is a cache hit, as in the Rust bench. Three ways in, from the most Python to the least:

- tensor:  torch.empty(size, dtype=torch.uint8, device=...) then del -- what a program does;
- public:  torch.cuda.caching_allocator_alloc(size, device, stream) / caching_allocator_delete;
- raw:     torch._C._cuda_cudaCachingAllocator_raw_alloc / _raw_delete, the C++ entry points
           behind the public pair.

"python loop" is the same loop calling functions that do nothing: the interpreter's share of
every figure. Time per pair = the median over --repeat runs of (elapsed / pairs).

Needs PyTorch built with CUDA and an NVIDIA GPU; without them it stops with a message saying
which is missing (exit status 1).
"""

import argparse
import json
import statistics
import sys
import time

SIZES = [(512, "512B"), (64 << 10, "64KiB"), (4 << 20, "4MiB"), (64 << 20, "64MiB")]


def import_torch_with_cuda(script):
    """PyTorch, once it is known to have CUDA and a GPU; else exits with a clear message."""
    try:
        import torch
    except ImportError:
        sys.exit(
            f"{script}: PyTorch is not installed for {sys.executable} (pip install torch). "
            "This script times PyTorch's caching allocator on an NVIDIA GPU."
        )
    if not torch.cuda.is_available():
        sys.exit(
            f"{script}: PyTorch {torch.__version__} sees no CUDA GPU "
            f"(torch.cuda.is_available() is False; built with CUDA {torch.version.cuda}). "
            "Run it on a machine with an NVIDIA GPU and its driver."
        )
    return torch


def time_pairs(pair, pairs, repeat):
    """Median nanoseconds per call of `pair` over `repeat` runs of `pairs` calls."""
    pair()  # warm: the block is cached from here on
    per_pair = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(pairs):
            pair()
        per_pair.append((time.perf_counter_ns() - start) / pairs)
    return statistics.median(per_pair)


def main():
    parser = argparse.ArgumentParser(
        description="Time cache-hit alloc+free pairs through PyTorch's CUDA caching allocator."
    )
    parser.add_argument("--device", default="cuda:0", help="the GPU (default: cuda:0)")
    parser.add_argument("--pairs", type=int, default=100_000, help="pairs per run (default: 100000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the median is reported (default: 5)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if args.pairs < 1 or args.repeat < 1:
        parser.error("--pairs and --repeat must be at least 1")

    torch = import_torch_with_cuda("torch_alloc.py")
    device = torch.device(args.device)
    if device.type != "cuda":
        sys.exit(f"torch_alloc.py: --device {args.device}: expected cuda or cuda:N")
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_device(index)
    device = torch.device("cuda", index)
    stream = torch.cuda.current_stream(device).cuda_stream

    public_alloc = torch.cuda.caching_allocator_alloc
    public_delete = torch.cuda.caching_allocator_delete
    raw_alloc = torch._C._cuda_cudaCachingAllocator_raw_alloc
    raw_delete = torch._C._cuda_cudaCachingAllocator_raw_delete
    empty = torch.empty
    uint8 = torch.uint8

    def noop_alloc(size, stream):
        return 1

    def noop_delete(ptr):
        return None

    rows = []
    for size, label in SIZES:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()

        def tensor_pair():
            t = empty(size, dtype=uint8, device=device)
            del t

        def public_pair():
            public_delete(public_alloc(size, index, stream))

        def raw_pair():
            raw_delete(raw_alloc(size, stream))

        def loop_pair():
            noop_delete(noop_alloc(size, stream))

        rows.append(
            {
                "size": label,
                "bytes": size,
                "tensor_ns": time_pairs(tensor_pair, args.pairs, args.repeat),
                "public_ns": time_pairs(public_pair, args.pairs, args.repeat),
                "raw_ns": time_pairs(raw_pair, args.pairs, args.repeat),
                "python_loop_ns": time_pairs(loop_pair, args.pairs, args.repeat),
            }
        )
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()

    props = torch.cuda.get_device_properties(device)
    if args.json:
        print(
            json.dumps(
                {
                    "device": str(device),
                    "name": props.name,
                    "torch": torch.__version__,
                    "cuda": torch.version.cuda,
                    "pairs": args.pairs,
                    "repeat": args.repeat,
                    "rows": rows,
                },
                indent=2,
            )
        )
        return
    print(
        f"cache-hit alloc+free pairs on {device} ({props.name}), torch {torch.__version__} "
        f"with CUDA {torch.version.cuda}; median of {args.repeat} runs of {args.pairs} pairs\n"
    )
    print(f"{'size':>6}  {'tensor ns':>10}  {'public ns':>10}  {'raw ns':>10}  {'python loop ns':>14}")
    for r in rows:
        print(
            f"{r['size']:>6}  {r['tensor_ns']:>10.1f}  {r['public_ns']:>10.1f}  "
            f"{r['raw_ns']:>10.1f}  {r['python_loop_ns']:>14.1f}"
        )


if __name__ == "__main__":
    main()
