#!/usr/bin/env bash
# One lent-GPU session, in one call, most valuable first: the memory-limit test, the whole suite with
# GPUMEM_DEVICE=cuda, the trace replays through gpumem and torch's allocator, real torch snapshots,
# the allocator anchor, then short criterion runs. Each step has its own time limit, and what was seen
# so far is packed into $OUT after every step, so a call stopped at its limit still brings back
# everything before it.
#
# Here (where cargo is):  bash ../shared/gpu/bundle.sh; then the release workbook stripped into
#                         .gpu/workbook, the scratch copy's path (bundle.sh's build.log names it) in
#                         .gpu/src-path, the CLI's tests (they need cargo) left out, and .gpu packed:
#                         tar -cJf .gpu.tar.xz --exclude='.gpu/bin/workbook__*' .gpu
# On the GPU host:        bash bench/gpu_session.sh             (carry .gpu.tar.xz)
# env: STEPS (regex of the step names to run, default all), TEST_LIMIT (seconds per test executable),
#      BENCH_FILTER (criterion's filter, e.g. cuda), BENCH_LIMIT (seconds per bench executable)
set -u
root=$(pwd)
out=${OUT:-$root/gpu-out}
logs=/tmp/gpu-logs
steps=${STEPS:-.}
mkdir -p "$out" "$logs"
t0=$(date +%s)
[ -d .gpu ] || python3 -c 'import tarfile; tarfile.open(".gpu.tar.xz").extractall()'
pack() { tar -C /tmp -czf "$out/logs.tar.gz" gpu-logs 2>/dev/null; }
note() { echo "$*" | tee -a "$out/summary.txt"; }
elapsed() { echo $(($(date +%s) - t0)); }

# the CUDA libraries the executables load (cublas, nvrtc), wherever the image keeps them
libdirs=""
# pip's CUDA wheels (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib) live in Python's site-packages
pydirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
for pat in 'libcublas.so.1[0-9]*' 'libcublasLt.so.1[0-9]*' 'libnvrtc.so.1[0-9]*' 'libnvrtc-builtins.so.1[0-9]*'; do
  while IFS= read -r f; do
    d=$(dirname "$f")
    case ":$libdirs:" in *":$d:"*) ;; *) libdirs="$libdirs:$d" ;; esac
  done < <(find /usr/local /opt /usr/lib /usr/lib64 $pydirs \( -name "$pat" -a \( -type f -o -type l \) \) 2>/dev/null)
done
export LD_LIBRARY_PATH="${libdirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPUMEM_DEVICE=cuda RUST_BACKTRACE=1

{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv;
  nvidia-smi | head -n 4; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)';
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; nproc; } > "$logs/env.txt" 2>&1
cat "$logs/env.txt" >> "$out/summary.txt"
[ -x .gpu/workbook ] && timeout 20 .gpu/workbook doctor >> "$out/summary.txt" 2>&1

# The executables were built in a scratch copy of the tree (solutions laid over the stubs), whose
# path is compiled into them (CARGO_MANIFEST_DIR): the same copy is made at the same path here, and
# each test runs in its package's folder, as cargo runs it.
src=$(cat .gpu/src-path 2>/dev/null || echo /tmp/gpu-src)
mkdir -p "$src"
# (tar, not git ls-files: the copy of the tree on the GPU host may come without .git)
tar -cf - --exclude=./.git --exclude=./.gpu --exclude=./.gpu.tar.xz --exclude=./target . | tar -xf - -C "$src"
for s in solutions/*/; do cp -r "$s". "$src/exercises/$(basename "$s")/"; done
package_dir() {
  case $1 in
    gpumem__*) echo "$src/crates/gpumem" ;;
    workbook__*) echo "$src/crates/workbook" ;;
    predict__*) local ch=${1##*__}; echo "$src"/exercises/"${ch%_predict}"-*/predict ;;
    given__*) local ch=${1##*__}; echo "$src"/exercises/"${ch%_given}"-*/given ;;
    *) echo "$src/exercises/${1%%__*}" ;;
  esac
}

# runs one test executable under its own limit; a line per executable in the summary
run_test() {
  local t=$1 n rc
  n=$(basename "$t")
  t=$(cd "$(dirname "$t")" && pwd)/$n
  (cd "$(package_dir "$n")" && timeout -k 5 "${TEST_LIMIT:-90}" "$t") > "$logs/$n.log" 2>&1
  rc=$?
  note "$n rc=$rc $(grep -E '^test result:' "$logs/$n.log" | tail -n 1) [$(elapsed) s]"
  [ $rc -eq 0 ] || grep -E -B2 -A25 "^---- |panicked|FAILED|failed" "$logs/$n.log" | head -n 60
}

if [[ suite =~ $steps ]]; then
  # memory_limit first: a CUDA context under the RLIMIT_DATA that check and grade set
  for t in .gpu/bin/*memory_limit*; do run_test "$t"; done
  for t in .gpu/bin/gpumem__lib__*; do run_test "$t"; done
  for t in .gpu/bin/*; do
    n=$(basename "$t")
    [[ $n =~ ^workbook__|memory_limit|^gpumem__lib__|__example__ ]] && continue
    run_test "$t"
  done
  pack
fi

if [[ settings =~ $steps ]]; then
  # what only a GPU shows: expandable segments' per-stream unmap waits and host-registered pinned
  # blocks under the settings that turn them on, and the NVRTC disk cache filled once, then hit
  note "--- settings [$(elapsed) s]"
  for t in .gpu/bin/gpumem__test__expandable_segments .gpu/bin/gpumem__test__device_api; do
    GPUMEM_ALLOC_CONF=expandable_segments:True run_test "$t"
  done
  export GPUMEM_KERNEL_CACHE=/tmp/gpu-logs/kernel-cache
  for i in 1 2; do
    run_test .gpu/bin/gpumem__test__ops_elementwise
    note "kernel cache after run $i: $(ls "$GPUMEM_KERNEL_CACHE" 2>/dev/null | wc -l) entries"
  done
  unset GPUMEM_KERNEL_CACHE
  pack
fi

if [[ replay =~ $steps ]]; then
  note "--- replay [$(elapsed) s]"
  timeout 120 .gpu/workbook replay --device cuda --json bench/traces/*.json > "$out/gpumem-cuda.json" 2> "$logs/replay-gpumem.err"
  note "workbook replay rc=$?"
  timeout 120 .gpu/workbook replay --device cuda bench/traces/*.json > "$logs/replay-gpumem.txt" 2>&1
  timeout 120 python3 bench/torch_replay.py --json bench/traces/*.json > "$out/torch.json" 2> "$logs/replay-torch.err"
  note "torch_replay rc=$?"
  timeout 120 python3 bench/torch_replay.py bench/traces/*.json > "$logs/replay-torch.txt" 2>&1
  timeout 120 python3 bench/torch_replay.py --raw bench/traces/*.json > "$logs/replay-torch-raw.txt" 2>&1
  python3 bench/compare_replay.py "$out/gpumem-cuda.json" "$out/torch.json" > "$logs/compare.md" 2>&1
  cat "$logs/compare.md" >> "$out/summary.txt"
  pack
fi

if [[ snapshot =~ $steps ]]; then
  note "--- snapshots [$(elapsed) s]"
  mkdir -p /tmp/snaps
  for m in ${SNAPSHOT_MODES:-train-cpp oom-cpp empty-cache frag frag-expandable}; do
    timeout 120 python3 bench/record_torch_snapshot.py $m /tmp/snaps/torch-2.11-$m.pickle >> "$out/summary.txt" 2>> "$logs/snapshots.err"
    note "snapshot $m rc=$?"
    timeout 60 .gpu/workbook inspect /tmp/snaps/torch-2.11-$m.pickle > "$logs/inspect-$m.txt" 2>&1
    note "workbook inspect $m rc=$?"
  done
  tar -C /tmp -czf "$out/snapshots.tar.gz" snaps
  pack
fi

if [[ oom =~ $steps ]]; then
  # real out-of-memory messages and checkpoint loads (chapters 14-16)
  note "--- torch_cuda_oom [$(elapsed) s]"
  timeout 90 python3 bench/torch_cuda_oom.py > "$logs/torch_cuda_oom.txt" 2>&1
  note "torch_cuda_oom rc=$?"
  cat "$logs/torch_cuda_oom.txt" >> "$out/summary.txt"
  pack
fi

if [[ walkthrough =~ $steps ]]; then
  # every chapter's walkthrough on the GPU (solutions laid over the stubs): the book's appendix D
  # has a column for what a GPU gives
  note "--- walkthroughs [$(elapsed) s]"
  mkdir -p "$logs/walkthroughs"
  for w in .gpu/examples/*__walkthrough; do
    [ -x "$w" ] || continue
    ch=$(basename "$w" __walkthrough)
    w=$(cd "$(dirname "$w")" && pwd)/$(basename "$w")
    (cd "$src/exercises/$ch" && timeout 60 "$w") > "$logs/walkthroughs/$ch.txt" 2> "$logs/walkthroughs/$ch.err"
    note "walkthrough $ch rc=$? [$(elapsed) s]"
  done
  pack
fi

if [[ anchor =~ $steps ]]; then
  note "--- torch_alloc [$(elapsed) s]"
  timeout 90 python3 bench/torch_alloc.py > "$logs/torch_alloc.txt" 2>&1
  tail -n 20 "$logs/torch_alloc.txt" >> "$out/summary.txt"
  pack
fi

if [[ bench =~ $steps ]]; then
  export CRITERION_HOME=/tmp/gpu-logs/criterion
  for b in .gpu/bench/*; do
    n=$(basename "$b")
    [[ $n =~ snapshot_replay ]] && continue   # the pickle reader: no GPU in it
    note "--- bench $n [$(elapsed) s]"
    timeout "${BENCH_LIMIT:-100}" "$b" --bench --warm-up-time 0.5 --measurement-time 2 --noplot ${BENCH_FILTER:-} > "$logs/bench-$n.log" 2>&1
    note "bench $n rc=$?"
    grep -E -B1 'time:|thrpt:' "$logs/bench-$n.log" >> "$out/summary.txt"
    pack
  done
fi
note "done [$(elapsed) s]"
pack
