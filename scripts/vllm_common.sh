# Shared by run_vllm_cpu.sh and run_vllm_base.sh: start a vLLM OpenAI server, wait until /health answers
# (with a deadline and progress), then stay in the foreground until it exits. Stopping this script
# (Ctrl-C, SIGTERM) stops the server with it.

# serve_until_exit HOST PORT TIMEOUT_S CMD...
serve_until_exit() {
  local host="$1" port="$2" timeout_s="$3"; shift 3
  if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
    die "port $host:$port is already in use (another vLLM server?); set VLLM_PORT"
  fi
  # vLLM's processes meet on ZMQ sockets in VLLM_RPC_BASE_PATH (default /tmp) and leave them there, with a
  # `vllm_dist_*` file in TMPDIR: thousands piled up. This server's go in a folder of its own, its TMPDIR,
  # removed when it stops.
  SERVER_TMP="$(mktemp -d "${TMPDIR:-/tmp}/cua-vllm.XXXXXX")"
  # torch's compile cache stays where it was, shared across starts
  export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor_$(id -un)}"
  export VLLM_RPC_BASE_PATH="${VLLM_RPC_BASE_PATH:-$SERVER_TMP}"
  log "starting: $*"
  TMPDIR="$SERVER_TMP" "$@" &
  # Script-level, not local: the traps run after this function's scope is gone (set -u would fail them).
  SERVER_PID=$!
  local pid=$SERVER_PID start=$SECONDS
  trap 'kill -TERM "${SERVER_PID:-}" 2>/dev/null; wait "${SERVER_PID:-}" 2>/dev/null; exit 143' INT TERM
  trap 'kill -TERM "${SERVER_PID:-}" 2>/dev/null || true; rm -rf "${SERVER_TMP:-}"' EXIT
  until curl -sf "http://$host:$port/health" >/dev/null 2>&1; do
    if ! kill -0 $pid 2>/dev/null; then
      local rc=0
      wait $pid || rc=$?  # under set -e a bare `wait` of a failed server ended the script before saying so
      die "vLLM server exited with code $rc before becoming healthy (see its output above)"
    fi
    if (( SECONDS - start > timeout_s )); then
      die "vLLM server not healthy on http://$host:$port after ${timeout_s}s (VLLM_HEALTH_TIMEOUT); stopping it"
    fi
    (( (SECONDS - start) % 15 == 0 )) && log "waiting for http://$host:$port/health ($((SECONDS - start))s)"
    sleep 1
  done
  log "ready: http://$host:$port (in $((SECONDS - start))s)"
  wait $pid
}

# serving_dir PYTHON MODEL_DIR -> the directory to serve: MODEL_DIR, or for a tied-embedding checkpoint an
# untied copy with an explicit head (see cua_agent/inference/tied_head.py for why).
serving_dir() {
  local py="$1" model="$2" key
  key="$(basename "$model")-$(printf '%s' "$(cd "$model" && pwd)" | sha256sum | cut -c1-8)"
  PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$py" -m cua_agent.inference.tied_head \
    serving-copy "$model" "$CUA_HOME/serving/$key" || die "cannot prepare $model for serving"
}

# LoRA runs (actor.use_lora): with VLLM_LORA_RANK set, LORA_ARGS serves up to VLLM_MAX_LORAS (4) adapters of
# that rank or less, loaded and unloaded at runtime (cua_agent/inference/adapter_sync.py); else it is empty.
LORA_ARGS=()
lora_args() {
  local rank="${VLLM_LORA_RANK:-}" r
  [ -n "$rank" ] || return 0
  [[ "$rank" =~ ^[0-9]+$ ]] || die "VLLM_LORA_RANK must be a number, got '$rank'"
  for r in 1 8 16 32 64 128 256 320 512; do  # the values vLLM accepts for --max-lora-rank
    if (( r >= rank )); then
      export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
      LORA_ARGS=(--enable-lora --max-lora-rank "$r" --max-loras "${VLLM_MAX_LORAS:-4}")
      return 0
    fi
  done
  die "VLLM_LORA_RANK=$rank is above vLLM's largest --max-lora-rank, 512"
}
