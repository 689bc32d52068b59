#!/usr/bin/env bash
# torch 2.15.0's _memory_viz.py on fresh gpumem snapshots (conformance/check_memory_viz.py):
# one from the dump_snapshot example, one from replaying a committed training trace, and one from
# the dump_snapshot example recording pinned host memory too (host_segments, host_traces).
set -euo pipefail
cd "$(dirname "$0")/.."
viewer="$(bash scripts/torch-viewer-files.sh)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GPUMEM_DEVICE=cpu cargo run -q -p gpumem --example dump_snapshot -- "$tmp/before.pickle"
cargo run -q -p workbook -- replay bench/traces/transformer-step.json --repeat 1 \
  --snapshot-out "$tmp/after.pickle" >/dev/null
GPUMEM_DEVICE=cpu cargo run -q -p gpumem --example dump_snapshot -- --pinned "$tmp/pinned.pickle"
python3 conformance/check_memory_viz.py "$viewer" "$tmp/before.pickle" "$tmp/after.pickle" \
  "$tmp/pinned.pickle"
