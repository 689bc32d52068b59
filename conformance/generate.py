#!/usr/bin/env python3
"""Writes the conformance goldens: facts about PyTorch 2.15.0, measured by running it.

Each area is one function returning its facts and one file, conformance/goldens/<area>.json:

    {"area": ..., "torch_version": "2.15.0", "generated_by": "conformance/generate.py",
     "facts": [{"scenario": ..., "fact": ..., "value": <any JSON value>}, ...]}

pretty-printed with sorted keys and a trailing newline, facts in the order the area emits them,
so that running it twice gives byte-identical files. Run it through scripts/regen-goldens.sh,
which installs the pinned torch into a cache outside the repository:

    python3 conformance/generate.py                  # every area
    python3 conformance/generate.py --area autograd  # one area

It refuses any torch but 2.15.0. Everything runs on the CPU (no GPU is needed or used); facts
whose text depends on the device (tensor type names) are recorded as the CPU text, and the Rust
tests state the rule that maps them to CUDA (see conformance/README.md).
"""

import argparse
import json
import os
import sys

TORCH_VERSION = "2.15.0"
GOLDENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens")


class Facts:
    """The facts of one area, in the order they are recorded."""

    def __init__(self):
        self.items = []
        self.keys = set()

    def add(self, scenario, fact, value):
        key = (scenario, fact)
        if key in self.keys:
            raise SystemExit(f"duplicate fact {scenario!r} / {fact!r}")
        self.keys.add(key)
        self.items.append({"scenario": scenario, "fact": fact, "value": value})


AREAS = {}


def area(fn):
    """Registers an area: a function that fills a Facts."""
    AREAS[fn.__name__] = fn
    return fn


def write(name, facts):
    doc = {
        "area": name,
        "torch_version": TORCH_VERSION,
        "generated_by": "conformance/generate.py",
        "facts": facts.items,
    }
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    os.makedirs(GOLDENS, exist_ok=True)
    path = os.path.join(GOLDENS, f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{path}: {len(facts.items)} facts")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", action="append", choices=sorted(AREAS),
                        help="an area to regenerate (repeatable; default: every area)")
    args = parser.parse_args()
    import torch

    if torch.__version__.split("+")[0] != TORCH_VERSION:
        raise SystemExit(f"torch {torch.__version__} found; the goldens are made with "
                         f"torch {TORCH_VERSION} only (run scripts/regen-goldens.sh)")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in args.area or sorted(AREAS):
        facts = Facts()
        AREAS[name](facts)
        write(name, facts)


# ---------------------------------------------------------------------------------------------
# Areas. Each one builds every tensor from explicit values or a fixed seed, on the CPU.
# ---------------------------------------------------------------------------------------------

if __name__ == "__main__":
    sys.exit(main())
