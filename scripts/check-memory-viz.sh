#!/usr/bin/env bash
# torch 2.15.0's _memory_viz.py on fresh gpumem snapshots (conformance/check_memory_viz.py):
# one from the dump_snapshot example, one from replaying a committed training trace, and one from
# the dump_snapshot example recording pinned host memory too (host_segments, host_traces).
set -euo pipefail
cd "$(dirname "$0")/.."
# The workbook binary: $WORKBOOK_BIN when set (CI points it at the one `cargo test` built),
# else built and run by cargo.
workbook() {
  if [ -n "${WORKBOOK_BIN:-}" ]; then "$WORKBOOK_BIN" "$@"; else cargo run -q -p workbook -- "$@"; fi
}
viewer="$(bash scripts/torch-viewer-files.sh)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GPUMEM_DEVICE=cpu cargo run -q --example dump_snapshot -- "$tmp/before.pickle"
workbook replay bench/traces/transformer-step.json --repeat 1 \
  --snapshot-out "$tmp/after.pickle" >/dev/null
GPUMEM_DEVICE=cpu cargo run -q --example dump_snapshot -- --pinned "$tmp/pinned.pickle"
python3 conformance/check_memory_viz.py "$viewer" "$tmp/before.pickle" "$tmp/after.pickle" \
  "$tmp/pinned.pickle"
