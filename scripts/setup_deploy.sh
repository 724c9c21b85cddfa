#!/usr/bin/env bash
# Sets up what the deployment tests (tests/deploy) need and does nothing else; a second run is a no-op in
# about a second. Needs the sandbox setup first (podman service, Debian base image).
#   tools:   podman-compose in its own small environment ($CUA_HOME/envs/deploy-<hash>, requirements/deploy.txt)
#   schema:  the Compose Specification's JSON schema, taken from the docker-compose 1.29.2 wheel on PyPI
#            (compose/config/compose_spec.json; checked by hash), cached in $CUA_HOME/deploy; not committed
#   image:   the CPU variant's runtime image (scripts/build_cpu_runtime_image.sh; cached by input hash)
#
#   scripts/setup_deploy.sh [tools] [schema] [image]     (no argument: all steps)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SCHEMA="$CUA_HOME/deploy/compose-spec.json"
SCHEMA_WHEEL="docker-compose==1.29.2"
SCHEMA_SHA256=0dc04bd346dcfee1b1419628fff79937bbf076925f298f272a2b490e2b112bac

step_tools() {
  local dir; dir="$(env_dir deploy)"
  if [ ! -f "$dir/.complete" ]; then
    log "deploy tools: building $dir"
    rm -rf "$dir"; mkdir -p "$(dirname "$dir")"
    "$PYTHON_BOOTSTRAP" -m venv "$dir"
    "$dir/bin/python" -m pip install --no-input --progress-bar off -q --no-deps -r "$REPO_ROOT/requirements/deploy.txt" >&2
    "$dir/bin/podman-compose" version >/dev/null || die "deploy tools: podman-compose does not run"
    touch "$dir/.complete"
    find "$(dirname "$dir")" -maxdepth 1 -name 'deploy-*' ! -path "$dir" -exec rm -rf {} +
  fi
  # Compose networks need name resolution between services (podman: netavark + aardvark-dns).
  local pkg
  for pkg in netavark aardvark-dns; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
      || die "Debian package $pkg is missing (compose networks need it): run scripts/setup.sh system"
  done
  log "deploy tools: present ($dir)"
}

step_schema() {
  if [ -f "$SCHEMA" ] && echo "$SCHEMA_SHA256  $SCHEMA" | sha256sum -c --quiet - 2>/dev/null; then
    log "compose schema: present ($SCHEMA)"; return
  fi
  local tmp; tmp=$(mktemp -d)
  log "compose schema: extracting compose/config/compose_spec.json from the $SCHEMA_WHEEL wheel"
  "$PYTHON_BOOTSTRAP" -m pip download --no-input --progress-bar off -q --no-deps --only-binary=:all: \
    "$SCHEMA_WHEEL" -d "$tmp" >&2
  mkdir -p "$(dirname "$SCHEMA")"
  "$PYTHON_BOOTSTRAP" - "$tmp" "$SCHEMA.part" <<'PY'
import glob, sys, zipfile
(wheel,) = glob.glob(f"{sys.argv[1]}/docker_compose-*.whl")
with zipfile.ZipFile(wheel) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("compose/config/compose_spec.json"))
PY
  rm -rf "$tmp"
  echo "$SCHEMA_SHA256  $SCHEMA.part" | sha256sum -c --quiet - || die "compose schema: unexpected content (hash mismatch)"
  mv "$SCHEMA.part" "$SCHEMA"
  log "compose schema: $SCHEMA"
}

step_image() { bash "$REPO_ROOT/scripts/build_cpu_runtime_image.sh"; }

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tools schema image)
for step in "${steps[@]}"; do
  case "$step" in
    tools|schema|image) "step_$step" ;;
    *) die "unknown step '$step' (expected: tools schema image)" ;;
  esac
done
