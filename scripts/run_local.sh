#!/usr/bin/env bash
# `make local`: the main job on the embedded default. Until the training entry (train_areal.py) lands,
# this runs the inference-path smoke: vLLM CPU server + screenshot chat + disk weight update.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
PYTHONPATH="$REPO_ROOT" exec "$(trainer_python)" -m cua_agent.inference.smoke --out outputs/smoke "$@"
