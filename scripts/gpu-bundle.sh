#!/usr/bin/env bash
# Builds what bench/gpu_session.sh runs on a lent GPU host that has no Rust toolchain, and packs it
# into .gpu.tar.xz (git-ignored), to be carried with the `device` tool's `carry`:
#   - every test executable of the workspace with the reference solutions laid over the stubs
#     (the CLI's own tests left out: they run cargo), in .gpu/bin/<package>__<kind>__<name>;
#   - every chapter's walkthrough, in .gpu/examples/<chapter>__walkthrough;
#   - the workbook CLI (for replay and inspect), in .gpu/workbook;
#   - the criterion benches, in .gpu/bench/ (NO_BENCH=1 leaves them out);
#   - .gpu/src-path: the scratch copy the executables were built in. Their CARGO_MANIFEST_DIR points
#     there, so gpu_session.sh makes the same copy at the same path on the GPU host.
# Run from the repository's root, where cargo is:  bash scripts/gpu-bundle.sh
# The shared recipe (../shared/gpu/bundle.sh) does the first and fourth with a random scratch path;
# this one keeps the path fixed, adds the walkthroughs and the CLI, and packs under the 64 MiB limit.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
trap 'echo "bundle failed; the end of .gpu/build.log:"; tail -n 40 "$root/.gpu/build.log" 2>/dev/null' ERR
cd "$root"
for p in /.gpu/ /.gpu.tar.xz; do grep -qx "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
src=${GPU_BUNDLE_SRC:-/tmp/gpu-src}
target=${GPU_BUNDLE_TARGET:-/tmp/gpu-bundle-target}
rm -rf "$src" .gpu .gpu.tar.xz
mkdir -p "$src" .gpu/bin .gpu/bench .gpu/examples
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$src" -- 2>/dev/null || true
for s in solutions/*/; do cp -r "$s". "$src/exercises/$(basename "$s")/"; done
echo "$src" > .gpu/src-path
git rev-parse HEAD > .gpu/commit
export CARGO_TARGET_DIR=$target CARGO_PROFILE_TEST_DEBUG=0 CARGO_PROFILE_TEST_STRIP=true \
       CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_DEV_STRIP=true \
       CARGO_PROFILE_BENCH_DEBUG=0 CARGO_PROFILE_BENCH_STRIP=true
# prints "<package>__<kind>__<name>\t<executable>" for each test, bench or example cargo built
pick='import json,sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"): continue
    t = m["target"]
    if m["profile"]["test"] or "bench" in t["kind"] or "example" in t["kind"]:
        pkg = m["manifest_path"].split("/")[-2]
        print(pkg + "__" + t["kind"][0] + "__" + t["name"] + "\t" + m["executable"])'
log=$root/.gpu/build.log
cd "$src"
echo "building the tests (log: .gpu/build.log)"
cargo test --workspace --no-run --message-format=json 2>>"$log" | python3 -c "$pick" |
  while IFS=$'\t' read -r n e; do
    case $n in workbook__*) ;; *) cp "$e" "$root/.gpu/bin/$n" ;; esac
  done
echo "building the walkthroughs and the CLI"
cargo build --workspace --examples 2>>"$log"
# every chapter's example is named walkthrough, so cargo's uplifted copy (examples/walkthrough) is
# whichever was built last: take each chapter's own hashed file, found by its dep-info
for d in "$src"/exercises/ch*/; do
  ch=$(basename "$d")
  dep=$(grep -l "exercises/$ch/examples/walkthrough.rs" "$target"/debug/examples/walkthrough-*.d | xargs ls -t | head -n 1)
  cp "${dep%.d}" "$root/.gpu/examples/${ch}__walkthrough"
done
cargo build -p workbook 2>>"$log"
cp "$target/debug/workbook" "$root/.gpu/workbook"
if [ "${NO_BENCH:-0}" != 1 ]; then
  echo "building the benches"
  cargo bench --workspace --no-run --message-format=json 2>>"$log" | python3 -c "$pick" | { grep "__bench__" || true; } |
    while IFS=$'\t' read -r n e; do cp "$e" "$root/.gpu/bench/$n"; done
fi
cd "$root"
rm -f .gpu/build.log
rm -f .gpu/bench/*snapshot_replay* .gpu/bin/*__example__*   # the pickle reader (no GPU in it); examples run from .gpu/examples
XZ_OPT=-T2 tar -cJf .gpu.tar.xz .gpu
du -sh .gpu .gpu.tar.xz
echo "carry [\".gpu.tar.xz\"] and run on the GPU host:  bash bench/gpu_session.sh"
