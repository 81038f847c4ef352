#!/bin/sh
# Shell example: copies the example repository to a temporary directory, makes it a git
# repository whose `main` holds the original spec, changes the spec (`slugify` must squeeze runs
# of dashes and trim them at both ends), and runs `bork-ci run` on it with a scripted model (no
# API key needed). The checker runs in the Docker sandbox (image debian:bookworm-slim, built by
# ci/build-images.sh debian). The scripted model's first answer misses a case; the checker's
# finding goes back to it, and its second answer converges: 2 iterations, exit code 0.
# Usage: examples/shell/run.sh [path/to/bork-ci]   (exits with bork-ci's exit code)
# BORK_EXAMPLE_REPORT names the report file (default: report.json in the temporary repository).
set -eu
# The checker runs as 65534:65534: the repository must be readable by others.
umask 022
here=$(cd "$(dirname "$0")" && pwd)
bork=${1:-$here/../../target/release/bork-ci}
bork=$(cd "$(dirname "$bork")" && pwd)/$(basename "$bork")
work=$(mktemp -d "${TMPDIR:-/tmp}/bork-example-shell.XXXXXX")
chmod 755 "$work"
cp -R "$here/repo/." "$work/"
chmod -R a+rX "$work"
cd "$work"
git init -q -b main
git -c user.name=example -c user.email=example@example.invalid add -A
git -c user.name=example -c user.email=example@example.invalid commit -q -m "The slugify example"
cp "$here/spec-change.md" specs/slugify.md
report=${BORK_EXAMPLE_REPORT:-$work/report.json}
echo "== bork-ci run in $work (scripted model: $here/scripted-answers.json)"
status=0
BORK_LLM_SCRIPT="$here/scripted-answers.json" "$bork" run --report "$report" || status=$?
echo "== exit code $status; report: $report"
echo "== git diff after the run:"
git --no-pager diff --stat
exit "$status"
