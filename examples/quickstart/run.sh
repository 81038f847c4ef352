#!/bin/sh
# Quick start: copies the example repository to a temporary directory, makes it a git repository
# whose `main` holds the original spec, changes the spec, and runs `bork-ci run` on it with a
# scripted model (no API key needed). Usage: examples/quickstart/run.sh [path/to/bork-ci]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bork=${1:-$here/../../target/release/bork-ci}
bork=$(cd "$(dirname "$bork")" && pwd)/$(basename "$bork")
work=$(mktemp -d "${TMPDIR:-/tmp}/bork-quickstart.XXXXXX")
cp -R "$here/repo/." "$work/"
cd "$work"
git init -q -b main
git -c user.name=example -c user.email=example@example.invalid add -A
git -c user.name=example -c user.email=example@example.invalid commit -q -m "The greet example"
cp "$here/spec-change.md" specs/greet.md
echo "== bork-ci run in $work (scripted model: $here/scripted-answers.json)"
status=0
BORK_LLM_SCRIPT="$here/scripted-answers.json" "$bork" run --report "$work/report.json" || status=$?
echo "== exit code $status; report: $work/report.json"
echo "== git diff after the run:"
git --no-pager diff --stat
exit "$status"
