#!/bin/sh
# Builds, offline, the test images bork-ci's tests and CI use (bork-ci itself needs none: it
# builds the edit step's image from its own executable through the Engine API):
#   bork-ci-test/busybox:latest  FROM scratch + busybox-static, a non-root user, for checker tests
#   debian:bookworm-slim         debootstrap --variant=minbase, imported (rootfs tarball cached)
# and the toolchain images the real-toolchain examples run in (examples/, ci/examples.sh), built
# the same way with Debian's packages added by `debootstrap --include` (no registry is pulled):
#   bork-ci-example/rust:bookworm    ca-certificates, cargo-web (cargo and rustc 1.85), libc6-dev
#   bork-ci-example/python:bookworm  ca-certificates, python3, python3-pytest, python3-pip (init's setup)
#   bork-ci-example/tools:bookworm   ca-certificates, make, nodejs, golang-go, then npm by apt in
#                                    the new root (init's node, go and make checkers, onboarding.rs)
# Idempotent: an image that already exists is not rebuilt unless BORK_REBUILD_IMAGES=1; a rootfs
# tarball in the cache is reused (its name carries a digest of its package list), so a rebuild
# after `docker rmi` is an import of a few seconds. DEBIAN_MIRROR overrides the mirror.
# Measured on 2 cores (first build, mostly downloading / import of the cached tarball / image
# present): debian 45 s / 4 s / 0.1 s, rust 2 min (830 MB) / 7 s / 0.1 s, python 45 s / 5 s / 0.1 s.
# Usage: ci/build-images.sh [busybox|debian|rust|python|tools|all|examples]... (default: all)
#   all       busybox and debian (what the tests use)
#   examples  rust, python and tools (the examples also use debian)
set -eu

[ "$#" -gt 0 ] || set -- all
cache=${XDG_CACHE_HOME:-$HOME/.cache}/bork-ci
rebuild=${BORK_REBUILD_IMAGES:-0}

say() { printf 'build-images: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v docker >/dev/null 2>&1 || die "the docker CLI is not installed"
docker info >/dev/null 2>&1 || die "the Docker engine is not reachable (DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock})"

have_image() {
    [ "$rebuild" != 1 ] && docker image inspect "$1" >/dev/null 2>&1
}

# Serialise concurrent callers (parallel tests call this script once each).
mkdir -p "$cache"
lock="$cache/build-images.lock"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$lock"
    flock 9
fi

build_busybox() {
    image=bork-ci-test/busybox:latest
    if have_image "$image"; then say "$image present"; return 0; fi
    busybox=$(command -v busybox || true)
    [ -n "$busybox" ] || die "busybox-static is not installed (apt-get install busybox-static)"
    file -L "$busybox" 2>/dev/null | grep -q 'dynamically linked' &&
        die "$busybox is dynamically linked; install busybox-static"
    ctx=$(mktemp -d)
    trap 'rm -rf "$ctx"' EXIT
    mkdir -p "$ctx/rootfs/bin" "$ctx/rootfs/tmp" "$ctx/rootfs/etc" "$ctx/rootfs/repo" \
        "$ctx/rootfs/artifacts" "$ctx/rootfs/proc" "$ctx/rootfs/sys" "$ctx/rootfs/dev"
    chmod 1777 "$ctx/rootfs/tmp"
    cp "$busybox" "$ctx/rootfs/bin/busybox"
    for applet in $("$busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$ctx/rootfs/bin/$applet"
    done
    cat >"$ctx/rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
checker:x:1000:1000:checker:/tmp:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
    cat >"$ctx/rootfs/etc/group" <<'GROUP'
root:x:0:
checker:x:1000:
nogroup:x:65534:
GROUP
    cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
ENV PATH=/bin
USER 1000:1000
WORKDIR /repo
CMD ["sh"]
DOCKERFILE
    say "building $image"
    DOCKER_BUILDKIT=0 docker build -q -t "$image" "$ctx" >/dev/null
    rm -rf "$ctx"
    trap - EXIT
}

# Builds IMAGE from a `debootstrap --variant=minbase` rootfs of bookworm with the packages
# INCLUDE (comma-separated; their dependencies follow), cached as the tarball NAME in $cache;
# further arguments are `docker import --change` lines.
# The image is labelled bork-ci.rootfs=NAME: one imported from another tarball (an older package
# list) is rebuilt; one without the label (imported before it existed) is kept.
debootstrap_image() {
    image=$1 tarball=$cache/$2 include=$3
    shift 3
    if have_image "$image"; then
        from=$(docker image inspect -f '{{index .Config.Labels "bork-ci.rootfs"}}' "$image" 2>/dev/null || true)
        if [ -z "$from" ] || [ "$from" = "<no value>" ] || [ "$from" = "$(basename "$tarball")" ]; then
            say "$image present"
            return 0
        fi
        say "$image was built from $from; rebuilding from $(basename "$tarball")"
    fi
    log=${tarball%.tar}.log
    if [ ! -s "$tarball" ]; then
        command -v debootstrap >/dev/null 2>&1 ||
            die "debootstrap is not installed (apt-get install debootstrap); cannot build $image"
        [ "$(id -u)" = 0 ] || die "debootstrap needs root to build $image"
        rootfs=$(mktemp -d)
        trap 'rm -rf "$rootfs"' EXIT
        say "debootstrap --variant=minbase --include=$include bookworm (a few minutes, once; cached in $cache)"
        mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
        if ! debootstrap --variant=minbase --include="$include" bookworm "$rootfs" "$mirror" \
            >"$log" 2>&1; then
            # debootstrap's own log (dpkg's errors) is in the rootfs, removed on exit.
            cat "$rootfs/debootstrap/debootstrap.log" >>"$log" 2>/dev/null || true
            tail -n 20 "$log" >&2
            die "debootstrap failed (log: $log); cannot build $image"
        fi
        if [ -n "${apt_extra:-}" ]; then
            # Packages whose dependency graph debootstrap's resolver cannot order (npm's
            # node-* libraries): apt installs them in the new root.
            say "apt-get install $apt_extra (in the new root)"
            if ! chroot "$rootfs" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $apt_extra" \
                >>"$log" 2>&1; then
                tail -n 20 "$log" >&2
                die "apt-get install $apt_extra failed (log: $log); cannot build $image"
            fi
        fi
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -cf "$tarball.partial" .
        mv "$tarball.partial" "$tarball"
        rm -rf "$rootfs"
        trap - EXIT
    fi
    say "importing $image from $tarball"
    old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    set -- -c 'CMD ["bash"]' -c "LABEL bork-ci.rootfs=$(basename "$tarball")" "$@"
    docker import "$@" "$tarball" "$image" >/dev/null
    # The image it replaces would stay behind untagged; one still in use stays anyway.
    if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$image")" ]; then
        docker rmi "$old" >/dev/null 2>&1 || true
    fi
}

# The tarball name of a toolchain image: SET plus a digest of its package list, so that a changed
# list builds a new rootfs instead of reusing the old one.
tarball_name() {
    printf 'debian-bookworm-%s-%s.tar\n' "$1" "$(printf '%s' "$2" | sha256sum | cut -c1-12)"
}

build_debian() {
    # The name of its tarball predates the toolchain images; kept so existing caches stay valid.
    debootstrap_image debian:bookworm-slim debian-bookworm-minbase.tar ca-certificates
}

build_rust() {
    # cargo-web is Debian's current cargo (1.85 in bookworm, kept up to date there for Firefox;
    # it provides `cargo` and `rustc`), not bookworm's `cargo` 0.66 / rustc 1.63: that one only
    # knows crates.io's git index (a clone of hundreds of MB from github.com), while cargo-web
    # speaks the sparse protocol (index.crates.io, a few kB per crate) by default. It pulls
    # rustc-web, its standard library, binutils and gcc: with libc6-dev, all that `cargo test` of a
    # crate without C dependencies needs (libc6-dev is named because rustc depends on the virtual
    # `libc-dev`, which debootstrap does not resolve). CARGO_HOME is left unset: the sandbox
    # points it at its dependency cache.
    include=ca-certificates,cargo-web,libc6-dev
    debootstrap_image bork-ci-example/rust:bookworm "$(tarball_name rust "$include")" "$include" \
        -c 'ENV LANG=C.UTF-8'
}

build_python() {
    include=ca-certificates,python3,python3-pytest,python3-pip
    debootstrap_image bork-ci-example/python:bookworm "$(tarball_name python "$include")" "$include" \
        -c 'ENV LANG=C.UTF-8' -c 'ENV PYTHONDONTWRITEBYTECODE=1'
}

build_tools() {
    include=ca-certificates,make,nodejs,golang-go
    apt_extra=npm
    debootstrap_image bork-ci-example/tools:bookworm "$(tarball_name tools "$include+$apt_extra")" "$include" \
        -c 'ENV LANG=C.UTF-8' -c 'ENV PATH=/usr/lib/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
}

for what in "$@"; do
    case "$what" in
        busybox) build_busybox ;;
        debian) build_debian ;;
        rust) build_rust ;;
        python) build_python ;;
        tools) build_tools ;;
        all) build_busybox; build_debian ;;
        examples) build_rust; build_python; build_tools ;;
        *) die "unknown image set '$what' (busybox|debian|rust|python|tools|all|examples)" ;;
    esac
done
