#!/usr/bin/env bash
# Sets up everything the sandbox layer needs and does nothing else; a second run is a no-op in seconds.
#   scripts/setup_sandbox.sh [packages] [podman] [service] [network] [image] [office_image] [repo_image] [venv]
#                            [osworld_ref]
#   (none: all but office_image)
# packages: the Debian packages (scripts/setup.sh system: the one list)
# podman:   /etc/containers/containers.conf (runc; nproc ulimit <= 32768; docs/architecture.md, Containers);
#           subordinate ids of the user "containers" in /etc/subuid, /etc/subgid (repository boxes' userns);
#           the kernel key quota of the boxes' shared host id (/etc/sysctl.d/60-cua-keys.conf)
# service:  the podman Docker-API service on $CUA_PODMAN_SOCKET (default /run/cua/podman.sock)
# network:  podman can give a container a network (the image build needs one); names what is missing
# image:    the sandbox image (scripts/build_sandbox_image.sh; cached by input hash)
# office_image: the office flavour, with LibreOffice (office/... task rows; not in the default steps: the
#           test suite and a run or evaluation of such rows ask for it)
# repo_image: the sample repository tasks' image (scripts/build_repo_samples_image.sh; cached likewise)
# venv:     the host venv of the in-box server for the local backend ($CUA_HOME/envs/sandbox-<hash>)
# osworld_ref: test-only venv with OSWorld's published evaluator beside the server's pins
#           ($CUA_HOME/envs/osworld-ref-<hash>; requirements/osworld-reference.txt): the reference the
#           OSWorld metric tests compare against
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PODMAN_SOCKET="${CUA_PODMAN_SOCKET:-/run/cua/podman.sock}"
CONF=/etc/containers/containers.conf
CONF_MARK="# written by cua-areal scripts/setup_sandbox.sh"

step_packages() { bash "$REPO_ROOT/scripts/setup.sh" system; }

# Repository boxes run in a user namespace (sandbox/backends/libpod.py): root in the box is an
# unprivileged id on the host, the first of the subordinate ids of the user "containers".
SUBIDS="containers:2147483647:2147483648"
# Every running repository box holds one kernel key (its session keyring) of that host id's quota: at the
# kernel's default of 200 keys per non-root user, the 198th box running at once failed to start
# (bench/box_churn.py --hold 250). 20000 keys of at most 100 bytes each.
KEYS_MAX=20000
KEYS_CONF=/etc/sysctl.d/60-cua-keys.conf

step_podman() {
  for f in /etc/subuid /etc/subgid; do
    if grep -qs '^containers:' "$f"; then continue; fi
    log "podman: subordinate ids for user namespaces ($SUBIDS) in $f"
    echo "$SUBIDS" >> "$f"
  done
  if [ "$(sysctl -n kernel.keys.maxkeys 2>/dev/null || echo 0)" -lt "$KEYS_MAX" ]; then
    log "podman: kernel key quota per user $KEYS_MAX keys ($KEYS_CONF)"
    mkdir -p "$(dirname "$KEYS_CONF")"
    printf 'kernel.keys.maxkeys = %s\nkernel.keys.maxbytes = %s\n' "$KEYS_MAX" "$((KEYS_MAX * 100))" > "$KEYS_CONF"
    sysctl -q -p "$KEYS_CONF" || log "warning: kernel.keys.maxkeys not raised: at most ~197 repository boxes run at once"
  fi
  if grep -qs 'runtime *= *"runc"' "$CONF"; then log "podman config: present"; return; fi
  if [ -s "$CONF" ] && ! grep -qs "$CONF_MARK" "$CONF"; then
    die "$CONF exists without runtime=\"runc\"; add [engine] runtime = \"runc\" and nproc<=32768 ulimits (docs/architecture.md, Containers)"
  fi
  log "podman config: writing $CONF"
  mkdir -p "$(dirname "$CONF")"
  # crun fails on this cgroup layout; containers need an nproc ulimit the host allows.
  cat > "$CONF" <<CONFEOF
$CONF_MARK
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
CONFEOF
}

ping_service() { curl -s --max-time 2 --unix-socket "$PODMAN_SOCKET" http://d/_ping 2>/dev/null | grep -q OK; }

step_service() {
  if ping_service; then log "podman service: running on $PODMAN_SOCKET"; return; fi
  mkdir -p "$(dirname "$PODMAN_SOCKET")" "$CUA_HOME/sandbox"
  rm -f "$PODMAN_SOCKET"
  log "podman service: starting on $PODMAN_SOCKET (log: $CUA_HOME/sandbox/podman-service.log)"
  # Detached from this shell (setsid, no stdin) so it survives setup; --time=0: never exits on idle.
  # Started in its own state dir: conmon inherits the cwd and drops an "oom" marker file there when a box
  # is OOM-killed (it used to land in the checkout).
  (cd "$CUA_HOME/sandbox" && exec setsid nohup podman system service --time=0 "unix://$PODMAN_SOCKET" \
    >"$CUA_HOME/sandbox/podman-service.log" 2>&1 </dev/null) &
  for _ in $(seq 100); do ping_service && { log "podman service: ready"; return; }; sleep 0.1; done
  die "podman service did not answer on $PODMAN_SOCKET; see $CUA_HOME/sandbox/podman-service.log"
}

step_network() {
  local problem
  problem=$(podman_network_problem)
  [ -z "$problem" ] || die "container network: $problem"
  log "container network: $(podman info --format '{{.Host.NetworkBackend}}') ready"
}

step_image() { bash "$REPO_ROOT/scripts/build_sandbox_image.sh"; }

step_office_image() { bash "$REPO_ROOT/scripts/build_sandbox_image.sh" --flavor office; }

step_repo_image() { bash "$REPO_ROOT/scripts/build_repo_samples_image.sh"; }

step_venv() {
  local dir; dir="$(env_dir sandbox)"
  if [ ! -f "$dir/.complete" ]; then
    log "sandbox venv: building $dir"
    rm -rf "$dir"; mkdir -p "$(dirname "$dir")"
    "$PYTHON_BOOTSTRAP" -m venv "$dir"
    "$dir/bin/python" -m pip install --no-input --progress-bar off -q --no-deps -r "$REPO_ROOT/requirements/sandbox.txt" >&2
    "$dir/bin/python" -c 'import selenium, mss, PIL, importlib.util as u; assert u.find_spec("miniwob")'
    touch "$dir/.complete"
  fi
  # The local backend finds the server's interpreter through this pointer (rewritten on every run).
  mkdir -p "$CUA_HOME/sandbox"
  echo "$dir/bin/python" > "$CUA_HOME/sandbox/host-python"
  log "sandbox venv: present ($dir)"
}

step_osworld_ref() {
  local key dir
  key=$( { cat "$REPO_ROOT/requirements/sandbox.txt" "$REPO_ROOT/requirements/osworld-reference.txt";
           echo "recipe=$ENV_RECIPE_VERSION"; "$PYTHON_BOOTSTRAP" -c 'import sys; print(sys.version_info[:2])'; } \
         | sha256sum | cut -c1-12)
  dir="$CUA_HOME/envs/osworld-ref-$key"
  if [ ! -f "$dir/.complete" ]; then
    log "OSWorld reference venv: building $dir"
    rm -rf "$dir"; mkdir -p "$(dirname "$dir")"
    "$PYTHON_BOOTSTRAP" -m venv "$dir"
    "$dir/bin/python" -m pip install --no-input --progress-bar off -q --no-deps \
      -r "$REPO_ROOT/requirements/sandbox.txt" -r "$REPO_ROOT/requirements/osworld-reference.txt" >&2
    "$dir/bin/python" -c 'import pptx, docx, importlib.util as u; assert u.find_spec("desktop_env")'
    touch "$dir/.complete"
    find "$(dirname "$dir")" -maxdepth 1 -name 'osworld-ref-*' ! -path "$dir" -exec rm -rf {} +
  fi
  # The reference tests find the interpreter through this pointer (rewritten on every run).
  mkdir -p "$CUA_HOME/sandbox"
  echo "$dir/bin/python" > "$CUA_HOME/sandbox/osworld-ref-python"
  log "OSWorld reference venv: present ($dir)"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(packages podman service network image repo_image venv osworld_ref)
start=$SECONDS
for step in "${steps[@]}"; do
  case "$step" in
    packages|podman|service|network|image|office_image|repo_image|venv|osworld_ref) "step_$step" ;;
    *) die "unknown step '$step' (expected: packages podman service network image office_image repo_image venv osworld_ref)" ;;
  esac
done
log "sandbox setup done in $((SECONDS - start)) s"
