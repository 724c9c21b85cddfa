#!/usr/bin/env bash
# Builds the runtime image of the stack's CPU variant (deploy/cpu.Dockerfile) with podman, without any
# registry: FROM the Debian rootfs that scripts/build_sandbox_image.sh imports. Cached by the hash of its
# inputs; an unchanged input set is a no-op in about a second. Tagged cua-cpu-runtime:<hash> and :latest.
#
#   scripts/build_cpu_runtime_image.sh [--force]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

IMAGE="${CUA_CPU_RUNTIME_IMAGE:-cua-cpu-runtime}"
force=0; [ "${1:-}" = "--force" ] && force=1
command -v podman >/dev/null || die "podman is not installed (run scripts/setup.sh system)"
# The base is the sandbox image's Debian rootfs (newest first: build_sandbox_image.sh builds it when missing).
base="$(podman images --format '{{.Repository}}:{{.Tag}}' localhost/cua-debian-base | head -n1)"
[ -n "$base" ] || die "no localhost/cua-debian-base image: run scripts/build_sandbox_image.sh first"

dockerfile="$REPO_ROOT/deploy/cpu.Dockerfile"
key=$( { cat "$dockerfile" "${BASH_SOURCE[0]}"; podman image inspect --format '{{.Id}}' "$base"; } \
       | sha256sum | cut -c1-12)
if [ "$force" -eq 0 ] && podman image exists "$IMAGE:$key"; then
  podman tag "$IMAGE:$key" "$IMAGE:latest"
  log "image: $IMAGE:$key present (inputs unchanged)"
  exit 0
fi
ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
cp "$dockerfile" "$ctx/Dockerfile"
log "image: building $IMAGE:$key from $base (first time: apt, about a minute)"
start=$SECONDS
podman build --layers --build-arg "BASE=$base" -t "$IMAGE:$key" -t "$IMAGE:latest" "$ctx" >&2
log "image: $IMAGE:$key built in $((SECONDS - start)) s"
for old in $(podman images --format '{{.Tag}}' "localhost/$IMAGE" | grep -vx -e latest -e "$key"); do
  podman rmi "$IMAGE:$old" >/dev/null 2>&1 || true
done
