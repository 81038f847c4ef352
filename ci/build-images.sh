#!/bin/sh
# Builds, offline, the test images bork-ci's tests and CI use (bork-ci itself needs none: it
# builds the edit step's image from its own executable through the Engine API):
#   bork-ci-test/busybox:latest  FROM scratch + busybox-static, a non-root user, for checker tests
#   debian:bookworm-slim         debootstrap --variant=minbase, imported (rootfs tarball cached)
# Idempotent: an image that already exists is not rebuilt unless BORK_REBUILD_IMAGES=1.
# Usage: ci/build-images.sh [busybox|debian|all] (default: all)
set -eu

what=${1:-all}
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

build_debian() {
    image=debian:bookworm-slim
    if have_image "$image"; then say "$image present"; return 0; fi
    tarball="$cache/debian-bookworm-minbase.tar"
    if [ ! -s "$tarball" ]; then
        command -v debootstrap >/dev/null 2>&1 ||
            die "debootstrap is not installed (apt-get install debootstrap); cannot build $image"
        [ "$(id -u)" = 0 ] || die "debootstrap needs root to build $image"
        rootfs=$(mktemp -d)
        trap 'rm -rf "$rootfs"' EXIT
        say "debootstrap --variant=minbase bookworm (a few minutes, once; cached in $cache)"
        mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
        if ! debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" \
            >"$cache/debootstrap.log" 2>&1; then
            tail -n 20 "$cache/debootstrap.log" >&2
            die "debootstrap failed (log: $cache/debootstrap.log); cannot build $image"
        fi
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -cf "$tarball.partial" .
        mv "$tarball.partial" "$tarball"
        rm -rf "$rootfs"
        trap - EXIT
    fi
    say "importing $image from $tarball"
    docker import -c 'CMD ["bash"]' "$tarball" "$image" >/dev/null
}

case "$what" in
    busybox) build_busybox ;;
    debian) build_debian ;;
    all) build_busybox; build_debian ;;
    *) die "unknown image set '$what' (busybox|debian|all)" ;;
esac
