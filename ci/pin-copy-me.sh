#!/usr/bin/env bash
# Writes a commit of the action into every file a user copies: ci/pin-copy-me.sh COMMIT
#
# COMMIT is a commit of bork-ci/bork-ci that pins releases (ci/release-sums.txt); each
# `uses: bork-ci/bork-ci@<40 hex digits>` in ci/workflows/*.yml (what `bork-ci init --ci github`
# writes, too) is rewritten to it, with a comment naming the newest release it pins. Run by the
# workflow pin-copy-me.yml on every push to the default branch that changes the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
commit="${1:?usage: ci/pin-copy-me.sh COMMIT}"
if ! [[ "$commit" =~ ^[0-9a-f]{40}$ ]]; then
    echo "pin-copy-me: '$commit' is not a full commit SHA (40 lowercase hex digits)" >&2
    exit 2
fi
newest="$(awk '!/^#/ && NF == 3 { print $1 }' ci/release-sums.txt | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)"
if [ -z "$newest" ]; then
    echo "pin-copy-me: ci/release-sums.txt pins no release yet" >&2
    exit 2
fi
changed=0
for file in ci/workflows/*.yml; do
    tmp="$(mktemp)"
    sed -E "s|(uses: bork-ci/bork-ci@)[0-9a-f]{40}( #.*)?$|\1$commit # installs v$newest (the newest release this commit pins)|" "$file" >"$tmp"
    if ! cmp -s "$tmp" "$file"; then
        mv "$tmp" "$file"
        changed=$((changed + 1))
        echo "pinned $file to $commit (v$newest)"
    else
        rm -f "$tmp"
    fi
done
echo "$changed file(s) changed"
