#!/usr/bin/env bash
# CUDA vLLM serving the policy on GPUs (production). Foreground; Ctrl-C stops it.
#   VLLM_MODEL (default Qwen/Qwen2.5-VL-7B-Instruct), VLLM_TP_SIZE (4), VLLM_GPUS (the first VLLM_TP_SIZE
#   GPUs: 0,1,2,3; in a container these are the GPUs it was given, renumbered from 0),
#   VLLM_HOST (127.0.0.1), VLLM_PORT (8000), VLLM_HEALTH_TIMEOUT (900 s), VLLM_MAX_MODEL_LEN (32768),
#   VLLM_GPU_MEMORY_UTILIZATION (0.85), VLLM_PYTHON (python3 with the CUDA vllm package), VLLM_LORA_RANK and
#   VLLM_MAX_LORAS (LoRA runs, scripts/vllm_common.sh); extra arguments go to the server.
# The server runs with vLLM's development endpoints (weight reloads), which no API key guards: whoever
# reaches it can swap or pause the policy. Loopback by default; to serve trainers on other hosts, set
# VLLM_HOST to an address of a private network that only the cluster reaches.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
with_default_signals "$@"
source "$REPO_ROOT/scripts/vllm_common.sh"

tp="${VLLM_TP_SIZE:-4}"
gpus="${VLLM_GPUS:-$(seq -s, 0 $((tp - 1)))}"
n_gpus=$(tr ',' '\n' <<<"$gpus" | grep -c .)
(( n_gpus == tp )) || die "VLLM_GPUS=$gpus names $n_gpus GPU(s) but VLLM_TP_SIZE=$tp: they must match"
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this launcher needs NVIDIA GPUs (use run_vllm_cpu.sh on CPU)"
py="${VLLM_PYTHON:-python3}"
"$py" -c 'import vllm' 2>/dev/null || die "$py cannot import vllm (set VLLM_PYTHON to the CUDA vLLM environment)"

model="${VLLM_MODEL:-Qwen/Qwen2.5-VL-7B-Instruct}"
if [ ! -d "$model" ]; then  # a hub id: resolve it to the local snapshot (downloads it once if allowed)
  model="$("$py" -c 'import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))' "$model")" \
    || die "cannot resolve VLLM_MODEL=${VLLM_MODEL:-} to a local checkpoint"
fi
served_name="${VLLM_MODEL:-Qwen/Qwen2.5-VL-7B-Instruct}"
model="$(serving_dir "$py" "$model")"

export CUDA_VISIBLE_DEVICES="$gpus" VLLM_SERVER_DEV_MODE=1
lora_args
serve_until_exit "${VLLM_HOST:-127.0.0.1}" "${VLLM_PORT:-8000}" "${VLLM_HEALTH_TIMEOUT:-900}" \
  "$py" -m vllm.entrypoints.openai.api_server \
    --model "$model" --served-model-name "$served_name" --host "${VLLM_HOST:-127.0.0.1}" --port "${VLLM_PORT:-8000}" \
    --tensor-parallel-size "$tp" --dtype bfloat16 \
    --gpu-memory-utilization "${VLLM_GPU_MEMORY_UTILIZATION:-0.85}" \
    --max-model-len "${VLLM_MAX_MODEL_LEN:-32768}" --limit-mm-per-prompt '{"image": 8}' \
    --generation-config vllm --disable-log-stats "${LORA_ARGS[@]}" "$@"
