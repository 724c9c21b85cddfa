#!/usr/bin/env bash
# `make local`: the main job on the embedded default — a few GRPO steps on CPU with the tiny model, a vLLM
# CPU server started for the run, real podman sandboxes (MiniWoB++ in chromium). Each run is a new trial;
# extra arguments are config overrides (key=value). Ctrl-C stops everything the run started.
# The terminal shows each step's lines, warnings and errors (cua_agent/train/console.py); the run's whole
# output (AReaL's tables, the vLLM server's log) goes to a file named at the start, and a failed run
# prints that file's last lines.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
with_default_signals "$@"
cd "$REPO_ROOT"
trial="local-$(date +%Y%m%d-%H%M%S)"
exp_dir="$REPO_ROOT/outputs/cua-local"
console="$exp_dir/logs/console-$trial.log"
mkdir -p "$exp_dir/logs"
log "training: configs/local_cpu.yaml, trial $trial (first steps take a minute: server start, sandboxes)"
log "full output: $console"
done_file="$(mktemp -u "${TMPDIR:-/tmp}/cua-local-done.XXXXXX")"
# In the background, so Ctrl-C (which a background command of this shell ignores) leaves it showing the stop.
PYTHONPATH="$REPO_ROOT" "$(trainer_python)" -m cua_agent.train.console "$console" "$done_file" &
follower=$!
status=0
PYTHONPATH="$REPO_ROOT" "$(trainer_python)" train_areal.py --config configs/local_cpu.yaml \
  "trial_name=$trial" "$@" >"$console" 2>&1 || status=$?
touch "$done_file"
wait "$follower" || true
rm -f "$done_file"
if [ "$status" -eq 130 ] || [ "$status" -eq 143 ]; then
  log "training stopped (status $status); to continue it: make local ARGS='--resume trial_name=$trial'"
elif [ "$status" -ne 0 ]; then
  log "training exited with status $status; the last lines of $console:"
  tail -n 30 "$console" | sed -E 's/\x1b\[[0-9;]*m//g' >&2
fi
log "logs:        $exp_dir/logs/training.log (tensorboard: $exp_dir/logs/tensorboard)"
log "episodes:    $exp_dir/rollouts.jsonl"
log "checkpoints: $exp_dir/checkpoints/$(id -un)/cua-local/$trial/"
log "see them:    make view RUN=outputs/cua-local   (groups, screenshots with each action; plots at /plots)"
left=$(podman ps -q --filter label=cua.sandbox=1 2>/dev/null | wc -l || echo 0)
[ "$left" -eq 0 ] || log "WARNING: $left sandbox container(s) still running: make reap"
exit "$status"
