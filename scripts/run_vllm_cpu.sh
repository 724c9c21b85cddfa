#!/usr/bin/env bash
# vLLM's CPU build serving the policy (embedded default). Foreground; Ctrl-C stops it.
#   VLLM_MODEL (default: the tiny model), VLLM_HOST (127.0.0.1), VLLM_PORT (8000),
#   VLLM_HEALTH_TIMEOUT (300 s), VLLM_MAX_MODEL_LEN (8192), VLLM_LORA_RANK and VLLM_MAX_LORAS (LoRA runs,
#   scripts/vllm_common.sh); extra arguments go to the server.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
with_default_signals "$@"
source "$REPO_ROOT/scripts/vllm_common.sh"

model="${VLLM_MODEL:-$CUA_HOME/models/tiny-qwen2.5-vl}"
[ -f "$model/config.json" ] || die "no model at $model (run scripts/setup.sh, or set VLLM_MODEL)"
py="$(vllm_python)"
[ -x "$py" ] || die "inference environment missing: run scripts/setup.sh vllm"
served_name="$model"
model="$(serving_dir "$py" "$model")"

# CPU settings measured on 2-core machines (docs/architecture.md, vLLM): no thread pinning, 1 GiB KV cache, fp32, eager,
# the model run in the engine's own process. vLLM's CPU platform turns `--distributed-executor-backend uni` into a
# third process (a worker) unless VLLM_ENABLE_V1_MULTIPROCESSING=0; the API server and the engine stay two
# processes either way. Dev mode exposes pause/resume, collective_rpc (weight reload) and cache resets.
export VLLM_TARGET_DEVICE=cpu VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
  VLLM_ENABLE_V1_MULTIPROCESSING="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}" VLLM_SERVER_DEV_MODE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# OpenMP threads sleep while they wait: spinning ones stall where the trainer shares the cores (16 requests beside
# a 2-thread torch process: 3.2-11.0 s spinning, 2.7-3.0 s sleeping; cua_agent/openmp.py)
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

lora_args
serve_until_exit "${VLLM_HOST:-127.0.0.1}" "${VLLM_PORT:-8000}" "${VLLM_HEALTH_TIMEOUT:-300}" \
  "$py" -m vllm.entrypoints.openai.api_server \
    --model "$model" --served-model-name "$served_name" --host "${VLLM_HOST:-127.0.0.1}" --port "${VLLM_PORT:-8000}" \
    --dtype float32 --enforce-eager --distributed-executor-backend uni \
    --max-model-len "${VLLM_MAX_MODEL_LEN:-8192}" --limit-mm-per-prompt '{"image": 8}' \
    --generation-config vllm --disable-log-stats "${LORA_ARGS[@]}" "$@"
