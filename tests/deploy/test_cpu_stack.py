"""The stack's CPU variant under podman, driven by the product's own script: `docker_train_areal.sh --cpu`
runs docker-compose.areal.yml with deploy/compose.cpu.yml through podman-compose — the vllm service (vLLM's
CPU build on the tiny model's warm start) becomes healthy, the trainer container trains one GRPO step on real sandboxes
it starts through the mounted podman socket, the weight update crosses the shared outputs volume into the
vllm container, and on exit the script leaves no container and no sandbox behind; on Ctrl-C and SIGTERM too,
whenever they land (during a podman command, during training, during the cleanup itself)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.deploy.stack import SCRIPT, free_port, podman, remove_model_cache, script_env, write_env_file
from tests.training.harness import left_in_session

pytestmark = pytest.mark.slow

ONE_STEP = [
    "total_train_steps=1",
    "tasks.task_ids=[miniwob/click-test]",
    "agent.group_size=2",
    "agent.min_group_size=2",
    "agent.max_turns=1",
    "agent.max_new_tokens=24",  # shorter than a click tool call: every answer is malformed, every
    "agent.filter_equal_reward_groups=false",  # group's rewards equal: the filter would skip 16 groups first
    "sandbox.max_concurrency=2",
    "rollout.max_concurrent_rollouts=1",  # the step's group alone (a second one in flight: ~10 s more)
]


def project_containers(project: str) -> list[str]:
    return podman(
        "ps", "-a", "--format", "{{.Names}}", "--filter", f"label=com.docker.compose.project={project}"
    ).split()


class Stack:
    """One run of the script in its own session, and what it leaves behind."""

    def __init__(self, tmp: Path, args: list[str], sigint_ignored: bool = False) -> None:
        self.project = f"cua-test-{uuid.uuid4().hex[:8]}"
        # short: sandbox socket paths under it must stay within the unix limit (pytest's tmp_path is too deep)
        self.run_home = Path(tempfile.mkdtemp(prefix="cua-test-", dir="/tmp"))
        self.outputs = tmp / "outputs"
        env = script_env(
            tmp,
            COMPOSE_PROJECT_NAME=self.project,
            VLLM_HOST_PORT=str(free_port()),
            CUA_RUN_HOME=str(self.run_home),
        )
        env["CUA_ENV_FILE"] = str(write_env_file(tmp / "env"))
        self.log = tmp / "script.log"
        self.started = time.monotonic()
        # A terminal starts a foreground job with SIGINT at its default; a shell without job control (a
        # script's `cmd &`, some CI runners) starts it ignored. Set here either way, whatever started pytest.
        sigint = signal.SIG_IGN if sigint_ignored else signal.SIG_DFL
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["bash", str(SCRIPT), "--cpu", *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: (
                    signal.signal(signal.SIGINT, sigint),
                    signal.signal(signal.SIGTERM, signal.SIG_DFL),
                ),
            )

    def container(self, service: str) -> str | None:
        names = podman(
            "ps", "--format", "{{.Names}}",
            "--filter", f"label=com.docker.compose.project={self.project}",
            "--filter", f"label=com.docker.compose.service={service}",
        ).split()  # fmt: skip
        return names[0] if names else None

    def wait_for(self, service: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if name := self.container(service):
                return name
            time.sleep(1)
        why = (
            f"the script exited ({self.proc.returncode})"
            if self.proc.poll() is not None
            else f"{timeout:.0f}s"
        )
        raise AssertionError(f"no running {service} container ({why}):\n{self.tail()}")

    def wait_for_process(self, words: str, timeout: float) -> psutil.Process:
        """A running process of the script's session whose command line holds `words`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            for p in psutil.process_iter(["cmdline"]):
                try:
                    if os.getsid(p.pid) == self.proc.pid and words in " ".join(p.info["cmdline"] or []):
                        return p
                except (ProcessLookupError, psutil.Error):
                    pass
            time.sleep(0.02)
        raise AssertionError(
            f"no '{words}' process in the script's session after {timeout:.0f}s:\n{self.tail()}"
        )

    def wait_for_log(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise AssertionError(f"'{text}' not in the script's log after {timeout:.0f}s:\n{self.tail()}")

    def left(self, trainer_host: str = "") -> list[str]:
        """What a stop must not leave: the project's containers, pod and networks, the sandboxes of its
        trainer (they carry the trainer container's hostname), the script's processes."""
        found = project_containers(self.project)
        found += podman("pod", "ps", "-q", "--filter", f"name=pod_{self.project}").split()
        found += podman(
            "network", "ls", "-q", "--filter", f"label=com.docker.compose.project={self.project}"
        ).split()
        if trainer_host:
            found += podman("ps", "-a", "-q", "--filter", f"label=cua.owner_host={trainer_host}").split()
        return found + [f"process {p}" for p in left_in_session(self.proc.pid)]

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(
                f"docker_train_areal.sh still running after {timeout:.0f}s:\n{self.tail()}"
            ) from None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def remove_leftovers(self) -> None:
        """Only after a failure: the script's own cleanup is what the tests check."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for name in project_containers(self.project):
            podman("rm", "-f", "-t", "0", name)
        podman("pod", "rm", "-f", f"pod_{self.project}")  # podman-compose's
        podman("network", "rm", "-f", f"{self.project}_default")
        remove_model_cache(self.project)
        shutil.rmtree(self.run_home, ignore_errors=True)


def test_cpu_stack_trains_one_step_and_cleans_up(tmp_path):
    stack = Stack(tmp_path, ONE_STEP)
    vllm_log = tmp_path / "vllm.log"
    orphan: dict[str, str] = {}
    followers: list[subprocess.Popen] = []
    try:
        vllm = stack.wait_for("vllm", timeout=300)
        followers.append(
            subprocess.Popen(
                ["podman", "logs", "-f", vllm], stdout=vllm_log.open("wb"), stderr=subprocess.STDOUT
            )
        )
        trainer = stack.wait_for("trainer", timeout=600)
        # A sandbox its trainer lost track of (e.g. a rank killed hard): the script must reap it by the
        # trainer container's hostname, which every sandbox it started carries as cua.owner_host.
        host = podman("inspect", "-f", "{{.Config.Hostname}}", trainer)
        orphan["name"] = f"cua-sb-orphan-{uuid.uuid4().hex[:6]}"
        podman(
            "run", "-d", "--name", orphan["name"], "--label", "cua.sandbox=1", "--label", f"cua.owner_host={host}",
            "localhost/cua-cpu-runtime:latest", "sleep", "900",
        )  # fmt: skip
        rc = stack.wait(timeout=600)
        elapsed = time.monotonic() - stack.started
        assert rc == 0, f"docker_train_areal.sh --cpu exited {rc}:\n{stack.tail()}"

        log = stack.log.read_text(errors="replace")
        assert log.index("vLLM healthy after") < log.index("starting the trainer"), (
            "the trainer started before vLLM was healthy"
        )
        assert "preflight passed (config configs/local_cpu.yaml" in log
        # the resource estimate and the compile check, in the trainer's image, before vLLM starts
        assert "GPU memory, one trainer rank, training" in log and "the config fits" in log
        assert "torch.compile runs a compiled function" in log, (
            "the preflight's compile check in the trainer image"
        )
        assert log.index("the config fits") < log.index("starting vLLM")
        exp = stack.outputs / "cua-local"
        assert "Train step 1/" in (exp / "logs" / "training.log").read_text(errors="replace")
        episodes = [json.loads(line) for line in (exp / "rollouts.jsonl").read_text().splitlines()]
        assert len(episodes) >= 2 and all(e["task_reward"] is not None and e["turns"] for e in episodes)
        # the weight update reached the server in the other container, from the shared outputs path
        served = vllm_log.read_text(errors="replace")
        assert '"POST /collective_rpc HTTP/1.1" 200' in served, "vLLM never reloaded weights"
        assert '"POST /update_weight_version HTTP/1.1" 200' in served
        trial = exp / "checkpoints" / "cua" / "cua-local" / "trial0" / "default"
        assert not list(trial.glob("weight_update_v*")), "weight-sync copies must be removed once loaded"

        # nothing left: stack containers, the orphan, sandboxes of this trainer, socket folders, processes
        assert project_containers(stack.project) == []
        assert podman("ps", "-a", "-q", "--filter", f"label=cua.owner_host={host}") == ""
        # No box's socket folder is left (run/ep-<endpoint>/cua-sb-<box>; the endpoint folder may stay).
        assert not list((stack.run_home / "sandbox" / "run").rglob("cua-sb-*"))
        assert left_in_session(stack.proc.pid) == []
        print(f"\nCPU stack under podman, one GRPO step: {elapsed:.0f}s ({len(episodes)} episodes)")
    finally:
        for f in followers:
            f.terminate()
            f.wait(10)
        if orphan:
            podman("rm", "-f", "-t", "0", orphan["name"])
        stack.remove_leftovers()


def test_ctrl_c_during_a_podman_command_stops_a_stack_started_with_sigint_ignored(tmp_path):
    """A fresh machine's `make test` ran the script with SIGINT ignored (started by a shell without job
    control): bash cannot trap a signal ignored at its start, and the stack trained on after Ctrl-C. The
    signal lands while the vLLM wait runs `podman healthcheck run`, a child that handles SIGINT itself."""
    stack = Stack(tmp_path, [], sigint_ignored=True)
    try:
        stack.wait_for("vllm", timeout=300)
        stack.wait_for_process("healthcheck run", timeout=60)
        os.killpg(stack.proc.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's foreground group
        rc = stack.wait(timeout=120)
        assert rc == 130, f"exit status {rc} after Ctrl-C:\n{stack.tail()}"
        log = stack.log.read_text()
        assert "stopping the stack" in log and "starting the trainer" not in log, stack.tail()
        assert stack.left() == []
    finally:
        stack.remove_leftovers()


def test_sigterm_during_training_then_ctrl_c_during_the_cleanup_stop_the_stack(tmp_path):
    """SIGTERM to the group (systemd, a scheduler) while the trainer trains (its first episodes in their
    boxes); then Ctrl-C after Ctrl-C while the script stops the stack: the trainer still gets its graceful
    stop (podman's own SIGINT handling once aborted `podman stop`, and the trainer was killed), and nothing
    is left half stopped, the boxes of the episodes in flight included."""
    stack = Stack(tmp_path, [*ONE_STEP, "total_train_steps=50"])
    training_log = stack.outputs / "cua-local" / "logs" / "training.log"
    try:
        # vLLM first: before it starts, the preflight's throwaway trainer container (`compose run`) also
        # has the trainer's labels, and the hostname of that one owns no box
        stack.wait_for("vllm", timeout=300)
        trainer = stack.wait_for("trainer", timeout=600)
        host = podman("inspect", "-f", "{{.Config.Hostname}}", trainer)
        # Training: the trainer's episodes have boxes (no need to wait for a whole step: ~45 s on 2 cores)
        deadline = time.monotonic() + 300
        while not podman("ps", "-q", "--filter", f"label=cua.owner_host={host}"):
            assert time.monotonic() < deadline and stack.proc.poll() is None, f"no episode:\n{stack.tail()}"
            time.sleep(0.5)
        stack.wait_for_process("podman inspect", timeout=60)  # the training loop's poll, a podman child
        os.killpg(stack.proc.pid, signal.SIGTERM)
        stack.wait_for_log("stopping the stack", timeout=30)
        deadline = time.monotonic() + 60
        while stack.proc.poll() is None and time.monotonic() < deadline:
            os.killpg(stack.proc.pid, signal.SIGINT)
            time.sleep(0.5)
        rc = stack.wait(timeout=300)
        assert rc == 143, f"exit status {rc} after SIGTERM:\n{stack.tail()}"
        log = stack.log.read_text(errors="replace")
        assert "trainer exited" not in log, "the trainer ran to its end"
        assert "Training stopped by SIGTERM after" in training_log.read_text(errors="replace"), (
            f"the trainer did not finish its graceful stop:\n{stack.tail()}"
        )
        assert stack.left(host) == []
    finally:
        stack.remove_leftovers()
