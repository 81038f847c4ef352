#!/bin/sh
# Python example: copies the example repository to a temporary directory, makes it a git
# repository whose `main` holds the original spec, changes the spec (`parse_duration` must accept
# hours and combined parts), and runs `bork-ci run` on it with a scripted model (no API key
# needed). The checker runs pytest in the Docker sandbox (image bork-ci-example/python:bookworm,
# built by ci/build-images.sh python), each failing test a finding on its file. 1 iteration,
# exit code 0.
# Usage: examples/python/run.sh [path/to/bork-ci]   (exits with bork-ci's exit code)
set -eu
exec "$(dirname "$0")/../run-example.sh" python specs/durations.md "$@"
