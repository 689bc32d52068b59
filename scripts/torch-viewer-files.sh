#!/usr/bin/env bash
# Prints the folder holding torch 2.15.0's memory-viewer script, torch/cuda/_memory_viz.py, taken
# out of the torch 2.15.0 wheel (downloaded without its dependencies, about 540 MB, once) and
# cached outside the repository: ${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-workbook/torch-2.15.0-viewer.
# torch's files are never committed. The file is checked against the hash in the wheel's RECORD.
#
# torch 2.15.0's wheel has no MemoryViz.js: its RECORD lists none, and _memory_viz.py's HTML
# imports it from https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js.
set -euo pipefail
version=2.15.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-workbook"
out="$cache/torch-$version-viewer"
# sha256 of torch/cuda/_memory_viz.py, as the wheel's RECORD gives it (urlsafe base64).
want="zrxkSaLTS4OsKjXPdJC6vVkHMsMDYuGNIt4YyNp8kiE"
hash_of() { python3 -c 'import base64,hashlib,sys; print(base64.urlsafe_b64encode(hashlib.sha256(open(sys.argv[1],"rb").read()).digest()).decode().rstrip("="))' "$1"; }
if [ -f "$out/_memory_viz.py" ] && [ "$(hash_of "$out/_memory_viz.py")" = "$want" ]; then
  echo "$out"; exit 0
fi
mkdir -p "$out"
# The venv scripts/regen-goldens.sh installs holds the same file: no download when it is there.
installed="$cache/torch-$version/lib/python3.11/site-packages/torch/cuda/_memory_viz.py"
if [ -f "$installed" ] && [ "$(hash_of "$installed")" = "$want" ]; then
  cp "$installed" "$out/_memory_viz.py"
else
  wheels="$cache/wheels"
  mkdir -p "$wheels"
  wheel="$(ls "$wheels"/torch-$version-*.whl 2>/dev/null | head -n 1 || true)"
  if [ -z "$wheel" ]; then
    echo "downloading the torch $version wheel (no dependencies) into $wheels" >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: "torch==$version" -d "$wheels" >&2
    wheel="$(ls "$wheels"/torch-$version-*.whl | head -n 1)"
  fi
  unzip -p "$wheel" torch/cuda/_memory_viz.py > "$out/_memory_viz.py"
fi
got="$(hash_of "$out/_memory_viz.py")"
if [ "$got" != "$want" ]; then
  echo "torch/cuda/_memory_viz.py has sha256 $got, torch $version's RECORD says $want" >&2
  exit 1
fi
echo "$out"
