#!/usr/bin/env bash
# Installs NVIDIA's run-time compiler (libnvrtc) and PTX assembler (ptxas) from their PyPI wheels, the
# way CI does, so that `cargo test -p gpumem --test kernels_compile` can compile every kernel of
# crates/gpumem/src/ops/kernels.cu without a GPU, a driver or a CUDA toolkit.
#
# The wheels go to a cache outside the repository (downloaded once, ~350 MB unpacked):
#   ${GPUMEM_NVRTC_CACHE:-${XDG_CACHE_HOME:-~/.cache}/gpumem-nvrtc}/<version>
# The version is CUDA 13.0's, the major version of gpumem's default feature `cuda-13` (cudarc's
# `cuda-13000`, whose NVRTC bindings and library names, libnvrtc.so.13, it matches).
#
# Prints the two lines to put in the environment; use it as
#   eval "$(bash scripts/install-nvrtc.sh)"
# which sets LD_LIBRARY_PATH (where cudarc's dlopen finds libnvrtc.so.13, exactly as on a GPU host)
# and GPUMEM_PTXAS (the ptxas the test runs). Progress goes to stderr.
set -euo pipefail

VERSION=13.0.88
CACHE="${GPUMEM_NVRTC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpumem-nvrtc}"
DIR="$CACHE/$VERSION"
LIB="$DIR/nvidia/cu13/lib"
PTXAS="$DIR/nvidia/cu13/bin/ptxas"

if [ -e "$LIB/libnvrtc.so.13" ] && [ -x "$PTXAS" ]; then
  echo "NVRTC and ptxas $VERSION: already in $DIR" >&2
else
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "install-nvrtc.sh: needs python3 with pip, to fetch the nvidia-cuda-nvrtc and nvidia-cuda-nvcc wheels" >&2
    exit 1
  fi
  echo "NVRTC and ptxas $VERSION: installing the wheels into $DIR" >&2
  rm -rf "$DIR.partial"
  mkdir -p "$CACHE"
  # --no-deps: only the two wheels; --target: a plain folder, no virtual environment needed.
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$DIR.partial" \
    "nvidia-cuda-nvrtc==$VERSION" "nvidia-cuda-nvcc==$VERSION" >&2
  rm -rf "$DIR"
  mv "$DIR.partial" "$DIR"
fi

echo "export LD_LIBRARY_PATH=\"$LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
echo "export GPUMEM_PTXAS=\"$PTXAS\""
