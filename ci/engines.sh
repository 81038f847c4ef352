#!/usr/bin/env bash
# Starts, on this machine and without a registry, the container engines bork-ci's Docker sandbox
# must work on, and runs the sandbox and Docker-run suites against each of them:
#   podman  Podman's Docker-compatible API (Debian `podman`): `podman system service` on
#           unix:///run/bork-podman.sock with the runc runtime and Podman's stock ulimit defaults
#           (which exceed this machine's hard limits: bork-ci's explicit ulimits make it work)
#   tcp     a second dockerd (Debian `docker.io`) in a container of the host engine, published on
#           127.0.0.1 only (tcp://127.0.0.1:23750), with its own network namespace and storage:
#           bork-ci cannot see its filesystem, nor it bork-ci's
#   dood    docker-outside-of-docker: the tests themselves run in a container with the host's
#           /var/run/docker.sock mounted, their repositories under a path the host does not have
# Images are built from Debian packages (the debian:bookworm-slim of ci/build-images.sh plus apt)
# and loaded with `docker save | <engine> load`. Kept between runs, keyed by content: the engine
# image is tagged with a digest of its recipe and base image, the second dockerd keeps its storage
# in a named volume, Podman in /var/lib/containers; an image is loaded again only when its ID on
# the engine differs from the host's.
#
# Usage: ci/engines.sh up [ENGINE...]      start (default: all; idempotent)
#        ci/engines.sh down [--purge]      stop what `up` started; --purge also removes the cached
#                                          images, the dockerd volume and what was loaded into Podman
#        ci/engines.sh env [ENGINE]        the DOCKER_HOST per engine; with ENGINE, `export` lines
#                                          for eval (DOCKER_HOST, BORK_TEST_DOCKER_HOST,
#                                          BORK_TEST_ENGINE, BORK_TEST_TRANSPORT)
#        ci/engines.sh test [ENGINE...]    the matrix: the suites below on each engine (default:
#                                          all), then a table pass/fail/skipped per test and engine;
#                                          a failed test is run once more alone, and one that then
#                                          passes is shown FLAKY (its failure printed), not failed
#        ci/engines.sh image               builds (once) and prints the engine image: Debian's
#                                          dockerd, for a docker:dind service (tests/it/ci_templates.rs)
#        ci/engines.sh seccomp             the seccomp profile such an engine's container runs with
#        ci/engines.sh dood-run [-C DIR] [--copy PATH]... -- CMD [ARG...]
#                                          CMD in a fresh container with the host's socket, the
#                                          files of DIR (default: this checkout; tracked and
#                                          untracked, not ignored) and each PATH copied in (never
#                                          mounted) at their own paths, TMPDIR under /bork-dood
# Variables: BORK_ENGINES_TESTS  the test filters (default: "sandbox:: run_docker::")
#            BORK_ENGINES_TCP_PORT  the second dockerd's port on 127.0.0.1 (default: 23750)
#            BORK_ENGINES_STATE  pid files, logs, configuration (default: /run/bork-ci-engines)
#
# In .ci/run (measured on 2 cores, engines already cached: up 4 s, test 7 min, down 2 s; the
# first up builds the engine image from Debian packages in about a minute):
#     log "engines: Podman, dockerd over TCP, docker-outside-of-docker (ci/engines.sh)"
#     ci/engines.sh up
#     trap 'ci/engines.sh down' EXIT
#     ci/engines.sh test
#     ci/engines.sh down
#     trap - EXIT
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
all_engines=(podman tcp dood)
state=${BORK_ENGINES_STATE:-/run/bork-ci-engines}
tcp_port=${BORK_ENGINES_TCP_PORT:-23750}
podman_socket=/run/bork-podman.sock
podman_host=unix://$podman_socket
tcp_host=tcp://127.0.0.1:$tcp_port
engine_repo=bork-ci-engines/debian-docker
dind_name=bork-ci-engines-dind
dind_volume=bork-ci-engines-dind
dood_root=/bork-dood
owner_label=bork-ci-engines=1
# What every engine needs: the checker test image.
test_images=(bork-ci-test/busybox:latest)

say() { printf 'engines: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# The host engine, whatever DOCKER_HOST the caller has.
host_docker() { DOCKER_HOST=unix:///var/run/docker.sock docker "$@"; }

lock() {
    mkdir -p "$state"
    exec 8>"$state/lock"
    flock 8
}

# --- the engine image: Debian's docker.io (dockerd, containerd, runc, the CLI), git, procps ---

engine_dockerfile() {
    cat <<'DOCKERFILE'
FROM debian:bookworm-slim
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      docker.io git procps ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY dind-entry /usr/local/bin/dind-entry
DOCKERFILE
}

# The second dockerd's entry point. Docker mounts the cgroup v1 hierarchies read-only in a
# container that is not privileged; with CAP_SYS_ADMIN in a private cgroup namespace they are
# remounted read-write (only this container's own subtree is visible), so that the inner dockerd
# can apply memory, pids and CPU limits. `--bridge none`: no docker0 and no iptables; the
# containers bork-ci starts use `none` or `host` (this container's namespace) networking.
dind_entry() {
    cat <<'ENTRY'
#!/bin/sh
set -eu
for mnt in /sys/fs/cgroup /sys/fs/cgroup/*; do
    mount -o remount,rw,bind "$mnt"
done
rm -f /var/run/docker.pid
exec dockerd --host tcp://0.0.0.0:2375 --host unix:///var/run/docker.sock --tls=false \
    --bridge none --iptables=false --ip6tables=false --ip-masq=false \
    --storage-driver overlay2 --log-driver json-file
ENTRY
}

# The seccomp profile of the second dockerd's container: everything a container engine needs
# (mount, unshare, keyctl for runc's session keyring, ...) but not what reaches the host kernel
# itself (modules, kexec, reboot, clocks, swap, open_by_handle_at, bpf, perf).
seccomp_profile() {
    local deny='"acct","add_key","adjtimex","bpf","clock_adjtime","clock_settime","create_module",
      "delete_module","finit_module","get_kernel_syms","init_module","ioperm","iopl","kcmp",
      "kexec_file_load","kexec_load","lookup_dcookie","nfsservctl","open_by_handle_at",
      "perf_event_open","query_module","quotactl","reboot","request_key","settimeofday","stime",
      "swapoff","swapon","sysfs","_sysctl","uselib","userfaultfd","ustat","vm86","vm86old"'
    printf '{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":[%s],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}\n' \
        "$(printf '%s' "$deny" | tr -d ' \n')"
}

engine_image() {
    local base key
    base=$(host_docker image inspect -f '{{.Id}}' debian:bookworm-slim)
    key=$({ engine_dockerfile; dind_entry; echo "$base"; } | sha256sum | cut -c1-16)
    printf '%s:%s\n' "$engine_repo" "$key"
}

build_engine_image() {
    BORK_REBUILD_IMAGES=0 "$here/ci/build-images.sh" debian
    local image ctx
    image=$(engine_image)
    if host_docker image inspect "$image" >/dev/null 2>&1; then
        return 0
    fi
    say "building $image (debian:bookworm-slim + Debian's docker.io, git, procps)"
    ctx=$(mktemp -d)
    engine_dockerfile >"$ctx/Dockerfile"
    dind_entry >"$ctx/dind-entry"
    chmod 755 "$ctx/dind-entry"
    # --network host: apt reaches the Debian mirror as the host does.
    DOCKER_BUILDKIT=0 host_docker build -q --network host --label "$owner_label" -t "$image" "$ctx" \
        >/dev/null || { rm -rf "$ctx"; die "building $image failed"; }
    rm -rf "$ctx"
    # Older recipes of the same image are no longer used.
    host_docker images --format '{{.Repository}}:{{.Tag}}' "$engine_repo" | grep -vx "$image" |
        xargs -r env DOCKER_HOST=unix:///var/run/docker.sock docker rmi >/dev/null 2>&1 || true
}

# Loads the test images into the engine at DOCKER_HOST=$1 unless it has them with the same ID.
load_images() {
    local target=$1 name want have
    BORK_REBUILD_IMAGES=0 "$here/ci/build-images.sh" busybox
    for name in "${test_images[@]}"; do
        want=$(host_docker image inspect -f '{{.Id}}' "$name")
        have=$(DOCKER_HOST=$target docker image inspect -f '{{.Id}}' "$name" 2>/dev/null || true)
        if [ "$want" != "$have" ]; then
            say "loading $name into $target"
            host_docker save "$name" | DOCKER_HOST=$target docker load -q >/dev/null
        fi
    done
}

# Waits until the engine at DOCKER_HOST=$1 answers; else shows the last lines of `$2...`.
wait_for() {
    local target=$1
    shift
    for _ in $(seq 1 60); do
        DOCKER_HOST=$target docker version >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    "$@" 2>&1 | tail -n 30 >&2 || true
    die "the engine at $target did not answer"
}

# --- podman ---

up_podman() {
    # catatonit: Podman's init process (Recommends of the package; bork-ci runs every container
    # with an init).
    if ! command -v podman >/dev/null 2>&1 || [ ! -x /usr/libexec/podman/catatonit ]; then
        say "installing podman and catatonit (Debian)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman catatonit >/dev/null
    fi
    command -v runc >/dev/null 2>&1 || die "runc is not installed"
    if ! DOCKER_HOST=$podman_host docker version >/dev/null 2>&1; then
        # crun refuses this machine's hybrid cgroup layout: runc. No systemd: cgroupfs, file
        # events. Podman's default ulimits stay as they are.
        cat >"$state/containers.conf" <<'CONF'
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
        rm -f "$podman_socket"
        # From the state directory: conmon leaves an empty `oom` file in its working directory
        # when a container is OOM-killed, which must not land in the checkout.
        (cd "$state" && CONTAINERS_CONF=$state/containers.conf exec setsid podman system service \
            --time=0 "$podman_host" >"$state/podman.log" 2>&1 </dev/null 8>&-) &
        echo $! >"$state/podman.pid"
        wait_for "$podman_host" cat "$state/podman.log"
    fi
    load_images "$podman_host"
    say "podman $(DOCKER_HOST=$podman_host docker version -f '{{.Server.Version}}') at $podman_host"
}

down_podman() {
    if [ -s "$state/podman.pid" ]; then
        local pid
        pid=$(cat "$state/podman.pid")
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = podman ]; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 20); do [ -e "/proc/$pid" ] || break; sleep 0.25; done
        fi
        rm -f "$state/podman.pid" "$podman_socket"
    fi
}

purge_podman() {
    command -v podman >/dev/null 2>&1 || return 0
    CONTAINERS_CONF=$state/containers.conf podman rm -af --filter label=bork-ci.run >/dev/null 2>&1 || true
    podman volume prune -f --filter label=bork-ci.cache >/dev/null 2>&1 || true
    local image
    for image in "${test_images[@]}"; do podman rmi -f "$image" >/dev/null 2>&1 || true; done
    podman images -q --filter label=bork-ci.runner-image=1 | xargs -r podman rmi -f >/dev/null 2>&1 || true
}

# --- tcp: a second dockerd in a container ---

up_tcp() {
    build_engine_image
    local image running
    image=$(engine_image)
    running=$(host_docker inspect -f '{{.State.Running}} {{.Config.Image}}' "$dind_name" 2>/dev/null || true)
    if [ "$running" != "true $image" ]; then
        host_docker rm -f "$dind_name" >/dev/null 2>&1 || true
        seccomp_profile >"$state/dind-seccomp.json"
        # Not privileged: on top of Docker's default set CAP_SYS_ADMIN (mounts, namespaces,
        # cgroups), CAP_NET_ADMIN (the loopback of the containers it starts) and CAP_SYS_PTRACE
        # (runc joins a running container's namespaces for `docker exec`); a private cgroup
        # namespace; the seccomp profile above. Its own network namespace (the host's bridge),
        # its storage in a volume; only the API is published, on the loopback.
        host_docker run -d --name "$dind_name" --label "$owner_label" \
            --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE --cgroupns private \
            --security-opt "seccomp=$state/dind-seccomp.json" \
            --publish "127.0.0.1:$tcp_port:2375" \
            --volume "$dind_volume:/var/lib/docker" \
            --entrypoint /usr/local/bin/dind-entry "$image" >/dev/null
    fi
    wait_for "$tcp_host" host_docker logs "$dind_name"
    load_images "$tcp_host"
    say "dockerd $(DOCKER_HOST=$tcp_host docker version -f '{{.Server.Version}}') at $tcp_host"
}

down_tcp() {
    host_docker rm -f "$dind_name" >/dev/null 2>&1 || true
}

purge_tcp() {
    host_docker volume rm -f "$dind_volume" >/dev/null 2>&1 || true
}

# --- dood: the tests in a container with the host's socket ---

up_dood() {
    build_engine_image
    [ ! -e "$dood_root" ] || die "$dood_root exists on this host: docker-outside-of-docker needs a path the host does not have"
    say "docker-outside-of-docker: $(engine_image) with /var/run/docker.sock, TMPDIR=$dood_root/tmp"
}

down_dood() {
    host_docker ps -aq --filter label=bork-ci-engines.dood=1 | xargs -r env DOCKER_HOST=unix:///var/run/docker.sock docker rm -f >/dev/null 2>&1 || true
}

purge_dood() {
    host_docker images -q "$engine_repo" | sort -u | xargs -r env DOCKER_HOST=unix:///var/run/docker.sock docker rmi -f >/dev/null 2>&1 || true
}

dood_run() {
    local dir=$here copies=()
    while [ $# -gt 0 ]; do
        case "$1" in
            -C) dir=$(cd "$2" && pwd); shift 2 ;;
            --copy) copies+=("$(realpath "$2")"); shift 2 ;;
            --) shift; break ;;
            *) break ;;
        esac
    done
    [ $# -gt 0 ] || die "dood-run: no command"
    build_engine_image
    [ ! -e "$dood_root" ] || die "$dood_root exists on this host"
    local name=bork-ci-dood-$$ rc=0
    # The network is the host's so that a fake model on 127.0.0.1 is reachable by the edit step,
    # which runs with the engine host's networking; the filesystem is the container's own.
    host_docker create --name "$name" --label "$owner_label" --label bork-ci-engines.dood=1 \
        --network host --volume /var/run/docker.sock:/var/run/docker.sock \
        --env TMPDIR="$dood_root/tmp" --env HOME=/root --env RUST_BACKTRACE=0 \
        --env BORK_TEST_ENGINE=dood --env BORK_TEST_TRANSPORT=copy \
        ${BORK_TEST_PYTHON:+--env BORK_TEST_PYTHON} \
        --workdir "$dir" "$(engine_image)" sh -c 'mkdir -p "$TMPDIR" && exec "$@"' sh "$@" >/dev/null
    {
        (cd / && git -C "$dir" ls-files -z --cached --others --exclude-standard |
            sed -z "s|^|${dir#/}/|" | xargs -0 -r sh -c 'for f; do [ -e "/$f" ] && printf "%s\0" "$f"; done' sh |
            tar -C / --null -T - -cf - ${copies[@]+"${copies[@]#/}"}) |
            host_docker cp - "$name:/"
    } || { host_docker rm -f "$name" >/dev/null; die "copying $dir into the container failed"; }
    host_docker start -a "$name" || rc=$?
    host_docker rm -f "$name" >/dev/null 2>&1 || true
    return "$rc"
}

# --- env ---

engine_env() {
    case "$1" in
        podman) printf 'export DOCKER_HOST=%s BORK_TEST_DOCKER_HOST=%s BORK_TEST_ENGINE=podman BORK_TEST_TRANSPORT=\n' "$podman_host" "$podman_host" ;;
        tcp) printf 'export DOCKER_HOST=%s BORK_TEST_DOCKER_HOST=%s BORK_TEST_ENGINE=tcp BORK_TEST_TRANSPORT=copy\n' "$tcp_host" "$tcp_host" ;;
        dood) printf 'export DOCKER_HOST=unix:///var/run/docker.sock BORK_TEST_DOCKER_HOST= BORK_TEST_ENGINE=dood BORK_TEST_TRANSPORT=copy  # inside ci/engines.sh dood-run\n' ;;
        *) die "unknown engine '$1' (${all_engines[*]})" ;;
    esac
}

print_env() {
    if [ $# -gt 0 ]; then engine_env "$1"; return; fi
    printf '%-7s %s\n' podman "DOCKER_HOST=$podman_host" tcp "DOCKER_HOST=$tcp_host" \
        dood "DOCKER_HOST=unix:///var/run/docker.sock (in the container of ci/engines.sh dood-run)"
}

# --- test: the matrix ---

# Tests that cannot apply to an engine, with the reason; `test` passes them as --skip.
skips_for() {
    local bind_only='bind only: the engine cannot see this host'"'"'s paths'
    case "$1" in
        tcp|dood)
            printf '%s\t%s\n' \
                sandbox::edit_step_profile "$bind_only; edit_step_over_copy covers the edit step" \
                run_docker::a_checkout_the_checker_cannot_read_is_a_clear_error "$bind_only; over copy the tree is copied, not mounted"
            ;;
    esac
    case "$1" in
        tcp)
            printf '%s\t%s\n' run_docker::the_loop_converges_with_both_steps_in_containers \
                "the edit step runs in the engine's network namespace, away from the fake model on this host's loopback; the scripted-model variant runs"
            ;;
    esac
}

test_executable() {
    local out
    out=$(cd "$here" && cargo test --locked --test it --no-run 2>&1) || { printf '%s\n' "$out" >&2; die "building the tests failed"; }
    printf '%s\n' "$out" | sed -n 's/.*Executable tests\/it\/main.rs (\(.*\))$/\1/p' | tail -n 1
}

# run_tests ENGINE ARG...: the test executable of run_matrix ($exe, with $bin beside it) with
# these arguments, against ENGINE.
run_tests() {
    local engine=$1
    shift
    if [ "$engine" = dood ]; then
        dood_run --copy "$exe" --copy "$bin" -- "$exe" "$@"
    else
        (eval "$(engine_env "$engine")"; cd "$here" && RUST_BACKTRACE=0 "$exe" "$@")
    fi
}

run_matrix() {
    local engines=("$@") exe bin results engine start filters skip_args line
    [ ${#engines[@]} -gt 0 ] || engines=("${all_engines[@]}")
    read -r -a filters <<<"${BORK_ENGINES_TESTS:-sandbox:: run_docker::}"
    (cd "$here" && cargo build --locked --quiet)
    exe=$(test_executable)
    [ -n "$exe" ] || die "cannot find the test executable"
    exe=$(cd "$here" && realpath "$exe")
    bin=$(realpath "${CARGO_TARGET_DIR:-$here/target}/debug/bork-ci")
    BORK_REBUILD_IMAGES=0 "$here/ci/build-images.sh" busybox
    results=$(mktemp)
    local failed=0
    for engine in "${engines[@]}"; do
        "up_$engine"
        skip_args=()
        while IFS=$'\t' read -r name reason; do
            [ -n "$name" ] || continue
            skip_args+=(--skip "$name")
            printf '%s\t%s\tskipped (%s)\n' "$engine" "$name" "$reason" >>"$results"
        done < <(skips_for "$engine")
        start=$SECONDS
        local log=$state/test-$engine.log rc=0 filter
        : >"$log"
        # One suite after the other: `bork-ci run` in one reaps what looks like a dead run's
        # leftovers, which the other's gc test is about to reap itself.
        for filter in "${filters[@]}"; do
            say "== $engine: $filter"
            run_tests "$engine" "$filter" "${skip_args[@]}" >>"$log" 2>&1 || rc=$?
        done
        grep -E '^test result:' "$log" >&2 || tail -n 20 "$log" >&2
        # A test that failed is run once more, alone: one that passes then is reported as
        # flaky in the table (and its first failure printed), not as a failure of the matrix.
        local retried=" " retry_log=$state/retry-$engine.log name
        if [ "$rc" != 0 ]; then
            grep -A 3 -E '^thread .* panicked at' "$log" | grep -v -e '^stack backtrace' >&2 || true
            local failures=() again=0
            mapfile -t failures < <(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log")
            : >"$retry_log"
            if [ "${#failures[@]}" -gt 0 ]; then
                say "$engine: running the failed test(s) once more, alone: ${failures[*]}"
                for name in "${failures[@]}"; do
                    run_tests "$engine" "$name" --exact >>"$retry_log" 2>&1 || true
                    if grep -qxF "test $name ... ok" "$retry_log"; then
                        retried+="$name "
                    else
                        again=1
                    fi
                done
                [ "$again" = 1 ] || rc=0
            fi
        fi
        [ "$rc" = 0 ] || failed=1
        sed -n 's/^test \(.*\) \.\.\. \(ok\|FAILED\|ignored\)$/\1\t\2/p' "$log" |
            while IFS=$'\t' read -r name result; do
                case "$result" in ok) result=pass ;; FAILED) result=FAIL ;; esac
                if [ "$result" = FAIL ] && [[ "$retried" == *" $name "* ]]; then
                    result="FLAKY (failed, then passed alone)"
                fi
                printf '%s\t%s\t%s\n' "$engine" "$name" "$result"
            done >>"$results"
        say "$engine: $((SECONDS - start)) s (log: $log)"
    done
    printf '\n%-72s %s\n' "test" "${engines[*]}"
    cut -f2 "$results" | sort -u | while read -r name; do
        line=$(printf '%-72s' "$name")
        for engine in "${engines[@]}"; do
            line+=" $(awk -F'\t' -v e="$engine" -v n="$name" '$1 == e && $2 == n { print $3 }' "$results" | head -n 1)"
        done
        printf '%s\n' "$line"
    done
    rm -f "$results"
    return "$failed"
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

command=${1:-}
[ -n "$command" ] || usage
shift
case "$command" in
    up)
        lock
        [ $# -gt 0 ] || set -- "${all_engines[@]}"
        for engine in "$@"; do
            case "$engine" in podman|tcp|dood) "up_$engine" ;; *) die "unknown engine '$engine'" ;; esac
        done
        ;;
    down)
        lock
        for engine in "${all_engines[@]}"; do "down_$engine"; done
        if [ "${1:-}" = --purge ]; then
            for engine in "${all_engines[@]}"; do "purge_$engine"; done
            rm -rf "$state"
        fi
        ;;
    env) print_env "$@" ;;
    test) lock; run_matrix "$@" ;;
    dood-run) dood_run "$@" ;;
    image) lock; build_engine_image >&2; engine_image ;;
    seccomp) seccomp_profile ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac
