#!/usr/bin/env bash
# torch's web viewer, torch/utils/viz/MemoryViz.js, on fresh gpumem snapshots in headless Chromium
# (conformance/check_memory_viz_web.py): every view it offers, on a snapshot from the dump_snapshot
# example, the same recording pinned host memory too (host_segments, host_traces), one from
# replaying a committed training trace, and one whose replay ran out of memory.
#
# torch 2.15.0's wheel ships no MemoryViz.js (its HTML imports it from cdn.jsdelivr.net, which
# this project cannot reach), so the file comes from GPUMEM_MEMORYVIZ_JS or the cache
# ${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-workbook/memoryviz/MemoryViz.js; without it this check is
# skipped (exit 0). Its d3 dependency comes from the npm registry (`npm pack d3@5`), cached in
# ${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-workbook/npm. Nothing of torch's or d3's is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
# The workbook binary: $WORKBOOK_BIN when set (CI points it at the one `cargo test` built),
# else built and run by cargo.
workbook() {
  if [ -n "${WORKBOOK_BIN:-}" ]; then "$WORKBOOK_BIN" "$@"; else cargo run -q -p workbook -- "$@"; fi
}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-workbook"
viewer="${GPUMEM_MEMORYVIZ_JS:-$cache/memoryviz/MemoryViz.js}"
if [ ! -f "$viewer" ]; then
  echo "skipped: no MemoryViz.js at $viewer (torch 2.15.0's wheel has none; put torch's torch/utils/viz/MemoryViz.js there or name it in GPUMEM_MEMORYVIZ_JS)"
  exit 0
fi
npm_cache="$cache/npm"
d3="$npm_cache/d3-5.16.0/package/dist/d3.js"
if [ ! -f "$d3" ]; then
  if ! command -v npm >/dev/null; then
    echo "npm is missing: it downloads d3@5.16.0 from the npm registry for MemoryViz.js" >&2
    exit 1
  fi
  mkdir -p "$npm_cache/d3-5.16.0"
  (cd "$npm_cache" && npm pack --silent d3@5.16.0 >/dev/null)
  tar -xzf "$npm_cache/d3-5.16.0.tgz" -C "$npm_cache/d3-5.16.0" package/dist/d3.js
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GPUMEM_DEVICE=cpu cargo run -q --example dump_snapshot -- "$tmp/dump_snapshot.pickle"
GPUMEM_DEVICE=cpu cargo run -q --example dump_snapshot -- --pinned "$tmp/pinned.pickle"
workbook replay bench/traces/transformer-step.json --repeat 1 \
  --snapshot-out "$tmp/transformer-step.pickle" >/dev/null
# 64 MiB of cpu device memory: event 10 runs out; the snapshot ends with its oom entry.
if workbook replay bench/traces/transformer-step.json --repeat 1 \
  --capacity 64MiB --snapshot-out "$tmp/transformer-step-oom.pickle" >/dev/null 2>&1; then
  echo "the replay with 64 MiB did not run out of memory" >&2
  exit 1
fi
echo "MemoryViz.js: $viewer (sha256 $(sha256sum "$viewer" | cut -d' ' -f1))"
python3 conformance/check_memory_viz_web.py "$viewer" "$d3" \
  "$tmp/dump_snapshot.pickle" "$tmp/pinned.pickle" "$tmp/transformer-step.pickle" "$tmp/transformer-step-oom.pickle"
