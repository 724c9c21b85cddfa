#!/usr/bin/env bash
# Builds the sandbox image (sandbox/image/Dockerfile) without any registry:
#   mmdebstrap (Debian bookworm rootfs from the Debian mirror) -> podman import -> podman build.
# With CUA_CONTAINER_ENGINE=docker (GPU hosts, docker_train_areal.sh) it builds with Docker instead, FROM
# debian:bookworm of the host's registry (CUA_SANDBOX_BASE).
# Cached: the base is keyed by its recipe, the image by the hash of everything that goes into it
# (Dockerfile, requirements/sandbox.txt, the server code, the base, this script); an unchanged input set is
# a no-op in about a second. The image is tagged cua-sandbox:<hash> and cua-sandbox:latest.
# A flavour adds applications in a layer of its own over the same desktop: `office` (LibreOffice Calc,
# Writer and Impress) is cua-sandbox-office, built only for the tasks that name it (`office/...` rows).
#
#   scripts/build_sandbox_image.sh [--force] [--flavor desktop|office]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

force=0; flavor=desktop
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    --flavor) flavor="${2:-}"; shift ;;
    *) die "unknown argument '$1' (expected --force, --flavor desktop|office)" ;;
  esac
  shift
done
# The one list of each flavour's applications (Debian packages).
case "$flavor" in
  desktop) IMAGE="${CUA_SANDBOX_IMAGE:-cua-sandbox}"; APPS="" ;;
  office) IMAGE="${CUA_OFFICE_IMAGE:-cua-sandbox-office}"
          APPS="libreoffice-calc libreoffice-writer libreoffice-impress fonts-liberation2 wmctrl" ;;
  *) die "--flavor $flavor: expected desktop or office" ;;
esac
ENGINE="${CUA_CONTAINER_ENGINE:-podman}"
MIRROR="${CUA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_RECIPE="mmdebstrap --variant=apt --include=ca-certificates bookworm $MIRROR (recipe 1)"
CACHE="$CUA_HOME/sandbox"

case "$ENGINE" in
  podman)
    command -v podman >/dev/null || die "podman is not installed (apt-get install podman runc)"
    grep -qs 'runtime *= *"runc"' /etc/containers/containers.conf \
      || die "podman is not configured (runc runtime); run scripts/setup_sandbox.sh first" ;;
  docker) command -v docker >/dev/null || die "docker is not installed" ;;
  *) die "CUA_CONTAINER_ENGINE=$ENGINE: expected podman or docker" ;;
esac
image_exists() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }
mkdir -p "$CACHE"
# One build of a flavour at a time: two setups at once (a test session beside `make local`) would otherwise
# build side by side and the later tag of :latest would win whatever its inputs.
exec 9>"$CACHE/build-$flavor.lock"
flock 9

# 1. Base image: a Debian rootfs from the Debian mirror (no container registry involved); Docker hosts use
#    their registry's debian:bookworm.
if [ "$ENGINE" = docker ]; then
  base_image="${CUA_SANDBOX_BASE:-debian:bookworm}"
  base_key="$base_image"
else
  base_key=$(echo "$BASE_RECIPE" | sha256sum | cut -c1-12)
  base_image="localhost/cua-debian-base:$base_key"
fi
if [ "$ENGINE" = podman ] && ! podman image exists "$base_image"; then
  command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (apt-get install mmdebstrap)"
  log "base image: mmdebstrap bookworm (about 20-60 s)"
  tar="$CACHE/base-$base_key.tar"
  rm -f "$tar.part"
  mmdebstrap --quiet --format=tar --variant=apt --include=ca-certificates bookworm "$tar.part" "$MIRROR" >&2
  mv "$tar.part" "$tar"
  podman import --quiet "$tar" "$base_image" >/dev/null
  rm -f "$tar"
  log "base image: $base_image imported"
fi

# 2. Wheels for the server, downloaded through the host's pip configuration (the build has no PyPI access).
req="$REPO_ROOT/requirements/sandbox.txt"
wheels="$CACHE/wheels-$(sha256sum "$req" | cut -c1-12)"
if [ ! -f "$wheels/.complete" ]; then
  log "wheels: downloading the pins of requirements/sandbox.txt"
  rm -rf "$wheels"; mkdir -p "$wheels"
  # For the image's Python (Debian bookworm: CPython 3.11), whatever Python downloads them.
  py="$PYTHON_BOOTSTRAP"; command -v "$py" >/dev/null || py=python3
  "$py" -m pip download --no-input --progress-bar off --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 -r "$req" -d "$wheels" >&2
  touch "$wheels/.complete"
fi

# 3. The image, keyed by the hash of its inputs.
server_files=$(cd "$REPO_ROOT" && find sandbox/__init__.py sandbox/server -name '*.py' -type f | LC_ALL=C sort)
key=$( { cat "$REPO_ROOT/sandbox/image/Dockerfile" "$req" "${BASH_SOURCE[0]}";
         echo "$base_key $APPS"; for f in $server_files; do echo "$f"; cat "$REPO_ROOT/$f"; done; } \
       | sha256sum | cut -c1-12)
if [ "$force" -eq 0 ] && image_exists "$IMAGE:$key"; then
  "$ENGINE" tag "$IMAGE:$key" "$IMAGE:latest"
  log "image: $IMAGE:$key present (inputs unchanged)"
  exit 0
fi
if [ "$ENGINE" = podman ]; then  # the build runs apt in a container: fail here, naming the cause
  problem=$(podman_network_problem "$base_image")
  [ -z "$problem" ] || die "cannot build $IMAGE: $problem"
fi
ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
cp "$REPO_ROOT/sandbox/image/Dockerfile" "$ctx/"
mkdir -p "$ctx/wheels" "$ctx/sandbox"
cp "$wheels"/*.whl "$ctx/wheels/"
(cd "$REPO_ROOT" && for f in $server_files; do mkdir -p "$ctx/$(dirname "$f")"; cp "$f" "$ctx/$f"; done)
log "image: building $IMAGE:$key (first time: apt installs chromium ${APPS:+and $APPS }etc., a few minutes; then cached layers)"
start=$SECONDS
build_opts=(); [ "$ENGINE" = podman ] && build_opts=(--layers)  # Docker caches layers anyway
"$ENGINE" build "${build_opts[@]}" --build-arg "BASE=$base_image" --build-arg "APPS=$APPS" -t "$IMAGE:$key" -t "$IMAGE:latest" "$ctx" >&2
log "image: $IMAGE:$key built in $((SECONDS - start)) s ($("$ENGINE" image inspect "$IMAGE:$key" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}'))"
# Older builds: drop their tags (shared layers stay as build cache; an image in use is kept).
repo="$IMAGE"; [ "$ENGINE" = podman ] && repo="localhost/$IMAGE"
for old in $("$ENGINE" images --format '{{.Tag}}' "$repo" | grep -vx -e latest -e "$key"); do
  "$ENGINE" rmi "$IMAGE:$old" >/dev/null 2>&1 || true
done
