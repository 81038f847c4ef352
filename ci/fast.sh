#!/usr/bin/env bash
# The fast tier of bork-ci's CI: what needs no Docker engine, no images and no network, for every
# change before the full `.ci/run`: formatting, clippy (`-D warnings`, every target), the unit
# tests, and the architecture tests (the walls that text alone shows: writers, stderr writers,
# `.git`, process waits, boundary crates). Prints each stage's time and the total.
# Usage: ci/fast.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
total_start=$SECONDS
timings=()
stage() {
    local name=$1 start=$SECONDS
    shift
    printf '\n== %s\n' "$name"
    "$@"
    timings+=("$(printf '%6d s  %s' $((SECONDS - start)) "$name")")
}
stage "format" cargo fmt --all -- --check
stage "lints (clippy -D warnings, all targets)" cargo clippy --locked --workspace --all-targets -- -D warnings
stage "unit tests" cargo test --locked --workspace --lib
stage "architecture tests" cargo test --locked --test it architecture::
printf '\n== fast tier: stage times\n'
printf '%s\n' "${timings[@]}"
printf '%6d s  total\n' $((SECONDS - total_start))
