# The trainer image (GPU): AReaL 1.0.4 on CUDA torch 2.10 with flash-attn 2, and this project.
# Built by docker_train_areal.sh (`docker compose -f docker-compose.areal.yml build trainer`).
# Python packages, all pinned and installed without resolving (areal's declared dependency tree pulls agent
# SDKs and unpinned CUDA wheels, docs/architecture.md, AReaL 1.0.4):
#   requirements/trainer-gpu.txt   torch/torchvision/triton and the exact CUDA wheels torch 2.10.0 pins
#   requirements/trainer.txt       the same library pins as the CPU environment the test suite runs in
#   areal==1.0.4, flash-attn 2.8.3 (a prebuilt wheel for torch 2.10 / CUDA 12.8 / cp311)
# The CUDA driver comes from the host (NVIDIA Container Toolkit); the CUDA runtime from the wheels.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# gcc/g++ and the C library headers: Triton (GPU) and inductor (CPU) compile at the first torch.compile'd call
# (AReaL compiles _gather_logprobs); without them the first training step dies.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl procps gcc g++ libc6-dev \
 && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv

# Heaviest and least often changed first, so edits to the code or the library pins reuse the CUDA layer.
COPY requirements/trainer-gpu.txt requirements/trainer.txt /tmp/requirements/
RUN pip install --no-deps -r /tmp/requirements/trainer-gpu.txt
RUN grep -v '^triton==' /tmp/requirements/trainer.txt > /tmp/requirements/common.txt \
 && pip install --no-deps -r /tmp/requirements/common.txt \
 && pip install --no-deps areal==1.0.4
ARG FLASH_ATTN_WHEEL=https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.7.16/flash_attn-2.8.3+cu128torch2.10-cp311-cp311-linux_x86_64.whl
RUN pip install --no-deps "${FLASH_ATTN_WHEEL}"
# A broken environment fails the build, not the first training step: the imports, and a torch.compile'd
# function run (on the build host's CPU: inductor needs the same C compiler Triton needs on the GPUs).
COPY deploy/compile_check.py /tmp/compile_check.py
RUN python -c "import torch, flash_attn, docker; \
assert torch.version.cuda, 'torch is not a CUDA build: ' + torch.__version__" \
 && python /tmp/compile_check.py

# Compose runs the trainer as the invoking user (outputs on the host belong to them), so any uid must find a
# writable HOME for its caches (triton, torch, wandb).
RUN mkdir -m 1777 /home/cua
ENV HOME=/home/cua PYTHONPATH=/workspace
WORKDIR /workspace
COPY train_areal.py pyproject.toml ./
COPY tasks/ tasks/
COPY configs/ configs/
COPY scripts/ scripts/
COPY deploy/compile_check.py deploy/
COPY sandbox/ sandbox/
COPY cua_agent/ cua_agent/
USER 1000:1000
ENTRYPOINT ["python", "train_areal.py"]
CMD ["--config", "configs/cua_grpo.yaml"]
