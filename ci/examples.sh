#!/bin/sh
# Runs the real-toolchain examples (examples/rust, examples/python, examples/shell) end to end:
# builds the images they run in (ci/build-images.sh debian examples: offline, from Debian's
# packages, cached), then runs each example's run.sh with the given bork-ci and checks that it
# exits 0, that its report says `converged`, and that it took the number of iterations the
# example is written to show (shell: 2, its first scripted answer misses a case; the others: 1).
# Prints one line per example with its duration; exits 1 if any failed (its log's tail is
# printed), 2 on a usage or setup error.
# Needs the Docker engine, git, and network access to crates.io for the Rust example's setup step
# (its `cargo fetch --locked` runs in a container on the bridge network; its checker runs with
# none).
# Usage: ci/examples.sh [path/to/bork-ci] [EXAMPLE...]   (default: target/release/bork-ci; all)
# Logs, reports and the examples' temporary repositories are kept under a directory printed at
# the start; it is removed when every example passed, unless BORK_EXAMPLES_KEEP=1.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'examples: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }

bork=${1:-$root/target/release/bork-ci}
[ "$#" -eq 0 ] || shift
[ -x "$bork" ] || die "$bork is not an executable (build it: cargo build --release --locked)"
bork=$(cd "$(dirname "$bork")" && pwd)/$(basename "$bork")
[ "$#" -gt 0 ] || set -- rust python shell

expected_iterations() {
    case "$1" in
        shell) echo 2 ;;
        rust | python) echo 1 ;;
        *) return 1 ;;
    esac
}
for name in "$@"; do
    expected_iterations "$name" >/dev/null && [ -x "$root/examples/$name/run.sh" ] ||
        die "unknown example '$name' (rust, python, shell)"
done

command -v git >/dev/null 2>&1 || die "git is not installed"
"$root/ci/build-images.sh" debian examples || die "building the example images failed"

# The checker runs as 65534:65534: what it reads must be readable by others.
umask 022
out=$(mktemp -d "${TMPDIR:-/tmp}/bork-examples.XXXXXX")
chmod 755 "$out"
say "logs, reports and repositories in $out"

# The status and the number of iterations in the report $1, as "STATUS ITERATIONS".
report_summary() {
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$1" <<'PY' 2>/dev/null || echo "unreadable ?"
import json, sys
report = json.load(open(sys.argv[1]))
print(report.get("status", "?"), len(report.get("iterations", [])))
PY
    elif [ -s "$1" ]; then
        status=$(tr -d ' \n' <"$1" | sed -n 's/.*"status":"\([a-z-]*\)".*/\1/p')
        echo "${status:-?} ?"
    else
        echo "missing ?"
    fi
}

failed=0
for name in "$@"; do
    log=$out/$name.log
    report=$out/$name-report.json
    start=$(date +%s)
    code=0
    TMPDIR=$out BORK_EXAMPLE_REPORT=$report "$root/examples/$name/run.sh" "$bork" >"$log" 2>&1 || code=$?
    secs=$(($(date +%s) - start))
    summary=$(report_summary "$report")
    status=${summary% *}
    iterations=${summary#* }
    want=$(expected_iterations "$name")
    problem=""
    if [ "$code" != 0 ]; then
        problem="exit code $code"
    elif [ "$status" != converged ]; then
        problem="report status '$status'"
    elif [ "$iterations" != "$want" ]; then
        problem="$iterations iterations, the example is written for $want"
    fi
    if [ -z "$problem" ]; then
        printf '%-7s ok      converged in %s iteration(s), %s s\n' "$name" "$iterations" "$secs"
    else
        failed=1
        printf '%-7s FAILED  %s (status %s, %s iteration(s)), %s s; log: %s\n' \
            "$name" "$problem" "$status" "$iterations" "$secs" "$log"
        tail -n 40 "$log" | sed 's/^/    /'
    fi
done

if [ "$failed" = 0 ] && [ "${BORK_EXAMPLES_KEEP:-0}" != 1 ]; then
    rm -rf "$out" 2>/dev/null || say "could not remove all of $out"
fi
exit "$failed"
