#!/usr/bin/env bash
# Regenerates conformance/goldens/*.json with PyTorch 2.15.0 (conformance/generate.py).
# torch is installed, once, into a virtual environment outside the repository:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-workbook/torch-2.15.0   (about 2.4 GB with CUDA libraries)
# Any other torch version is refused. Arguments go to generate.py (e.g. --area autograd).
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.15.0
venv="${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-workbook/torch-$version"
python="$venv/bin/python"
installed() { "$python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != sys.argv[1])' "$version" 2>/dev/null; }
if ! installed; then
  echo "installing torch==$version into $venv" >&2
  python3 -m venv "$venv"
  "$python" -m pip install --quiet "torch==$version"
  installed || { echo "torch in $venv is not $version" >&2; exit 1; }
fi
exec "$python" conformance/generate.py "$@"
