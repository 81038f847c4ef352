#!/bin/sh
# Rust example: copies the example crate to a temporary directory, makes it a git repository
# whose `main` holds the original spec, changes the spec (`count` must group digits in threes),
# and runs `bork-ci run` on it with a scripted model (no API key needed). In the Docker sandbox
# (image bork-ci-example/rust:bookworm, built by ci/build-images.sh rust) the setup step
# `cargo fetch --locked` fills the dependency cache with the network on (it reaches crates.io);
# the checker then runs `cargo test --offline` without network. 1 iteration, exit code 0.
# Usage: examples/rust/run.sh [path/to/bork-ci]   (exits with bork-ci's exit code)
# BORK_EXAMPLE_REPORT names the report file (default: report.json in the temporary repository).
set -eu
# The checker runs as 65534:65534: the repository must be readable by others.
umask 022
here=$(cd "$(dirname "$0")" && pwd)
bork=${1:-$here/../../target/release/bork-ci}
bork=$(cd "$(dirname "$bork")" && pwd)/$(basename "$bork")
work=$(mktemp -d "${TMPDIR:-/tmp}/bork-example-rust.XXXXXX")
chmod 755 "$work"
cp -R "$here/repo/." "$work/"
chmod -R a+rX "$work"
cd "$work"
git init -q -b main
git -c user.name=example -c user.email=example@example.invalid add -A
git -c user.name=example -c user.email=example@example.invalid commit -q -m "The counts example"
cp "$here/spec-change.md" specs/counts.md
report=${BORK_EXAMPLE_REPORT:-$work/report.json}
echo "== bork-ci run in $work (scripted model: $here/scripted-answers.json)"
status=0
BORK_LLM_SCRIPT="$here/scripted-answers.json" "$bork" run --report "$report" || status=$?
echo "== exit code $status; report: $report"
echo "== git diff after the run:"
git --no-pager diff --stat
exit "$status"
