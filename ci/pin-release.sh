#!/usr/bin/env bash
# Pins a release's sums into the action: ci/pin-release.sh VERSION [BASE [IMAGE@DIGEST]]
#
# Reads the `.sha256` file of each of the four release assets from BASE (a URL or a directory;
# default https://github.com/bork-ci/bork-ci/releases/download/vVERSION) and writes their sums to
# ci/release-sums.txt, replacing any earlier lines for VERSION. The release workflow commits the
# result on top of the released commit and tags THAT commit vVERSION, so the action at the tag
# installs the release verified (a tag without these lines would build from source).
#
# With IMAGE@DIGEST (the release image as pushed, `ghcr.io/OWNER/bork-ci@sha256:...`), the
# templates that run bork-ci's image (GitLab, Buildkite, Jenkins) are rewritten to name it by
# VERSION and digest, so a moved tag cannot change what they run.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: ci/pin-release.sh VERSION [BASE_URL_OR_DIR]}"
version="${version#v}"
base="${2:-https://github.com/bork-ci/bork-ci/releases/download/v$version}"
image="${3:-}"
if [ -n "$image" ] && ! [[ "$image" =~ ^[a-z0-9./_-]+/bork-ci@sha256:[0-9a-f]{64}$ ]]; then
    echo "pin-release: '$image' is not IMAGE@sha256:<64 hex digits>" >&2
    exit 2
fi
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
if [ -n "$image" ]; then
    name="${image%@*}"
    digest="${image#*@}"
    for file in ci/gitlab-ci.yml ci/gitlab-ci-dind.yml ci/buildkite.yml ci/Jenkinsfile ci/toolchain.Dockerfile; do
        [ -f "$file" ] || continue
        tmp="$(mktemp)"
        sed -E "s#ghcr\.io/[a-z0-9_.-]+/bork-ci:[0-9A-Za-z.+-]+(@sha256:[0-9a-f]{64})?#$name:$version@$digest#g" "$file" >"$tmp"
        mv "$tmp" "$file"
    done
    echo "templates now run $name:$version@$digest"
fi
