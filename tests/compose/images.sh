#!/bin/sh
# Local stand-ins for the images docker-compose.yml pulls, for machines where no image
# registry is reachable (as in this project's CI): a Debian base made with debootstrap from
# the apt mirror the host already uses, then Prometheus and Alertmanager from Debian's
# packages with the official images' entry points. Each image is made only if missing
# (`--force` remakes them). Prints the variables to hand to the compose:
#
#   eval "$(tests/compose/images.sh)"   # exports MIQM_PYTHON_IMAGE=... etc.
#   podman-compose up -d --build
#
# Needs root, podman, debootstrap. Progress goes to stderr, the variables to stdout.
set -eu
# every image is made with podman: without it, say so now (not after minutes of debootstrap)
command -v podman >/dev/null || {
    echo "images: podman is missing: install it (apt-get install podman runc; docs/deployment.md)" >&2
    exit 2
}
here="$(cd "$(dirname "$0")" && pwd)"
base="${MIQM_LOCAL_BASE:-localhost/debian-py:bookworm}"
prom="${MIQM_LOCAL_PROMETHEUS:-localhost/miqm-prometheus:debian}"
am="${MIQM_LOCAL_ALERTMANAGER:-localhost/miqm-alertmanager:debian}"
suite="${MIQM_LOCAL_SUITE:-bookworm}"
force=0
[ "${1:-}" = --force ] && force=1
say() { echo "images: $*" >&2; }
has() { [ "$force" = 0 ] && podman image exists "$1"; }

mirror="${MIQM_LOCAL_MIRROR:-}"
if [ -z "$mirror" ]; then
    # the mirror apt already uses (deb822 sources or a one-line sources.list)
    mirror="$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*debian\)[[:space:]]*$/\1/p' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)"
    [ -n "$mirror" ] || mirror="$(sed -n 's/^deb[[:space:]]\+\(http[^[:space:]]*debian\)[[:space:]].*/\1/p' \
        /etc/apt/sources.list 2>/dev/null | head -n1)"
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

if has "$base"; then
    say "$base: cached"
else
    command -v debootstrap >/dev/null || { say "debootstrap is missing: apt-get install debootstrap"; exit 2; }
    root="$(mktemp -d /var/tmp/miqm-base.XXXXXX)"
    trap 'rm -rf "$root"' EXIT
    t0=$(date +%s)
    say "debootstrap $suite from $mirror (about a minute)"
    debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
        "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -n 20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
    rm -f "$root.log"
    # like python:3.x-slim: pip may install into the system Python; no package lists
    rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
    say "podman import $base"
    tar -C "$root" -c . | podman import -q - "$base" >/dev/null
    rm -rf "$root"; trap - EXIT
    say "$base made in $(( $(date +%s) - t0 )) s"
fi

build() {  # image dockerfile
    if has "$1"; then say "$1: cached"; return; fi
    t0=$(date +%s)
    say "building $1"
    podman build -q --build-arg "BASE=$base" -t "$1" -f "$here/$2" "$here" >/dev/null
    say "$1 built in $(( $(date +%s) - t0 )) s"
}
build "$prom" prometheus.Dockerfile
build "$am" alertmanager.Dockerfile

echo "export MIQM_PYTHON_IMAGE=$base MIQM_DEBIAN_IMAGE=$base"
echo "export MIQM_PROMETHEUS_IMAGE=$prom MIQM_ALERTMANAGER_IMAGE=$am"
