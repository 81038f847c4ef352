#!/bin/sh
# Builds the statically linked bork-ci with the README's command and proves it in containers
# (tests/it/static_build.rs): the binary alone in a `FROM scratch` container reaches a fake model
# by host name (its resolver and root store need nothing from the container), and the release
# image (images/release/Dockerfile, on the local debian:bookworm-slim) runs git and `bork-ci pack`
# on a checkout owned by another uid; then the GitLab and Buildkite templates run end to end in
# that image (tests/it/ci_templates.rs).
#   BORK_STATIC_TARGET_DIR  the static build's target directory, kept between runs so rebuilds are
#                           incremental (default: ~/.cache/bork-ci/static-target; a separate one,
#                           since RUSTFLAGS differ from the normal build's)
#   BORK_STATIC_PROFILE     the cargo profile (default: release, the README's command). `.ci/run`
#                           uses `smoke` (Cargo.toml): the release profile's static, stripped
#                           linking without its optimiser, which costs about four times the
#                           compile on two cores and changes nothing these tests look at
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
triple=x86_64-unknown-linux-gnu
target_dir=${BORK_STATIC_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bork-ci/static-target}
profile=${BORK_STATIC_PROFILE:-release}

say() { printf 'static-smoke: %s\n' "$*" >&2; }

start=$(date +%s)
CARGO_TARGET_DIR=$target_dir RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --profile "$profile" --locked --target "$triple"
binary=$target_dir/$triple/$profile/bork-ci
say "static build ($profile profile): $(($(date +%s) - start)) s, $(stat -c %s "$binary") bytes ($binary)"
file -L "$binary" >&2

ci/build-images.sh debian
start=$(date +%s)
BORK_STATIC_BINARY=$binary cargo test --locked --test it static_build -- --ignored
say "container smoke: $(($(date +%s) - start)) s"

# The GitLab (Docker-in-Docker) and Buildkite templates as `init` writes them, run as those CI
# systems run a job, with the release image built from this binary (tests/it/ci_templates.rs).
start=$(date +%s)
BORK_STATIC_BINARY=$binary cargo test --locked --test it ci_templates -- --ignored --test-threads 1
say "CI templates end to end: $(($(date +%s) - start)) s"
