#!/bin/sh
# Quick start: copies the example repository to a temporary directory, makes it a git repository
# whose `main` holds the original spec, changes the spec, and runs `bork-ci run` on it with a
# scripted model (no API key needed). Usage: examples/quickstart/run.sh [path/to/bork-ci]
set -eu
exec "$(dirname "$0")/../run-example.sh" quickstart specs/greet.md "$@"
