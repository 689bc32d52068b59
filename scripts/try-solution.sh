#!/usr/bin/env bash
# Runs a chapter's tests with its reference solution laid over the stubs, in a scratch workspace,
# leaving the shipped files untouched. Usage: scripts/try-solution.sh <chapter> [cargo test args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chapter=${1:?usage: scripts/try-solution.sh <chapter> [cargo test args...]}; shift
scratch=$(mktemp -d "/tmp/solution-$chapter.XXXX")
trap 'rm -rf "$scratch"' EXIT
cp -r "$root/exercises/$chapter" "$scratch/$chapter"
cp -r "$root/solutions/$chapter/." "$scratch/$chapter/"
cat > "$scratch/Cargo.toml" <<TOML
[workspace]
resolver = "3"
members = ["$chapter"]
[workspace.package]
edition = "2024"
version = "0.1.0"
license = "MIT OR Apache-2.0"
[workspace.dependencies]
gpumem = { path = "$root/crates/gpumem" }
$(sed -n '/^\[workspace.dependencies\]/,/^\[/p' "$root/Cargo.toml" | grep -v '^\[' | grep -v '^gpumem' )
[profile.test]
debug = "line-tables-only"
TOML
cp "$root/Cargo.lock" "$scratch/" 2>/dev/null || true
cd "$scratch"
CARGO_TARGET_DIR="$root/target/try-solution" cargo test "$@"
