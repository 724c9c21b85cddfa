"""Every shipped GPU config, rehearsed on CPU: the config file as users get it, with only the overrides that
cua_agent/train/rehearsal.py lists (printed at the start of each test: the tiny model of the same family,
d4/d8 -> d2 over gloo, one vLLM CPU server per replica, sdpa, and the scale two cores run), launched as
users launch it: the compose stack's entry point (`python -m cua_agent.train.torchrun`) for the one-node
configs, our Ray launcher across two Ray nodes for the multi-node one, train_areal.py itself for one GPU.

Each rehearsal trains 2 GRPO steps at 2 trainer ranks (the single-GPU config at its 1) with a held-out
evaluation after step 2. All but the 8B config's (whose stop and resume take cua_grpo.yaml's path:
torchrun, full weights) then take SIGTERM during step 3 and stop within the config's
checkpoint.stop_timeout_s: at once while step 3 waits for its episodes (checkpoint of step 2), or after
step 3's update and its checkpoint when the signal comes during it. Then each resumes at the step after the
checkpoint and trains to step 4. Throughout:
- the step metrics (steps.jsonl) are what both ranks' rollouts*.jsonl hold for the groups each step
  consumed (trained, or filtered while its batch was collected), and both ranks' groups are counted;
- LoRA (the 32B config): every turn of every rank was answered by the adapter of its weight version and the
  held-out evaluation by the current one; a resumed run serves the adapter the stopped run had trained;
- mixed rows (cua_grpo.yaml with the sample repository tasks beside MiniWoB): GUI and terminal groups train
  together across the ranks;
- nothing is left: no sandbox, no process of the run, no Ray worker, no adapter on the server.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS, VLLMProcess, start_vllm
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from cua_agent.rollout.outcomes import rates, tally
from cua_agent.train.cli import LAUNCHER_MARGIN_S, read_config
from cua_agent.train.rehearsal import describe, overrides, ranks_of
from sandbox.backends.docker import DockerBackend
from sandbox.backends.ray_hosts import SLOT
from tests.conftest import SERVER_START_TIMEOUT_S
from tests.deploy.ray_cluster import LocalRayCluster, TrainerWatch
from tests.inference.reference import PARITY_TOL
from tests.training.harness import (
    Training,
    boxes_of,
    episodes_of,
    left_behind,
    restore_weights,
    served_version,
    steps_of,
    wait_for,
    wait_training,
)
from tests.training.test_e2e_lora import served as served_models

pytestmark = pytest.mark.slow
STEPS = 4  # 2, SIGTERM in the 3rd, then the rest after the resume
BUDGET_S = 780  # both runs, within pytest's 900 s: a run that hangs fails with its stacks (harness.hung)
REPO_TASKS = "sandbox/repo/samples/tasks.jsonl"


@dataclass
class Stack:
    """Where a rehearsal runs: its vLLM servers (one per replica) and, for the multi-node config, Ray; with
    `sandbox_engine`, the boxes run on the Ray cluster's sandbox machine, whose engine that is
    (sandbox.backend ray), and none on the trainers' own."""

    servers: list[str]
    ray: LocalRayCluster | None = None
    sandbox_engine: str | None = None

    def boxes(self, pids: list[int]) -> list[dict]:
        """The run's boxes: on the trainers' engine by owner pid, or every box of the sandbox machine's."""
        if self.sandbox_engine is None:
            return boxes_of(pids)
        engine = DockerBackend(run_id="rehearsal-probe", docker_host=self.sandbox_engine)
        try:
            return engine.list_boxes()
        finally:
            engine.close()


def rehearsal_args(
    config_path: str, stack: Stack, exp: Path, coverage: list[str], steps: int = STEPS
) -> tuple[CUAGRPOConfig, list[str]]:
    """The rehearsal's overrides (printed), then what this test covers beyond the shipped file."""
    config = read_config(["--config", config_path])
    found = overrides(config, stack.servers, exp)
    print(
        "\n"
        + describe(config_path, config, found)
        + ("\n  coverage: " + " ".join(coverage) if coverage else "")
    )
    covered = {a.split("=", 1)[0] for a in coverage}
    return config, [o.arg for o in found if o.key not in covered] + coverage + [
        f"++total_train_steps={steps}"
    ]  # ++: the GPU configs set epochs only


def launch(config_path: str, config: CUAGRPOConfig, args: list[str], log: Path, stack: Stack) -> Training:
    train = ["train_areal.py", "--config", config_path, *args]
    if stack.ray is not None:
        cmd = [sys.executable, "-m", "cua_agent.train.launch_ray", *train]
        return Training(cmd, log, env={**stack.ray.env(), "RAY_ADDRESS": stack.ray.address}, ray=True)
    ranks = ranks_of(config)
    if ranks == 1:  # one GPU: train_areal.py itself (configs/cua_grpo_single_gpu.yaml)
        return Training([sys.executable, *train], log)
    entry = ["-m", "cua_agent.train.torchrun", "--standalone", "--nproc-per-node", str(ranks)]
    return Training([sys.executable, *entry, *train], log)


def recover_checkpoints(exp: Path) -> list[Path]:
    return sorted(exp.glob("checkpoints/*/*/*/recover/globalstep*"))


@dataclass
class Rehearsed:
    exp: Path
    config: CUAGRPOConfig
    steps: dict[int, dict]
    episodes: list[dict]
    logs: str  # rank 0's training.log of both runs


def rehearse(config_path: str, stack: Stack, tmp: Path, coverage: list[str] = ()) -> Rehearsed:  # type: ignore[assignment]
    exp = tmp / "exp"
    config, args = rehearsal_args(config_path, stack, exp, list(coverage))
    stop_timeout = config.checkpoint.stop_timeout_s
    start = time.monotonic()
    left = lambda: BUDGET_S - (time.monotonic() - start)  # noqa: E731
    first = launch(config_path, config, args, tmp / "first.log", stack)
    try:
        wait_for(lambda: 1 in steps_of(exp), left(), "step 2 and its held-out evaluation", first)
        wait_for(lambda: len(stack.boxes(first.pids)) > 0, left(), "step 3's sandboxes", first)
        assert stack.sandbox_engine is None or boxes_of(first.pids) == [], "a box on a trainer's machine"
        signalled = time.monotonic()
        first.send_signal(signal.SIGTERM)  # as `docker stop` (via the container's init) or a scheduler does
        grace = stop_timeout + LAUNCHER_MARGIN_S + 60
        stopped = wait_training(first, tmp / "first.log", start, timeout_s=grace)
    finally:
        if first.poll() is None:
            first.kill_all()
    stopped_in = time.monotonic() - signalled
    assert stopped.rc == 128 + signal.SIGTERM, f"exit {stopped.rc} after SIGTERM:\n{stopped.tail()}"
    assert stopped_in <= stop_timeout, (
        f"stopped in {stopped_in:.0f}s; checkpoint.stop_timeout_s={stop_timeout}"
    )
    finished = sorted(steps_of(exp))
    assert finished in ([0, 1], [0, 1, 2]), f"finished steps {finished}: the stop came during step 3"
    checkpoints = recover_checkpoints(exp)
    assert checkpoints and checkpoints[-1].name == f"globalstep{finished[-1]}", (finished, checkpoints)
    assert stack.boxes(stopped.pids) == [] and boxes_of(stopped.pids) == [] and left_behind(stopped) == []
    phase = "while it waited for its episodes" if finished == [0, 1] else "during its update (finished first)"

    resume = (
        ["checkpoint.resume_from=latest"] if stack.ray else ["--resume"]
    )  # the Ray launcher takes no flags
    second = launch(config_path, config, [*resume, *args], tmp / "second.log", stack)
    resumed = wait_training(second, tmp / "second.log", time.monotonic(), timeout_s=max(left(), 60))
    assert resumed.rc == 0, f"the resumed run exited {resumed.rc}:\n{resumed.tail()}"
    log = (exp / "logs" / "training.log").read_text(errors="replace")
    assert f"Resumed from {checkpoints[-1]}" in log
    rest = list(range(finished[-1] + 1, STEPS))
    assert sorted(steps_of(exp, resumed.pids)) == rest, (
        "the resumed run trains the steps after the checkpoint"
    )
    assert stack.boxes(resumed.pids) == [] and boxes_of(resumed.pids) == [] and left_behind(resumed) == []
    episodes = episodes_of(exp)
    print(
        f"{config_path}: SIGTERM in step 3 {phase}, stopped in {stopped_in:.1f}s; resumed at step "
        f"{rest[0] + 1}; {stopped.elapsed_s + resumed.elapsed_s:.0f}s in all, {len(episodes)} episodes"
    )
    return Rehearsed(exp, config, steps_of(exp), episodes, log)


def train_through(config_path: str, stack: Stack, tmp: Path, coverage: list[str]) -> Rehearsed:
    """2 steps and the held-out evaluation after step 2, without the stop and resume: for a config whose
    stop and resume take the path another rehearsal covers (torchrun, full weights: cua_grpo.yaml's)."""
    exp = tmp / "exp"
    config, args = rehearsal_args(config_path, stack, exp, coverage, steps=2)
    run = wait_training(
        launch(config_path, config, args, tmp / "run.log", stack), tmp / "run.log", time.monotonic()
    )
    assert run.rc == 0, f"exit {run.rc}:\n{run.tail()}"
    assert stack.boxes(run.pids) == [] and boxes_of(run.pids) == [] and left_behind(run) == []
    episodes = episodes_of(exp)
    print(f"{config_path}: 2 steps in {run.elapsed_s:.0f}s, {len(episodes)} episodes")
    log = (exp / "logs" / "training.log").read_text(errors="replace")
    return Rehearsed(exp, config, steps_of(exp), episodes, log)


def assert_step_metrics_are_the_rollouts(r: Rehearsed) -> None:
    """steps.jsonl over every rank: each step's episode rates are those of the scored episodes that the
    ranks' rollouts files hold for the groups the step lists, and no group is counted twice."""
    by_group: dict[str, list[Any]] = defaultdict(list)
    for e in r.episodes:
        by_group[e["group"]].append(SimpleNamespace(**{**e, "turns": e["turns"]}))
    counted: set[str] = set()
    ranks: set[int] = set()
    for step, record in sorted(r.steps.items()):
        groups = record["groups"]["trained"] + record["groups"]["dropped"]
        ids = [g["group"] for g in groups]
        assert len(set(ids)) == len(ids) and not counted & set(ids), f"step {step} counts a group twice"
        counted |= set(ids)
        ranks |= {g["rank"] for g in groups}
        assert all(by_group[i] for i in ids), f"step {step} lists groups no rollouts file holds"
        expected = rates(tally(e for i in ids for e in by_group[i]))
        assert record["episodes"] == pytest.approx(expected), f"step {step}"
        trained_rows = {(row["rank"], row["draw"]) for row in record["rows"]}
        assert {(g["rank"], g["draw"]) for g in record["groups"]["trained"]} == trained_rows
    assert ranks == set(range(ranks_of(r.config))), f"groups of ranks {ranks} counted"


def assert_held_out_evaluation_after_step_2(r: Rehearsed, model: str) -> dict:
    evaluated = r.steps[1]["eval"]
    assert evaluated.get("eval/all/episodes") == 2 and "eval/failed" not in evaluated, evaluated
    report = json.loads((r.exp / "eval" / "step2" / "report.json").read_text())
    assert report["meta"]["model"] == model and report["meta"]["split"] == "test", report["meta"]
    return report


def restore(server: str, model: Path, tmp: Path) -> None:
    """The rehearsal trained a shared server's weights: later tests sample from the original model."""
    restore_weights(server, model, tmp, version=100)


# ---- the configs -------------------------------------------------------------------------------------------
def test_cua_grpo_with_mixed_gui_and_repository_rows(vllm_servers, sandbox_setup, tmp_path: Path):
    server = vllm_servers["untied"].address
    coverage = [  # the README's mixed families: MiniWoB and the sample repository tasks in one run
        f"tasks.extra_train_paths=[{REPO_TASKS}]",
        "tasks.task_ids=[miniwob/click-test,repo/calc-add]",
        "evaluation.task_ids=[miniwob/click-test,miniwob/focus-text]",
        "agent.command_timeout_s=5",
    ]
    try:
        r = rehearse("configs/cua_grpo.yaml", Stack([server]), tmp_path, coverage)
    finally:
        restore(server, MODELS["untied"], tmp_path)
    assert_step_metrics_are_the_rollouts(r)
    assert_held_out_evaluation_after_step_2(r, str(MODELS["untied"]))
    trained = {g["task_id"] for s in r.steps.values() for g in s["groups"]["trained"]}
    assert trained == {"miniwob/click-test", "repo/calc-add"}, trained
    terminal = [t for e in r.episodes if e["task_id"] == "repo/calc-add" for t in e["turns"]]
    assert terminal and all(t["images"] == 0 for t in terminal)
    assert not list(r.exp.glob("checkpoints/*/*/*/default/weight_update_v*")), "sync copies must go"


def test_cua_grpo_qwen3vl_8b(qwen3_vl_servers, tmp_path: Path):
    server = qwen3_vl_servers["untied"].address
    coverage = ["saver.freq_steps=2"]  # an HF save within the rehearsal's steps (the config saves per epoch)
    try:
        r = train_through("configs/cua_grpo_qwen3vl_8b.yaml", Stack([server]), tmp_path, coverage)
    finally:
        restore(server, QWEN3_VL_MODELS["untied"], tmp_path)
    assert_step_metrics_are_the_rollouts(r)
    assert_held_out_evaluation_after_step_2(r, str(QWEN3_VL_MODELS["untied"]))
    # what a full-weight run leaves to deploy and to read: whole HF models, and the config's TensorBoard
    saves = sorted(r.exp.glob("checkpoints/*/*/*/default/*globalstep*"))
    assert saves and all((s / "config.json").is_file() and list(s.glob("model*.safetensors")) for s in saves)
    assert list((r.exp / "logs" / "tensorboard").glob("events.out.tfevents.*"))


def synced_adapters(log: str) -> dict[int, str]:
    """weight version -> served name of each adapter sync in a log (the last sync of a version wins)."""
    return {int(v): name for name, v in re.findall(r"LoRA adapter (\S+) serves weight version (\d+)", log)}


def served_adapter_parity(server: str, model: Path, adapter: Path) -> float:
    """max |logprob| difference between the server serving `adapter` and HF + PEFT with it, on a turn."""
    from peft import PeftModel

    from tests.inference.reference import HFReference, chat_messages, max_abs_diff, screenshot
    from tests.training.test_e2e_lora import _load

    asyncio.run(_load(server, "deployed", adapter))
    images = [screenshot(3), screenshot(4)]

    async def sample():
        try:
            return await VLLMServer(server, model="deployed").chat(
                chat_messages(images, "Click OK."), SamplingParams(max_tokens=16, seed=0)
            )
        finally:
            await VLLMServer(server).unload_lora_adapter("deployed")
            await close_loop_session()

    gen = asyncio.run(sample())
    ref = HFReference(model)
    ref.model = PeftModel.from_pretrained(ref.model, str(adapter)).eval()
    return max_abs_diff(ref.logprobs(images, gen.prompt_token_ids, gen.output_token_ids), gen.output_logprobs)


def test_cua_grpo_qwen3vl_32b_lora(qwen3_vl_lora_server: VLLMProcess, tmp_path: Path):
    server = qwen3_vl_lora_server.address
    coverage = ["saver.freq_steps=2"]  # HF saves within the rehearsal's steps (the config saves per epoch)
    r = rehearse("configs/cua_grpo_qwen3vl_32b_lora.yaml", Stack([server]), tmp_path, coverage)
    assert_step_metrics_are_the_rollouts(r)
    synced = synced_adapters(r.logs)
    assert sorted(synced) == list(range(STEPS + 1)), synced
    # every rank's turns: answered by their version's adapter (version 0: the trainer's initial adapter)
    answered = {(t["version"], t["model"]) for e in r.episodes for t in e["turns"]}
    expected = {(v, synced[v]) for v, _ in answered}
    assert answered == expected, answered - expected
    assert max(v for v, _ in answered) >= 1, "the ranks sampled from the adapters"
    assert_held_out_evaluation_after_step_2(r, synced[2])
    # the resumed run served again the adapter of its checkpoint's version (same tensors: same name)
    again = [
        v for v in synced if v and r.logs.count(f"LoRA adapter {synced[v]} serves weight version {v} ") == 2
    ]
    assert len(again) == 1, f"versions synced by both runs: {again}"
    assert not [n for n in served_models(server) if n.startswith("default_lora")], "the run's adapters stay"
    # what users deploy: the HF saves are the adapter in PEFT format, and served, it is the trained policy
    saves = sorted(r.exp.glob("checkpoints/*/*/*/default/*globalstep*"), key=lambda p: p.stat().st_mtime)
    assert saves and all((s / "adapter_config.json").is_file() for s in saves), saves
    assert not [f for s in saves for f in s.glob("model*.safetensors")], "a LoRA run saves its adapter alone"
    err = served_adapter_parity(server, QWEN3_VL_MODELS["untied"], saves[-1])
    print(f"the last saved adapter, served: max |HF+PEFT - vLLM| {err:.2e}")
    assert err <= PARITY_TOL


def test_cua_grpo_multinode_over_two_ray_nodes(
    vllm_servers, second_engine: str, artefacts: Path, tmp_path: Path
):
    """Two trainer nodes and a sandbox-only machine (no GPU, no CPU for Ray, its own podman engine) that
    offers the run's sandbox slots: every box of the run (sandbox.backend ray) lives there."""
    first = vllm_servers["untied"]
    second = start_vllm(MODELS["untied"], artefacts)  # the second node's server: the same model
    cluster = LocalRayCluster()
    # 2 ranks x the rehearsal's sandbox.max_concurrency, + its evaluation.concurrency: rank 0's held-out
    # evaluation plays while both pools keep their boxes (with 4 slots it waited for good)
    slots = {SLOT: 2 * 2 + 2}
    try:
        # the Ray nodes start while the second server loads (about half a minute of two cores either way)
        nodes = [cluster.start_node("head", cpus=1, gpus=1), cluster.start_node("worker", cpus=1, gpus=1)]
        cluster.start_node("sandboxes", cpus=0, gpus=0, resources=slots, env={"DOCKER_HOST": second_engine})
        second.wait_healthy(SERVER_START_TIMEOUT_S)
        stack = Stack([first.address, second.address], cluster, sandbox_engine=second_engine)
        with TrainerWatch() as watch:
            r = rehearse("configs/cua_grpo_multinode.yaml", stack, tmp_path, ["sandbox.backend=ray"])
        versions = [served_version(s.address) for s in (first, second)]
    finally:
        left = cluster.stop()
        second.stop()
        restore(first.address, MODELS["untied"], tmp_path)
    assert left == [], f"processes of the Ray nodes survived their stop: {left}"
    assert set(watch.seen.values()) == {n.sid for n in nodes}, f"one trainer rank on each node: {watch.seen}"
    assert versions == [STEPS, STEPS], f"each node's server serves the last step's weights: {versions}"
    assert_step_metrics_are_the_rollouts(r)
    assert_held_out_evaluation_after_step_2(r, str(MODELS["untied"]))


def test_cua_grpo_single_gpu(vllm_servers, tmp_path: Path):
    """One trainer rank, as shipped: the suite's single-rank rehearsal (bf16 weights, adam_bf16)."""
    server = vllm_servers["untied"].address
    try:
        r = rehearse("configs/cua_grpo_single_gpu.yaml", Stack([server]), tmp_path)
    finally:
        restore(server, MODELS["untied"], tmp_path)
    assert_step_metrics_are_the_rollouts(r)
    assert_held_out_evaluation_after_step_2(r, str(MODELS["untied"]))
