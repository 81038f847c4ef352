#!/bin/sh
# Runs one example end to end: copies examples/NAME/repo to a temporary directory, makes it a git
# repository whose `main` holds the original spec, replaces SPEC (a path in it) with the example's
# spec-change.md, and runs `bork-ci run` there with the scripted model reading the example's
# scripted-answers.json (no API key needed). Each example's run.sh calls this.
# Usage: examples/run-example.sh NAME SPEC [path/to/bork-ci]   (exits with bork-ci's exit code)
# BORK_EXAMPLE_REPORT names the report file (default: report.json in the temporary repository).
set -eu
[ "$#" -ge 2 ] || { echo "usage: $0 NAME SPEC [path/to/bork-ci]" >&2; exit 2; }
name=$1 spec=$2
# The checker runs as 65534:65534 in the Docker sandbox: the repository must be readable by others.
umask 022
examples=$(cd "$(dirname "$0")" && pwd)
here=$examples/$name
bork=${3:-$examples/../target/release/bork-ci}
bork=$(cd "$(dirname "$bork")" && pwd)/$(basename "$bork")
work=$(mktemp -d "${TMPDIR:-/tmp}/bork-example-$name.XXXXXX")
chmod 755 "$work"
cp -R "$here/repo/." "$work/"
chmod -R a+rX "$work"
cd "$work"
git init -q -b main
git -c user.name=example -c user.email=example@example.invalid add -A
git -c user.name=example -c user.email=example@example.invalid commit -q -m "The $name example"
cp "$here/spec-change.md" "$spec"
report=${BORK_EXAMPLE_REPORT:-$work/report.json}
echo "== bork-ci run in $work (scripted model: $here/scripted-answers.json)"
status=0
BORK_LLM_SCRIPT="$here/scripted-answers.json" "$bork" run --report "$report" || status=$?
echo "== exit code $status; report: $report"
echo "== git diff after the run:"
git --no-pager diff --stat
exit "$status"
