#!/bin/sh
# Python example: copies the example repository to a temporary directory, makes it a git
# repository whose `main` holds the original spec, changes the spec (`parse_duration` must accept
# hours and combined parts), and runs `bork-ci run` on it with a scripted model (no API key
# needed). The checker runs pytest in the Docker sandbox (image bork-ci-example/python:bookworm,
# built by ci/build-images.sh python), each failing test a finding on its file. 1 iteration,
# exit code 0.
# Usage: examples/python/run.sh [path/to/bork-ci]   (exits with bork-ci's exit code)
# BORK_EXAMPLE_REPORT names the report file (default: report.json in the temporary repository).
set -eu
# The checker runs as 65534:65534: the repository must be readable by others.
umask 022
here=$(cd "$(dirname "$0")" && pwd)
bork=${1:-$here/../../target/release/bork-ci}
bork=$(cd "$(dirname "$bork")" && pwd)/$(basename "$bork")
work=$(mktemp -d "${TMPDIR:-/tmp}/bork-example-python.XXXXXX")
chmod 755 "$work"
cp -R "$here/repo/." "$work/"
chmod -R a+rX "$work"
cd "$work"
git init -q -b main
git -c user.name=example -c user.email=example@example.invalid add -A
git -c user.name=example -c user.email=example@example.invalid commit -q -m "The durations example"
cp "$here/spec-change.md" specs/durations.md
report=${BORK_EXAMPLE_REPORT:-$work/report.json}
echo "== bork-ci run in $work (scripted model: $here/scripted-answers.json)"
status=0
BORK_LLM_SCRIPT="$here/scripted-answers.json" "$bork" run --report "$report" || status=$?
echo "== exit code $status; report: $report"
echo "== git diff after the run:"
git --no-pager diff --stat
exit "$status"
