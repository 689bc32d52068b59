#!/usr/bin/env bash
# The seed sweep: every randomized test of every chapter, on its reference solution, and gpumem's
# own randomized tests, each over a range of seeds, and reports the seeds that fail (none, or the
# script exits 1).
#
# Usage: scripts/sweep-seeds.sh [SEEDS] [PART...]
#   SEEDS: a count (2000: seeds 0..2000) or a range FIRST..END
#   PART:  a chapter (ch09-checkpointing, or its prefix ch09) or `gpumem`; none: every chapter and
#          gpumem. A long sweep can so be split over machines or sessions.
#
# No process per seed: each test binary runs once with GPUMEM_TEST_SEEDS=FIRST..END, and every
# randomized test (its body wrapped in gpumem::testing::seeded) loops over the range in its own
# process, stopping at the first seed that fails and printing it: `seed N failed (rerun with
# GPUMEM_TEST_SEED=N)`. A randomized test left unwrapped fails under GPUMEM_TEST_SEEDS, so none is
# skipped unnoticed. The chapters are built once, with their solutions laid over the stubs in a
# scratch workspace (the shipped files stay untouched), into target/workbook/target, where
# `workbook verify` and `grade` build the chapters: gpumem and the dependencies, built there for
# the chapters' workspaces, are reused.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seeds=${1:-2000}
shift || true
parts=("$@")
# Whether PART-list selects `$1` (a chapter's folder name, or gpumem): every part when none given.
selected() {
  [ ${#parts[@]} -eq 0 ] && return 0
  local part
  for part in "${parts[@]}"; do
    [[ $1 == "$part" || $1 == "$part"-* ]] && return 0
  done
  return 1
}
if [[ $seeds =~ ^([0-9]+)\.\.([0-9]+)$ ]]; then
  range=$seeds; count=$((10#${BASH_REMATCH[2]} - 10#${BASH_REMATCH[1]}))
elif [[ $seeds =~ ^[0-9]+$ ]]; then
  range="0..$seeds"; count=$seeds
else
  echo "sweep-seeds: '$seeds' is neither a count nor a range FIRST..END" >&2; exit 2
fi

scratch=$(mktemp -d /tmp/sweep-seeds.XXXX)
trap 'rm -rf "$scratch"' EXIT
chapters=()
for dir in "$root"/exercises/ch*/; do
  chapter=$(basename "$dir")
  [ -d "$root/solutions/$chapter" ] || continue
  selected "$chapter" || continue
  cp -r "$dir" "$scratch/$chapter"
  cp -r "$root/solutions/$chapter/." "$scratch/$chapter/"
  chapters+=("$chapter")
done
if [ ${#chapters[@]} -eq 0 ] && ! selected gpumem; then
  echo "sweep-seeds: no chapter or gpumem matches ${parts[*]}" >&2; exit 2
fi
members=$(printf '"%s", ' "${chapters[@]}")
{
  cat <<TOML
[workspace]
resolver = "3"
members = [${members%, }]
TOML
  # The root's package settings, dependencies and profiles. A long sweep optimizes every crate:
  # the tests' own f64 references and the dependencies' f16 conversions run 2,000 times over.
  # Rust's float arithmetic gives the same bits at every opt-level (no fast-math, no contraction
  # into FMAs), and debug assertions and overflow checks stay on, so every seed behaves as when
  # graded. A short one (CI's 10 seeds) keeps the root's profiles and so reuses verify's build.
  sed -n '/^\[workspace.package\]/,$p' "$root/Cargo.toml" \
    | sed "s|^gpumem = { path = \"crates/gpumem\" }|gpumem = { path = \"$root/crates/gpumem\" }|" \
    | if [ "$count" -gt 100 ]; then sed 's|^\[profile.dev\]$|[profile.dev]\nopt-level = 2|'; else cat; fi
} > "$scratch/Cargo.toml"
cp "$root/Cargo.lock" "$scratch/"

# gpumem's test files with randomized tests, selected at the root (no `-p gpumem`): cargo then
# resolves the dependencies' features for the whole workspace, as `cargo test` does, and reuses its
# build instead of compiling gpumem and its tests again for gpumem alone.
gpumem_tests=()
if selected gpumem; then
  for file in "$root"/crates/gpumem/tests/*.rs; do
    grep -q 'seeded(' "$file" && gpumem_tests+=(--test "$(basename "$file" .rs)")
  done
fi

log="$root/target/sweep-seeds.log"
mkdir -p "$(dirname "$log")"
: > "$log"
start=$(date +%s)
echo "building the reference solutions' tests and gpumem's..."
if [ ${#chapters[@]} -gt 0 ]; then
  (cd "$scratch" && CARGO_TARGET_DIR="$root/target/workbook/target" cargo test --workspace --no-run --quiet)
fi
if [ ${#gpumem_tests[@]} -gt 0 ]; then
  (cd "$root" && cargo test "${gpumem_tests[@]}" --no-run --quiet)
fi
built=$(date +%s)

echo "sweeping seeds $range over ${chapters[*]:-no chapter}${gpumem_tests[*]:+ and gpumem} (log: $log)..."
status=0
export GPUMEM_TEST_SEEDS="$range"
unset GPUMEM_TEST_SEED
if [ ${#chapters[@]} -gt 0 ]; then
  (cd "$scratch" && CARGO_TARGET_DIR="$root/target/workbook/target" \
    cargo test --workspace --no-fail-fast --quiet -- --nocapture --test-threads=2) >> "$log" 2>&1 || status=1
fi
if [ ${#gpumem_tests[@]} -gt 0 ]; then
  (cd "$root" && cargo test "${gpumem_tests[@]}" --no-fail-fast --quiet \
    -- --nocapture --test-threads=2) >> "$log" 2>&1 || status=1
fi
end=$(date +%s)

# With --quiet, a test's line can follow the harness's dots: count matches, not lines.
swept=$(grep -o "seeds $range: all passed" "$log" | wc -l)
failed=$(grep -oE 'seed [0-9]+ failed \(rerun with GPUMEM_TEST_SEED=[0-9]+\)' "$log" || true)
echo "randomized tests swept over seeds $range: $swept passed every seed"
echo "time: $((built - start)) s building, $((end - built)) s sweeping"
if [ -n "$failed" ] || [ "$status" -ne 0 ]; then
  echo "FAILURES:"
  [ -n "$failed" ] && echo "$failed"
  grep -E "^test .* FAILED$|^---- |panicked at|^error" "$log" | head -40
  exit 1
fi
echo "failures: none"
