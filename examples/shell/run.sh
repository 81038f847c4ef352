#!/bin/sh
# Shell example: copies the example repository to a temporary directory, makes it a git
# repository whose `main` holds the original spec, changes the spec (`slugify` must squeeze runs
# of dashes and trim them at both ends), and runs `bork-ci run` on it with a scripted model (no
# API key needed). The checker runs in the Docker sandbox (image debian:bookworm-slim, built by
# ci/build-images.sh debian). The scripted model's first answer misses a case; the checker's
# finding goes back to it, and its second answer converges: 2 iterations, exit code 0.
# Usage: examples/shell/run.sh [path/to/bork-ci]   (exits with bork-ci's exit code)
set -eu
exec "$(dirname "$0")/../run-example.sh" shell specs/slugify.md "$@"
