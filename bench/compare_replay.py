#!/usr/bin/env python3
"""Put `workbook replay --json` and `bench/torch_replay.py --json` side by side as a Markdown
table (the one bench/README.md and the book's benchmarks page show):

    cargo run --release -p workbook -- replay --device cuda --json bench/traces/*.json > gpumem.json
    python3 bench/torch_replay.py --json bench/traces/*.json > torch.json
    python3 bench/compare_replay.py gpumem.json torch.json

Traces are matched by name; a trace only one side replayed shows "not measured" on the other.
Needs nothing but Python.
"""

import json
import sys


def mib(n):
    return "n/a" if n is None else f"{n / (1 << 20):.2f}"


def cell(ours, theirs, fmt):
    a = "not measured" if ours is None else fmt(ours)
    b = "not measured" if theirs is None else fmt(theirs)
    return f"{a} / {b}"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare_replay.py GPUMEM.json TORCH.json")
    try:
        sides = [json.load(open(path)) for path in sys.argv[1:]]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"compare_replay.py: {e}")
    ours, theirs = ({r["trace"]: r for r in side} for side in sides)
    names = list(ours) + [n for n in theirs if n not in ours]
    print(
        "| trace | peak requested MiB (gpumem / torch) | peak allocated MiB | peak reserved MiB "
        "| reserved/requested | device allocs | ns/event |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        a, b = ours.get(name, {}), theirs.get(name, {})

        def pair(key, fmt):
            return cell(a.get(key), b.get(key), fmt)

        print(
            f"| {name} | {pair('peak_requested_bytes', mib)} | {pair('peak_allocated_bytes', mib)} "
            f"| {pair('peak_reserved_bytes', mib)} "
            f"| {pair('reserved_over_requested', lambda x: f'{x:.3f}')} "
            f"| {pair('num_device_alloc', str)} | {pair('ns_per_event', lambda x: f'{x:.0f}')} |"
        )


if __name__ == "__main__":
    main()
