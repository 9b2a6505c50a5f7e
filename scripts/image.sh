#!/usr/bin/env bash
# Build the jobrules OCI image without a container daemon, from Debian's packages only:
#   pip (the wheels) -> mmdebstrap (a Debian bookworm root filesystem with Debian's python3 and a
#   venv of those wheels) -> umoci (an OCI image layout).
#
#   bash scripts/image.sh                 # the image: dist/image, tag jobrules-VERSION
#   bash scripts/image.sh wheels          # only dist/wheels (what the Containerfile installs)
#   bash scripts/image.sh containerfile   # also build ./Containerfile with buildah against a
#                                         # locally made bookworm base: dist/containerfile-image
#
# Runs as root (mmdebstrap and umoci write files owned by other users); installs mmdebstrap, umoci
# and skopeo (and buildah for `containerfile`) with apt-get when they are missing. The last lines
# name the image(s) built, as transport:path:tag references skopeo and buildah take.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-image}
case $what in
    wheels|image|containerfile) ;;
    *) echo "usage: bash scripts/image.sh [wheels|image|containerfile]" >&2; exit 2 ;;
esac

version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
tag=jobrules-$version
arch=$(dpkg --print-architecture)
declare -A machine=([amd64]=x86_64 [arm64]=aarch64)
[[ -n ${machine[$arch]:-} ]] || { echo "image.sh: no wheels for architecture $arch" >&2; exit 2; }
# The three suites a bookworm image is kept current from.
sources=("deb http://deb.debian.org/debian bookworm main"
         "deb http://deb.debian.org/debian bookworm-updates main"
         "deb http://deb.debian.org/debian-security bookworm-security main")
# Layers and files dated by the last commit, not by the clock.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH
scratch=$(mktemp -d "${TMPDIR:-/tmp}/jobrules-image.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
say() { printf 'image.sh: %s\n' "$*" >&2; }

apt_install() {   # apt_install PACKAGE...: as root
    if (( EUID != 0 )); then
        say "missing: install it with 'sudo apt-get install $*'"; exit 2
    fi
    say "installing $* with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
need() { command -v "$1" >/dev/null || apt_install "$1"; }   # need COMMAND (its package has its name)

# jobrules as a wheel, and every dependency (the certs extra too: the controller's self-managed
# certificates) as a wheel for bookworm's CPython 3.11 on this architecture, whatever Python runs
# this script.
wheels() {
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    say "wheels into dist/wheels"
    rm -rf dist/wheels build/lib
    python3 -m pip wheel -q --no-deps -w dist/wheels .
    # pip matches platform tags exactly: name every manylinux level glibc 2.36 runs, newest first.
    local platforms=() minor
    for minor in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${minor}_${machine[$arch]}"); done
    platforms+=(--platform "manylinux2014_${machine[$arch]}")
    python3 -m pip download -q -d dist/wheels --only-binary=:all: --implementation cp \
        --python-version 3.11 --abi cp311 --abi abi3 --abi none "${platforms[@]}" \
        "$(echo dist/wheels/jobrules-"$version"-*.whl)[certs]"
}

# A bookworm root filesystem as a tar, without documentation, man pages or locales, and with an
# empty /dev for the container runtime to fill (no device nodes: rootless runtimes cannot make them).
rootfs() {   # rootfs VARIANT OUTPUT [mmdebstrap options...]
    local variant=$1 output=$2; shift 2
    mmdebstrap --quiet --variant="$variant" --skip=output/dev \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        "$@" bookworm "$output" "${sources[@]}" </dev/null
    mkdir -p "$scratch/empty/dev"
    tar --append -f "$output" -C "$scratch/empty" --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" ./dev
}

# The OCI layout DIR holding the root filesystem tar ROOTFS as one layer, tagged $tag.
layout() {   # layout DIR ROOTFS [umoci config options...]
    local dir=$1 rootfs=$2; shift 2
    rm -rf "$dir"
    umoci init --layout "$dir"
    umoci new --image "$dir:$tag"
    umoci raw add-layer --image "$dir:$tag" --history.created_by "mmdebstrap (scripts/image.sh)" "$rootfs"
    umoci config --image "$dir:$tag" --architecture "$arch" --os linux "$@"
    umoci gc --layout "$dir"
}

image() {
    local started=$SECONDS
    (( EUID == 0 )) || { say "building the image needs root (mmdebstrap, umoci): run it with sudo"; exit 2; }
    need mmdebstrap
    need umoci
    need skopeo
    say "root filesystem (Debian bookworm, python3, the wheels in a venv at /opt/jobrules)"
    # libstdc++6: greenlet's C extension (the webhook's gevent worker) links it.
    rootfs essential "$scratch/rootfs.tar" --include=python3,python3-venv,libstdc++6 \
        --customize-hook='copy-in dist/wheels /tmp' \
        --customize-hook='chroot "$1" python3 -m venv /opt/jobrules' \
        --customize-hook='chroot "$1" /opt/jobrules/bin/pip install -q --isolated --no-cache-dir --no-index --find-links /tmp/wheels "jobrules[certs]"' \
        --customize-hook='chroot "$1" /opt/jobrules/bin/pip uninstall -q --isolated -y pip setuptools' \
        --customize-hook='chroot "$1" dpkg --purge python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl >/dev/null' \
        --customize-hook='rm -rf "$1"/tmp/wheels "$1"/var/cache/apt/*.bin' \
        --customize-hook='echo "jobrules:x:65532:65532::/nonexistent:/usr/sbin/nologin" >> "$1"/etc/passwd' \
        --customize-hook='echo "jobrules:x:65532:" >> "$1"/etc/group'
    say "OCI layout dist/image"
    layout dist/image "$scratch/rootfs.tar" \
        --config.user 65532:65532 --config.workingdir / \
        --config.env PATH=/opt/jobrules/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.env PYTHONUNBUFFERED=1 \
        --config.entrypoint /opt/jobrules/bin/gunicorn \
        --config.cmd -c --config.cmd python:runtime.webhook.gunicorn_conf \
        --config.exposedports 8443/tcp --config.exposedports 9090/tcp \
        --config.label org.opencontainers.image.title=jobrules \
        --config.label org.opencontainers.image.version="$version"
    skopeo inspect --config "oci:dist/image:$tag" >/dev/null   # readable by the usual tools
    say "built in $((SECONDS - started)) s: $(du -sh dist/image | cut -f1) as an OCI layout"
}

# The Containerfile built by buildah (no daemon: chroot isolation, vfs storage) FROM a bookworm
# base made here like Debian's slim images, so the file users build is built and run here too.
containerfile() {
    local started=$SECONDS
    need buildah
    say "bookworm base (minbase, as debian:bookworm-slim)"
    rootfs minbase "$scratch/base.tar"
    layout "$scratch/base" "$scratch/base.tar"
    say "buildah bud -f Containerfile"
    local storage=("--storage-driver=vfs" "--root=$scratch/storage" "--runroot=$scratch/run")
    skopeo copy --quiet "oci:$scratch/base:$tag" \
        "containers-storage:[vfs@$scratch/storage+$scratch/run]localhost/jobrules-base:bookworm"
    buildah "${storage[@]}" bud --quiet --isolation chroot --pull=never \
        --build-arg BASE=localhost/jobrules-base:bookworm -f Containerfile -t "localhost/jobrules:$version" . >&2
    rm -rf dist/containerfile-image
    buildah "${storage[@]}" push --quiet "localhost/jobrules:$version" "oci:dist/containerfile-image:$tag" >&2
    say "built in $((SECONDS - started)) s: $(du -sh dist/containerfile-image | cut -f1) as an OCI layout"
}

wheels
[[ $what == wheels ]] && { echo "dist/wheels"; exit 0; }
image
[[ $what == containerfile ]] && containerfile
echo "oci:dist/image:$tag"
[[ $what == containerfile ]] && echo "oci:dist/containerfile-image:$tag"
exit 0
