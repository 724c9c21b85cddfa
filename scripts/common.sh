# Shared paths for the shell scripts. Source it; it defines functions and variables only.
# The two Python environments live in a cache keyed by the hash of their pinned requirements, so every
# checkout (and CI's fresh clone) on a machine shares them, and a change of pins builds a new one.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CUA_HOME="${CUA_HOME:-$HOME/.cache/cua-areal}"
PYTHON_BOOTSTRAP="${PYTHON_BOOTSTRAP:-python3.11}"
# Bump when the way an environment is built changes (not its pins: those are hashed already).
ENV_RECIPE_VERSION=1

log() { printf '[%s %s] %s\n' "$(basename "$0")" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# with_default_signals "$@": at the top of an entry script that stops its own children on Ctrl-C or SIGTERM.
# A shell without job control (a script's `cmd &`, some CI and tool runners) starts commands with SIGINT
# ignored, and a non-interactive bash can neither trap nor reset a signal ignored at its start: its
# `trap ... INT` is a no-op and a Ctrl-C sent to its process group passes it by. The script starts again
# with both signals at their defaults, so its own traps hold.
with_default_signals() {
  [ -n "$(trap -p INT)$(trap -p TERM)" ] || return 0  # nothing is trapped yet: non-empty means ignored
  if env --default-signal=INT true 2>/dev/null; then
    exec env --default-signal=INT,TERM bash "$0" "$@"
  fi
  log "WARNING: started with SIGINT or SIGTERM ignored, and this env(1) cannot reset them: Ctrl-C may not stop this script"
}

# env_dir NAME -> path of the environment built from requirements/NAME.txt
env_dir() {
  local name="$1" key
  key=$( { cat "$REPO_ROOT/requirements/$name.txt"; echo "recipe=$ENV_RECIPE_VERSION";
           "$PYTHON_BOOTSTRAP" -c 'import sys; print(sys.version_info[:2])'; } | sha256sum | cut -c1-12)
  echo "$CUA_HOME/envs/$name-$key"
}

trainer_python() { echo "$(env_dir trainer)/bin/python"; }
vllm_python() { echo "$(env_dir vllm)/bin/python"; }

# podman_network_problem [IMAGE]: prints what keeps podman from giving a container a network (the image build
# runs apt in one), or nothing when it works. Without IMAGE only the static check runs (no container).
podman_network_problem() {
  local image="${1:-}" backend err
  backend=$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null) || { echo "podman info failed"; return; }
  # netavark sets up container networks with the iptables it finds on PATH; Debian's podman does not
  # depend on iptables, and without it every network fails with "netavark: No such file or directory".
  if [ "$backend" = netavark ] && ! command -v iptables >/dev/null; then
    echo "podman's network backend (netavark) needs iptables, which is not installed (scripts/setup.sh system installs it)"
    return
  fi
  [ -n "$image" ] || return 0
  if ! err=$(podman run --rm --network=bridge --entrypoint true "$image" 2>&1); then
    echo "a container with a bridge network does not start (network backend: $backend): $(echo "$err" | tail -3 | tr '\n' ' ')"
  fi
}

# debian_base_image -> the newest locally imported Debian rootfs (scripts/build_sandbox_image.sh makes it)
debian_base_image() {
  local base
  base="$(podman images --format '{{.Repository}}:{{.Tag}}' localhost/cua-debian-base | head -n1)"
  [ -n "$base" ] || die "no localhost/cua-debian-base image: run scripts/build_sandbox_image.sh first"
  echo "$base"
}

# podman_build_cached IMAGE CONTEXT BASE [--force]: builds CONTEXT/Dockerfile FROM BASE as IMAGE:<key> and
# IMAGE:latest, the key being the hash of the context, the caller script and BASE's id; an unchanged input
# set is a no-op in about a second. Older tags of IMAGE are dropped.
podman_build_cached() {
  local image="$1" ctx="$2" base="$3" force="${4:-}" key start old
  key=$( { (cd "$ctx" && find . -type f | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done);
           cat "$0"; podman image inspect --format '{{.Id}}' "$base"; } | sha256sum | cut -c1-12)
  if [ "$force" != --force ] && podman image exists "$image:$key"; then
    podman tag "$image:$key" "$image:latest"
    log "image: $image:$key present (inputs unchanged)"
    return
  fi
  log "image: building $image:$key from $base"
  start=$SECONDS
  podman build --layers --build-arg "BASE=$base" -t "$image:$key" -t "$image:latest" "$ctx" >&2
  log "image: $image:$key built in $((SECONDS - start)) s"
  for old in $(podman images --format '{{.Tag}}' "localhost/$image" | grep -vx -e latest -e "$key"); do
    podman rmi "$image:$old" >/dev/null 2>&1 || true
  done
}
