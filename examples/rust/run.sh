#!/bin/sh
# Rust example: copies the example crate to a temporary directory, makes it a git repository
# whose `main` holds the original spec, changes the spec (`count` must group digits in threes),
# and runs `bork-ci run` on it with a scripted model (no API key needed). In the Docker sandbox
# (image bork-ci-example/rust:bookworm, built by ci/build-images.sh rust) the setup step
# `cargo fetch --locked` fills the dependency cache with the network on (it reaches crates.io);
# the checker then runs `cargo test --offline` without network. 1 iteration, exit code 0.
# Usage: examples/rust/run.sh [path/to/bork-ci]   (exits with bork-ci's exit code)
set -eu
exec "$(dirname "$0")/../run-example.sh" rust specs/counts.md "$@"
