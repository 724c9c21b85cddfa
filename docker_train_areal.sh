#!/usr/bin/env bash
# GPU deployment on one node: vLLM (tensor-parallel 4, GPUs 0-3) and AReaL's FSDP trainer (GPUs 4-7) through
# Docker Compose (docker-compose.areal.yml); the trainer starts the sandboxes as sibling containers. See
# --help and docs/gpu-deployment.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---- settings: environment first, then the env file (as compose and cua_agent/settings.py do) ---------------
ENV_FILE="$(realpath -m "${CUA_ENV_FILE:-$here/.env}")"
env_keys() { sed -nE 's/^[[:space:]]*(export[[:space:]]+)?([A-Za-z_][A-Za-z0-9_]*)=.*/\2/p' "$1"; }
if [ -f "$ENV_FILE" ]; then
  while IFS= read -r line; do
    [[ "$line" =~ ^[[:space:]]*(export[[:space:]]+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] || continue
    key="${BASH_REMATCH[2]}" value="${BASH_REMATCH[3]}"
    value="${value%\"}" value="${value#\"}" value="${value%\'}" value="${value#\'}"
    # Empty means default (compose's ${VAR:-default} treats it so too); the environment wins.
    [ -n "$value" ] && [ -z "${!key:-}" ] && export "$key=$value"
  done < "$ENV_FILE"
fi
source "$here/scripts/common.sh"  # after .env: it reads CUA_HOME
with_default_signals "$@"  # Ctrl-C and SIGTERM stop the stack however the script was started
cd "$REPO_ROOT"

usage() {
  cat <<'EOF'
Usage: ./docker_train_areal.sh [options] [key=value ...]

Trains the computer-use agent on one GPU node with Docker Compose (docker-compose.areal.yml): vLLM
tensor-parallel on GPUs 0-3, AReaL's FSDP trainer on GPUs 4-7, sandboxes started by the trainer through the
Docker socket. Steps: preflight checks, image builds, start vLLM and wait until it is healthy, start the
trainer and follow its log. On exit, Ctrl-C or SIGTERM: stop the services and remove the run's leftover
sandboxes (a second Ctrl-C does not cut the stop short). The exit status is the trainer's.

Options:
  --config PATH                  training config in this repository (default: configs/cua_grpo.yaml)
  --compose FILE                 compose file; repeat to add override files (default: docker-compose.areal.yml)
  --resume                       continue the trial from its last recover checkpoint
  --resume_from_checkpoint PATH  continue from PATH, a checkpoint under the outputs directory
  --no-build                     use the existing images instead of building them
  --cpu                          the stack's CPU variant on podman (deploy/compose.cpu.yml): tiny model, vLLM
                                 CPU, FSDP on CPU, the host environments of `make setup`; default config
                                 configs/local_cpu.yaml. Tries the deployment path without GPUs.
  --check                        run the preflight checks and the resource estimate only
  -h, --help                     show this help
  key=value                      config overrides, passed on to train_areal.py

Settings come from the environment, else from .env (copy env.example; every key of env.example must be
present, empty means default): GPU ids (VLLM_GPU0-3, TRAINER_GPU0-3), VLLM_TP_SIZE, TRAINER_NPROC, CUA_MODEL,
VLLM_HOST_PORT, CUA_OUTPUT_DIR, CUA_RUN_HOME, VLLM_HEALTH_TIMEOUT, CUA_MIN_FREE_GB, ... Also:
  CUA_ENV_FILE          the env file (default: .env in this repository)
  COMPOSE               the compose command (default: docker compose, docker-compose; --cpu: podman-compose)
  COMPOSE_PROJECT_NAME  the compose project (default: cua-areal)

Examples:
  ./docker_train_areal.sh                                   # configs/cua_grpo.yaml on 8 GPUs
  ./docker_train_areal.sh --resume                          # after a stop or a crash: continue the trial
  ./docker_train_areal.sh --config configs/my.yaml total_train_steps=200 agent.group_size=16
EOF
}

# ---- arguments ---------------------------------------------------------------------------------------------
config="" cpu=0 build=1 check_only=0
compose_files=() train_args=() overrides=() resume_path=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --config) [ $# -ge 2 ] || die "--config needs a path"; config="$2"; shift ;;
    --compose) [ $# -ge 2 ] || die "--compose needs a file"; compose_files+=("$2"); shift ;;
    --resume) train_args+=(--resume) ;;
    --resume_from_checkpoint) [ $# -ge 2 ] || die "--resume_from_checkpoint needs a path"; resume_path="$2"; shift ;;
    --no-build) build=0 ;;
    --cpu) cpu=1 ;;
    --check) check_only=1 ;;
    *=*) overrides+=("$1") ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

# ---- what this run uses ------------------------------------------------------------------------------------
PROJECT="${COMPOSE_PROJECT_NAME:-cua-areal}"
OUTPUT_DIR="$(realpath -m "${CUA_OUTPUT_DIR:-$REPO_ROOT/outputs}")"
RUN_HOME="$(realpath -m "${CUA_RUN_HOME:-/tmp/cua-areal}")"
if [ "$cpu" -eq 1 ]; then
  CLI=podman
  [ ${#compose_files[@]} -gt 0 ] || compose_files=(docker-compose.areal.yml deploy/compose.cpu.yml)
  config="${config:-configs/local_cpu.yaml}"
  SOCKET="${DOCKER_SOCKET:-${CUA_PODMAN_SOCKET:-/run/cua/podman.sock}}"
  MIN_FREE_GB="${CUA_MIN_FREE_GB:-5}"
  # The CPU variant always trains the tiny model's warm start (configs/local_cpu.yaml's model) with one
  # process, whatever .env says for the GPU stack.
  export CUA_MODEL="$CUA_HOME/models/tiny-qwen2.5-vl-warm" TRAINER_NPROC=1
  export CUA_CPU_IMAGE=localhost/cua-cpu-runtime:latest CUA_HOST_HOME="$CUA_HOME" CUA_TRAINER_ENV="$(env_dir trainer)"
else
  CLI=docker
  [ ${#compose_files[@]} -gt 0 ] || compose_files=(docker-compose.areal.yml)
  config="${config:-configs/cua_grpo.yaml}"
  SOCKET="${DOCKER_SOCKET:-/var/run/docker.sock}"
  MIN_FREE_GB="${CUA_MIN_FREE_GB:-100}"
fi
TP="${VLLM_TP_SIZE:-4}" NPROC="${TRAINER_NPROC:-4}" PORT="${VLLM_HOST_PORT:-8000}"
VLLM_IDS=("${VLLM_GPU0:-0}" "${VLLM_GPU1:-1}" "${VLLM_GPU2:-2}" "${VLLM_GPU3:-3}")
TRAINER_IDS=("${TRAINER_GPU0:-4}" "${TRAINER_GPU1:-5}" "${TRAINER_GPU2:-6}" "${TRAINER_GPU3:-7}")

# yaml_value FILE SECTION KEY: a `key: value` of a top-level section of a config (enough for the two keys the
# preflight reads; `section.key=value` overrides win).
yaml_value() {
  local o
  for o in "${overrides[@]}"; do [[ "$o" == "$2.$3="* ]] && { echo "${o#*=}"; return; }; done
  awk -v s="$2" -v k="$3" '
    /^[^[:space:]#][^:]*:/ { section = $1; sub(/:.*/, "", section) }
    section == s && $0 ~ "^[[:space:]]+" k ":" { v = $0; sub(/^[^:]*:[[:space:]]*/, "", v); sub(/[[:space:]]+#.*/, "", v); print v; exit }
  ' "$1"
}

# How long the trainer container gets to stop after SIGTERM: the ranks' own deadline from the signal
# (checkpoint.stop_timeout_s: the step's update, its checkpoint, the exit), then torchrun's margin after it
# (LAUNCHER_MARGIN_S, cua_agent/train/cli.py), then the container's own exit.
trainer_stop_s() {
  local t; t="$(yaml_value "$config" checkpoint stop_timeout_s)"; t="${t%%.*}"
  echo $(( ${t:-60} + 90 ))
}

# ---- preflight: every problem is listed, each with what to do ------------------------------------------------
problems=()
problem() { problems+=("$*"); }

preflight_gpus() {
  if ! command -v nvidia-smi >/dev/null; then
    problem "nvidia-smi not found on PATH: install the NVIDIA driver on this host (to try the stack without GPUs: --cpu)"
    return
  fi
  local listing n id seen=" " all=("${VLLM_IDS[@]}" "${TRAINER_IDS[@]}")
  if ! listing="$(nvidia-smi -L 2>&1)"; then
    problem "nvidia-smi failed: ${listing%%$'\n'*} (is the NVIDIA driver loaded?)"
    return
  fi
  n=$(grep -c '^GPU [0-9]' <<<"$listing" || true)
  for id in "${all[@]}"; do
    [[ "$seen" == *" $id "* ]] && problem "GPU $id is assigned twice (VLLM_GPU0-3, TRAINER_GPU0-3): vLLM and the trainer each need their own GPUs"
    seen+="$id "
    if [[ "$id" =~ ^[0-9]+$ ]]; then
      (( id < n )) || problem "GPU $id is assigned (VLLM_GPU0-3, TRAINER_GPU0-3) but nvidia-smi lists $n GPU(s); this stack needs 8 (set the GPU ids in .env)"
    elif ! grep -qF "$id" <<<"$listing"; then
      problem "GPU '$id' (VLLM_GPU0-3, TRAINER_GPU0-3) is neither an index nor a UUID that nvidia-smi -L lists"
    fi
  done
  [[ "$TP" =~ ^[1-4]$ ]] || problem "VLLM_TP_SIZE=$TP: must be 1-4 (the vllm service is given 4 GPUs)"
  command -v nvidia-ctk >/dev/null || command -v nvidia-container-runtime-hook >/dev/null \
    || problem "NVIDIA Container Toolkit not found (nvidia-ctk): Docker cannot give GPUs to containers without it"
  log "GPUs: vLLM ${VLLM_IDS[*]} (tensor-parallel $TP), trainer ${TRAINER_IDS[*]} ($NPROC processes); nvidia-smi lists $n"
}

preflight_engine() {
  if ! command -v "$CLI" >/dev/null; then
    if [ "$CLI" = docker ]; then problem "docker not found on PATH: install Docker Engine (https://docs.docker.com/engine/install/)"
    else problem "podman not found on PATH: run scripts/setup.sh system"; fi
    return 1
  fi
  if [ ! -S "$SOCKET" ]; then
    problem "no Docker API socket at $SOCKET (DOCKER_SOCKET): the trainer starts sandboxes through it$([ "$cpu" -eq 1 ] && echo '; run scripts/setup_sandbox.sh service')"
  fi
  if ! "$CLI" info >/dev/null 2>&1; then
    problem "'$CLI info' failed: the container engine is not reachable (is the daemon running, may this user use it?)"
    return 1
  fi
}

preflight_compose() {
  if [ -n "${COMPOSE:-}" ]; then
    read -r -a COMPOSE_CMD <<<"$COMPOSE"
  elif [ "$cpu" -eq 1 ]; then
    COMPOSE_CMD=("$(env_dir deploy)/bin/podman-compose")
    command -v podman-compose >/dev/null && [ ! -x "${COMPOSE_CMD[0]}" ] && COMPOSE_CMD=(podman-compose)
  elif docker compose version >/dev/null 2>&1; then
    COMPOSE_CMD=(docker compose)
  else
    COMPOSE_CMD=(docker-compose)
  fi
  if ! "${COMPOSE_CMD[@]}" version >/dev/null 2>&1; then
    if [ "$cpu" -eq 1 ]; then problem "podman-compose not found: run scripts/setup.sh deploy (or set COMPOSE)"
    else problem "Docker Compose not found: install the compose plugin ('docker compose', package docker-compose-plugin) or set COMPOSE"; fi
    return 1
  fi
  local f
  for f in "${compose_files[@]}"; do [ -f "$f" ] || problem "compose file not found: $f (--compose)"; done
}

preflight_env_file() {
  if [ ! -f "$ENV_FILE" ]; then
    problem "$ENV_FILE not found: cp env.example .env and fill it in (compose passes it to the trainer)"
    return
  fi
  local missing
  missing=$(comm -23 <(env_keys env.example | sort -u) <(env_keys "$ENV_FILE" | sort -u) | tr '\n' ' ')
  [ -z "$missing" ] || problem "$ENV_FILE lacks ${missing% } (copy them from env.example; an empty value means the default)"
}

preflight_config() {
  if [ ! -f "$config" ]; then problem "config not found: $config (--config)"; return; fi
  case "$(realpath "$config")" in
    "$REPO_ROOT"/*) config="$(realpath --relative-to="$REPO_ROOT" "$config")" ;;
    *) problem "config $config is outside this repository: the trainer image and its configs/ mount hold the repository only"; return ;;
  esac
  local backend fsdp
  backend="$(yaml_value "$config" sandbox backend)"
  case "$backend" in
    docker) ;;
    gbox) [ -n "${GBOX_API_KEY:-}" ] \
            || problem "$config: sandbox.backend is gbox but GBOX_API_KEY is empty (set it in $ENV_FILE)" ;;
    *) problem "$config: sandbox.backend is '$backend'; the trainer container starts sandboxes through the Docker API (sandbox.backend=docker) or on GBox (gbox)" ;;
  esac
  fsdp="$(yaml_value "$config" actor backend)"
  [[ "$fsdp" =~ ^fsdp:d([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" != "$NPROC" ] \
    && problem "$config: actor.backend=$fsdp trains on ${BASH_REMATCH[1]} process(es) but TRAINER_NPROC=$NPROC"
  return 0
}

preflight_resume() {
  [ -n "$resume_path" ] || return 0
  local abs
  abs="$(realpath -m "$resume_path")"
  if [[ "$resume_path" == /workspace/outputs/* ]]; then
    train_args+=(--resume_from_checkpoint "$resume_path")  # already the trainer container's path
  elif [[ "$abs" == "$OUTPUT_DIR"/* ]]; then
    [ -e "$abs" ] || problem "--resume_from_checkpoint $resume_path: no such checkpoint"
    train_args+=(--resume_from_checkpoint "/workspace/outputs/${abs#"$OUTPUT_DIR"/}")
  else
    problem "--resume_from_checkpoint $resume_path: must be under the outputs directory $OUTPUT_DIR (CUA_OUTPUT_DIR), the only host directory the trainer sees"
  fi
}

preflight_host() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    problem "port 127.0.0.1:$PORT is in use (VLLM_HOST_PORT, where the vLLM server is published): stop what listens there or choose another port"
  fi
  if [ -n "$("$CLI" ps -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null)" ]; then
    problem "containers of compose project '$PROJECT' are running: stop them ('$CLI ps --filter label=com.docker.compose.project=$PROJECT'), or set COMPOSE_PROJECT_NAME"
  fi
  # A sandbox's control socket is $CUA_RUN_HOME/sandbox/run/cua-sb-<12 hex>/control.sock: unix socket
  # paths end at 107 bytes.
  local sock="$RUN_HOME/sandbox/run/cua-sb-000000000000/control.sock"
  (( ${#sock} <= 107 )) || problem "CUA_RUN_HOME=$RUN_HOME is too long: sandbox sockets under it would exceed the 107-byte limit of unix socket paths (use a short path such as /tmp/cua-areal)"
  # The boxes' control folders live under it: on a shared host, a folder someone else owns or can write
  # lets them queue commands into boxes, or swap a box's folder for a link to a host path.
  if [ -e "$RUN_HOME" ]; then
    local owner mode
    owner="$(stat -c %u "$RUN_HOME")" mode="$(stat -c %a "$RUN_HOME")"
    if [ "$owner" != "$(id -u)" ] || (( (8#$mode & 8#022) != 0 )); then
      problem "CUA_RUN_HOME=$RUN_HOME must be a folder of yours that no one else can write (owner uid $owner, mode $mode): remove it, or set CUA_RUN_HOME to a private folder"
    fi
  fi
  local dir free root
  mkdir -p "$OUTPUT_DIR" 2>/dev/null || problem "cannot create the outputs directory $OUTPUT_DIR (CUA_OUTPUT_DIR)"
  root="$("$CLI" info --format "$([ "$CLI" = docker ] && echo '{{.DockerRootDir}}' || echo '{{.Store.GraphRoot}}')" 2>/dev/null || true)"
  for dir in "$OUTPUT_DIR" $root; do
    free=$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 { printf "%d", $4 / 1048576 }') || continue
    [ -z "$free" ] || (( free >= MIN_FREE_GB )) \
      || problem "$free GB free on the filesystem of $dir; at least $MIN_FREE_GB GB wanted (CUA_MIN_FREE_GB): checkpoints and images are large"
  done
}

preflight_cpu_variant() {
  [ -x "$CUA_TRAINER_ENV/bin/python" ] && [ -x "$(vllm_python)" ] && [ -f "$CUA_MODEL/config.json" ] \
    || problem "the CPU variant runs the host environments and the tiny model's warm start of make setup: run scripts/setup.sh"
}

[ "$cpu" -eq 1 ] || preflight_gpus
if preflight_engine; then preflight_compose && preflight_host; fi
[ "$cpu" -eq 0 ] || preflight_cpu_variant
preflight_env_file
preflight_config
preflight_resume
if [ ${#problems[@]} -gt 0 ]; then
  log "preflight failed:"
  printf '  - %s\n' "${problems[@]}" >&2
  exit 2
fi
log "preflight passed (config $config, compose ${compose_files[*]}, project $PROJECT)"

# ---- what compose interpolates ---------------------------------------------------------------------------------
export CUA_ENV_FILE="$ENV_FILE" CUA_OUTPUT_DIR="$OUTPUT_DIR" CUA_RUN_HOME="$RUN_HOME" CUA_CONFIG="$config"
export DOCKER_SOCKET="$SOCKET" CUA_UID="${CUA_UID:-$(id -u)}" CUA_GID="${CUA_GID:-$(id -g)}"
export DOCKER_GID="${DOCKER_GID:-$(stat -c %g "$SOCKET")}"
if [ "$cpu" -eq 1 ]; then
  prefix="$("$CUA_TRAINER_ENV/bin/python" -c 'import sys; print(sys.base_prefix)')"
  if [ "$prefix" != /usr ]; then
    export CUA_PYTHON_PREFIX="$prefix"
    compose_files+=(deploy/compose.cpu-hostpython.yml)
  fi
  mkdir -p "$REPO_ROOT/outputs"  # mount point of the outputs volume inside the read-only checkout mount
fi
compose_args=(-p "$PROJECT" --env-file "$ENV_FILE")
for f in "${compose_files[@]}"; do compose_args+=(-f "$f"); done
compose() { "${COMPOSE_CMD[@]}" "${compose_args[@]}" "$@"; }
project_networks() { "$CLI" network ls -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null || true; }
container_of() {  # the newest container of a service of this project
  "$CLI" ps -aq --filter "label=com.docker.compose.project=$PROJECT" --filter "label=com.docker.compose.service=$1" | head -n1
}

# ---- will the config fit: GPU memory per rank, host memory, disk (train_areal.py --check in the trainer image) ----
trainer_image() { if [ "$cpu" -eq 1 ]; then echo "$CUA_CPU_IMAGE"; else echo cua-trainer:latest; fi; }
preflight_budget() {
  local gpu_gib="" host_gib rc=0
  if [ "$cpu" -eq 0 ]; then
    gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i "${TRAINER_IDS[0]}" 2>/dev/null \
      | awk 'NR == 1 { printf "%.1f", $1 / 1024 }') || gpu_gib=""
  fi
  host_gib=$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
  # A throwaway container: its own Hugging Face cache, into which the check fetches the model's two config
  # files (no weights) when actor.path is a hub id; the CPU variant's model is a local folder. `compose run`
  # also creates the project's network (and podman-compose its pod) when the stack is not up: removed after,
  # unless they were there before (a running stack of this project keeps its own).
  local was_up; was_up=$(project_networks)
  # deploy/compile_check.py first: the image must run a compiled function (C compiler), not only import.
  # Both in one interpreter: the check's imports (torch, AReaL) are the estimate's, ~8 s saved.
  compose run --rm --no-deps -T --entrypoint python -e HF_HOME=/tmp/hf -e HF_HUB_OFFLINE=0 trainer \
    -c 'import runpy, sys; runpy.run_path("deploy/compile_check.py", run_name="__main__"); sys.argv[0] = "train_areal.py"; runpy.run_path("train_areal.py", run_name="__main__")' \
    --config "$config" --check ${gpu_gib:+--gpu-memory-gib "$gpu_gib"} --host-memory-gib "$host_gib" \
    "${overrides[@]}" >&2 || rc=$?
  if [ -z "$was_up" ]; then
    [ "$CLI" = podman ] && podman pod rm -f "pod_$PROJECT" >/dev/null 2>&1
    for net in $(project_networks); do "$CLI" network rm -f "$net" >/dev/null 2>&1 || true; done
  fi
  case "$rc" in
    0) log "the config fits (estimates above)" ;;
    1) die "the config does not fit (train_areal.py --check above names the fields to change)" ;;
    *) log "WARNING: the resource check could not run (status $rc, above); continuing without it" ;;
  esac
}
if [ "$check_only" -eq 1 ]; then
  if "$CLI" image inspect "$(trainer_image)" >/dev/null 2>&1; then preflight_budget
  else log "resource check skipped: the trainer image $(trainer_image) is not built yet (a run checks before training)"; fi
  exit 0
fi

# ---- images ----------------------------------------------------------------------------------------------------
if [ "$build" -eq 1 ]; then
  if [ "$cpu" -eq 1 ]; then
    bash scripts/build_sandbox_image.sh
    bash scripts/build_cpu_runtime_image.sh
  else
    log "building the vllm and trainer images (first time: ~20 GB of layers)"
    compose build vllm trainer
    CUA_CONTAINER_ENGINE=docker bash scripts/build_sandbox_image.sh
  fi
fi
images=(cua-sandbox:latest)
if [ "$cpu" -eq 1 ]; then images+=("$CUA_CPU_IMAGE"); else images+=(cua-vllm:latest cua-trainer:latest); fi
for image in "${images[@]}"; do
  "$CLI" image inspect "$image" >/dev/null 2>&1 || die "image $image is missing: run without --no-build"
done

preflight_budget

# ---- run -------------------------------------------------------------------------------------------------------
TRAINER="$PROJECT-trainer"
TRAINER_HOST=""
cleanup() {
  local rc=$? boxes
  # A second Ctrl-C must not leave the stack half stopped: the script ignores it, and the stopping commands
  # run in a session of their own (podman re-enables an ignored SIGINT and would give up half way).
  trap '' INT TERM
  detached() { setsid --wait "$@"; }
  log "stopping the stack (project $PROJECT)"
  if detached "$CLI" container inspect "$TRAINER" >/dev/null 2>&1; then
    # SIGTERM first: the trainer's ranks remove their own sandboxes and release the GPUs cleanly.
    detached "$CLI" stop -t "$(trainer_stop_s)" "$TRAINER" >/dev/null 2>&1 || true
    detached "$CLI" rm -f "$TRAINER" >/dev/null 2>&1 || true
  fi
  if [ -n "$TRAINER_HOST" ]; then  # sandboxes carry their creator's hostname: the trainer container's
    boxes=$(detached "$CLI" ps -a --format '{{.Names}}' --filter label=cua.sandbox=1 --filter "label=cua.owner_host=$TRAINER_HOST")
    for box in $boxes; do
      detached "$CLI" rm -f "$box" >/dev/null 2>&1 || true
      rm -rf "${RUN_HOME:?}/sandbox/run/$box"
    done
    [ -z "$boxes" ] || log "removed leftover sandboxes: $(echo $boxes)"
  fi
  detached "${COMPOSE_CMD[@]}" "${compose_args[@]}" down -t 30 >/dev/null 2>&1 \
    || log "WARNING: '${COMPOSE_CMD[*]} -p $PROJECT down' failed; check '$CLI ps -a'"
  log "outputs: $OUTPUT_DIR (logs: <experiment>/logs/training.log)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p -m 700 "$RUN_HOME"  # owner-only when created here (preflight refused anyone else's)
mkdir -p "$OUTPUT_DIR" "$RUN_HOME/sandbox/run"
"$CLI" rm -f "$TRAINER" >/dev/null 2>&1 || true  # an exited trainer of an earlier run keeps the name
log "starting vLLM"
compose up -d vllm >&2
vllm="$(container_of vllm)"
[ -n "$vllm" ] || die "the vllm container was not created (see the compose output above)"
timeout_s=$(( ${VLLM_HEALTH_TIMEOUT:-1800} + 120 ))
start=$SECONDS
while :; do
  # podman runs healthchecks from systemd timers; without systemd nobody runs them, so run them here.
  [ "$CLI" = podman ] && podman healthcheck run "$vllm" >/dev/null 2>&1 || true
  state="$("$CLI" inspect -f '{{.State.Status}} {{.State.Health.Status}}' "$vllm" 2>/dev/null || echo gone)"
  case "$state" in
    "running healthy") break ;;
    running*) ;;
    *) "$CLI" logs --tail 40 "$vllm" >&2 2>&1 || true
       die "vLLM stopped before becoming healthy (state: $state); its last log lines are above" ;;
  esac
  if (( SECONDS - start > timeout_s )); then
    "$CLI" logs --tail 40 "$vllm" >&2 2>&1 || true
    die "vLLM not healthy after ${timeout_s}s (VLLM_HEALTH_TIMEOUT + 120 s); its last log lines are above"
  fi
  (( (SECONDS - start) % 30 < 5 )) && log "waiting for vLLM to become healthy ($((SECONDS - start))s)"
  sleep 5
done
log "vLLM healthy after $((SECONDS - start))s; starting the trainer: --config $config ${train_args[*]} ${overrides[*]}"
compose run -d --no-deps --name "$TRAINER" trainer --config "$config" "${train_args[@]}" "${overrides[@]}" >/dev/null
TRAINER_HOST="$("$CLI" inspect -f '{{.Config.Hostname}}' "$TRAINER")"
"$CLI" logs -f "$TRAINER" &
logs_pid=$!
# Until the trainer exits. A vLLM server that dies meanwhile ends the run: the trainer would only reject
# group after group against a dead address.
while [ "$("$CLI" inspect -f '{{.State.Status}}' "$TRAINER" 2>/dev/null || echo gone)" = running ]; do
  if [ "$("$CLI" inspect -f '{{.State.Status}}' "$vllm" 2>/dev/null || echo gone)" != running ]; then
    kill "$logs_pid" 2>/dev/null || true
    "$CLI" logs --tail 40 "$vllm" >&2 2>&1 || true
    die "vLLM stopped during training (its last log lines are above); stopping the trainer"
  fi
  sleep 5
done
rc="$("$CLI" wait "$TRAINER")"
sleep 1; kill "$logs_pid" 2>/dev/null || true; wait "$logs_pid" 2>/dev/null || true
log "trainer exited with status $rc"
exit "$rc"
