#!/usr/bin/env bash
# Mutation testing of the reference solutions against the chapters' official tests (issue 40):
# which plausible mistakes in a solution does no test catch?
#
#   bash scripts/mutants.sh [--rev REV] [--timeout SECONDS] [CHAPTER...] [-- CARGO-MUTANTS-ARGS...]
#
# For each chapter (default: all), a copy of the repository at REV (default: the working tree) is
# made in a temporary folder, the reference solution is laid over the stub's src/ (as `workbook
# verify` does), and cargo-mutants (`cargo install cargo-mutants`) mutates that src/ and runs the
# chapter's tests against each mutant. Prints one line per chapter:
#   chapter  caught  missed  timeout  unviable  score
# where score = caught / (caught + missed + timeout). The missed mutants are listed under
# target/mutants/<rev>/<chapter>/mutants.out/missed.txt.
#
# CPU-heavy: on the shared machine run it under the build lock, e.g.
#   flock /tmp/wb-build.lock env CARGO_BUILD_JOBS=2 bash scripts/mutants.sh --timeout 60 ch01
# Arguments after `--` go to cargo-mutants, e.g. `-- --re 'predict\.rs'` runs a chapter in parts
# (each part writes its own output folder, named after the arguments), `-- --list` lists the
# mutants without testing them.
# Not run by CI.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rev=""
timeout=60
chapters=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) chapters+=("$1"); shift ;;
  esac
done
if ! cargo mutants --version >/dev/null 2>&1; then
  echo "cargo-mutants is not installed: cargo install cargo-mutants" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "$rev" ]; then
  git -C "$root" archive "$rev" | tar -x -C "$work"
  label=$(git -C "$root" rev-parse --short "$rev")
else
  (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work")
  label=worktree
fi
# The repository's build folder, so that gpumem and the dependencies are not built again.
export CARGO_TARGET_DIR="$root/target/mutants-build"

if [ ${#chapters[@]} -eq 0 ]; then
  for dir in "$work"/exercises/ch*/; do chapters+=("$(basename "$dir")"); done
fi
printf '%-32s %7s %7s %8s %9s %6s\n' chapter caught missed timeout unviable score
for wanted in "${chapters[@]}"; do
  chapter=$(cd "$work/exercises" && ls -d "$wanted"* 2>/dev/null | head -n1 || true)
  if [ -z "$chapter" ] || [ ! -d "$work/solutions/$chapter/src" ]; then
    echo "$wanted: no such chapter with a solution" >&2
    continue
  fi
  cp -r "$work/solutions/$chapter/src/." "$work/exercises/$chapter/src/"
  out="$root/target/mutants/$label/$chapter"
  if [ ${#extra[@]} -gt 0 ]; then
    out="$out/part-$(printf '%s' "${extra[*]}" | tr -c 'A-Za-z0-9_.-' '_')"
  fi
  mkdir -p "$out"
  # Mutate the learner's files only (src/), test with the chapter's own tests.
  # The predictions' crate (src/predict.rs, since issue 40) is mutated too, and tested by the
  # chapter's tests.
  packages=(--package "$chapter")
  if [ -f "$work/exercises/$chapter/predict/Cargo.toml" ]; then
    predict=$(sed -n 's/^name = "\(.*\)"/\1/p' "$work/exercises/$chapter/predict/Cargo.toml" | head -n1)
    packages+=(--package "$predict")
  fi
  # In place: $work is a throwaway copy, and the build folder above is shared between runs.
  (cd "$work" && cargo mutants --in-place "${packages[@]}" --test-package "$chapter" \
      --dir "$work" --file "exercises/$chapter/src/*.rs" \
      --file "exercises/$chapter/predict/../src/*.rs" --timeout "$timeout" \
      --output "$out" --no-shuffle "${extra[@]}" >"$out/log.txt" 2>&1) || true
  count() {
    if [ -f "$out/mutants.out/$1.txt" ]; then wc -l <"$out/mutants.out/$1.txt" | tr -d ' '; else echo 0; fi
  }
  caught=$(count caught); missed=$(count missed); timedout=$(count timeout); unviable=$(count unviable)
  tested=$((caught + missed + timedout))
  score=$( [ "$tested" -gt 0 ] && echo "$((100 * caught / tested))%" || echo "-")
  printf '%-32s %7s %7s %8s %9s %6s\n' "$chapter" "$caught" "$missed" "$timedout" "$unviable" "$score"
done
