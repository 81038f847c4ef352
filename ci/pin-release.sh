#!/usr/bin/env bash
# Pins a release's sums into the action: ci/pin-release.sh VERSION [BASE]
#
# Reads the `.sha256` file of each of the four release assets from BASE (a URL or a directory;
# default https://github.com/bork-ci/bork-ci/releases/download/vVERSION) and writes their sums to
# ci/release-sums.txt, replacing any earlier lines for VERSION. Commit the result; the tag
# vVERSION of the action must point at a commit holding these lines (push the tag once the
# release workflow has published the assets and this commit is made), or the action at that tag
# builds from source instead of downloading.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: ci/pin-release.sh VERSION [BASE_URL_OR_DIR]}"
version="${version#v}"
base="${2:-https://github.com/bork-ci/bork-ci/releases/download/v$version}"
table=ci/release-sums.txt
assets=(
    bork-ci-x86_64-unknown-linux-musl.tar.gz
    bork-ci-aarch64-unknown-linux-musl.tar.gz
    bork-ci-x86_64-apple-darwin.tar.gz
    bork-ci-aarch64-apple-darwin.tar.gz
)
lines=()
for asset in "${assets[@]}"; do
    if [ -d "$base" ]; then
        text="$(cat "$base/$asset.sha256")"
    else
        text="$(curl --fail --silent --show-error --location "${base%/}/$asset.sha256")"
    fi
    sum="$(printf '%s\n' "$text" | awk 'NR == 1 { print tolower($1) }')"
    if ! [[ "$sum" =~ ^[0-9a-f]{64}$ ]]; then
        echo "pin-release: $asset.sha256 from $base holds no sha256 (got '${text:0:80}')" >&2
        exit 2
    fi
    lines+=("$version $asset $sum")
done
tmp="$(mktemp)"
awk -v v="$version" '/^#/ || $1 != v' "$table" >"$tmp"
printf '%s\n' "${lines[@]}" >>"$tmp"
mv "$tmp" "$table"
echo "pinned v$version in $table:"
printf '  %s\n' "${lines[@]}"
