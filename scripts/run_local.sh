#!/usr/bin/env bash
# `make local`: the main job on the embedded default — a few GRPO steps on CPU with the tiny model, a vLLM
# CPU server started for the run, real podman sandboxes (MiniWoB++ in chromium). Each run is a new trial;
# extra arguments are config overrides (key=value). Ctrl-C stops everything the run started.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
with_default_signals "$@"
cd "$REPO_ROOT"
trial="local-$(date +%Y%m%d-%H%M%S)"
exp_dir="$REPO_ROOT/outputs/cua-local"
log "training: configs/local_cpu.yaml, trial $trial (first steps take a minute: server start, sandboxes)"
status=0
PYTHONPATH="$REPO_ROOT" "$(trainer_python)" train_areal.py --config configs/local_cpu.yaml \
  "trial_name=$trial" "$@" || status=$?
log "logs:        $exp_dir/logs/training.log (tensorboard: $exp_dir/logs/tensorboard)"
log "episodes:    $exp_dir/rollouts.jsonl"
log "checkpoints: $exp_dir/checkpoints/$(id -un)/cua-local/$trial/"
log "see them:    make view RUN=outputs/cua-local   (groups, screenshots with each action; plots at /plots)"
left=$(podman ps -q --filter label=cua.sandbox=1 2>/dev/null | wc -l || echo 0)
[ "$left" -eq 0 ] || log "WARNING: $left sandbox container(s) still running: make reap"
exit "$status"
