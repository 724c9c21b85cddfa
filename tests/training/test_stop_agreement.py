"""A stop or an abort with several trainer ranks (train/stopping.py `agree`, train/rollouts.py
TrainingEngine.prepare_batch, CUATrainer.on_signal), in two real processes over gloo. Rank 0 already has its
share of the step's batch; rank 1 is still waiting for its episodes, and only rank 1 is told (a signal to
one process, or its rollouts giving up). Before, the waiting rank left at once for its collective stop-time
checkpoint while rank 0 went on into the collective that spreads the batch's rows over the ranks: the two
sat in different collectives (a deadlock; an abort on one rank left the others there for the process
group's 2 h timeout). Now both ranks raise the same from prepare_batch, and the checkpoint's collective
that follows completes on both."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from areal.api.cli_args import InferenceEngineConfig

from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.local_server import free_port
from cua_agent.train.rollouts import TrainingEngine
from cua_agent.train.stopping import RunAborted, StopTraining
from cua_agent.train.trainer import CUATrainer

EPISODES_S = 60.0  # how long rank 1's episodes would take
DEADLINE_S = 30.0  # the ranks must have stopped together well before, counted from both being ready
STARTUP_S = 300.0  # spawning both and importing AReaL: ~15 s alone on 2 cores, more beside other tests


class EpisodesOfThisRank(StockVLLMEngine):
    """AReaL's wait for this rank's share of the batch: done at once on rank 0, EPISODES_S on rank 1
    (polling, as AReaL's wait does, so a signal handler runs meanwhile)."""

    def prepare_batch(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        deadline = time.monotonic() + (EPISODES_S if dist.get_rank() == 1 else 0)
        while time.monotonic() < deadline:
            time.sleep(0.05)
        return [{"rank": dist.get_rank()}]


class Engine(TrainingEngine, EpisodesOfThisRank):  # TrainingEngine's super() is EpisodesOfThisRank
    pass


def trainer_of(engine: TrainingEngine) -> Any:
    """The trainer's side of a stop that CUATrainer.on_signal/request_stop use, without an FSDP actor."""
    trainer = SimpleNamespace(
        rollout=engine,
        config=SimpleNamespace(checkpoint=SimpleNamespace(stop_timeout_s=300.0)),
        stop_signal=None,
        stop_deadline=None,
        _abort_seen=False,
        _in_eval=False,
        _remove_own_sandboxes=lambda: None,
    )
    trainer.request_stop = lambda signum: CUATrainer.request_stop(trainer, signum)
    return trainer


def worker(rank: int, port: int, event: str, results: Any, ready: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    engine = Engine(InferenceEngineConfig(experiment_name="t", trial_name="t"))
    engine.ranks = dist.group.WORLD
    trainer = trainer_of(engine)
    for sig in (signal.SIGTERM, signal.SIGINT):  # as train/job.py installs it
        signal.signal(sig, lambda signum, frame: CUATrainer.on_signal(trainer, signum))
    ready.append(rank)
    if rank == 1:
        tell = {
            "stop": lambda: os.kill(os.getpid(), signal.SIGTERM),
            "abort": lambda: engine.abort_run("boxes gone"),
        }
        threading.Timer(1.0, tell[event]).start()
    start = time.monotonic()
    try:
        batch = engine.prepare_batch(None, None)
        dist.all_gather_object([None, None], batch)  # AReaL's redistribution of the batch's rows
        outcome = "trained"
    except StopTraining as stop:
        dist.barrier()  # the stop-time checkpoint's collective
        outcome = f"stopped by {signal.Signals(stop.signum).name}"
    except RunAborted as abort:
        dist.barrier()
        outcome = f"aborted: {abort}"
    results[rank] = (outcome, time.monotonic() - start)
    if trainer.stop_deadline is not None:
        trainer.stop_deadline.cancel()
    dist.destroy_process_group()


def both_ranks(event: str) -> dict[int, tuple[str, float]]:
    with mp.Manager() as manager:
        results, ready = manager.dict(), manager.list()
        ctx = mp.spawn(worker, args=(free_port(), event, results, ready), nprocs=2, join=False)
        started, deadline = False, time.monotonic() + STARTUP_S
        while not ctx.join(timeout=1):
            if not started and len(ready) == 2:
                started, deadline = True, time.monotonic() + DEADLINE_S
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                what = (
                    f"stop together within {DEADLINE_S:.0f}s" if started else f"start within {STARTUP_S:.0f}s"
                )
                pytest.fail(f"the ranks did not {what}: {dict(results)}")
        return dict(results)


def test_a_signal_to_the_rank_still_waiting_stops_both_ranks_at_the_same_point():
    results = both_ranks("stop")
    assert [results[r][0] for r in (0, 1)] == ["stopped by SIGTERM"] * 2, results
    assert max(t for _, t in results.values()) < EPISODES_S / 2, "the waiting rank's episodes were abandoned"


def test_an_abort_on_one_rank_aborts_both_naming_the_rank():
    results = both_ranks("abort")
    assert [results[r][0] for r in (0, 1)] == ["aborted: rank 1: boxes gone"] * 2, results


def slow_stop(out: str) -> None:
    """A rank asked to stop during its update, whose update and checkpoint would take 30 s."""
    engine = Engine(InferenceEngineConfig(experiment_name="t", trial_name="t"))
    trainer = trainer_of(engine)
    trainer.config.checkpoint.stop_timeout_s = 2.0
    signalled = time.monotonic()
    trainer._remove_own_sandboxes = lambda: Path(out).write_text(f"{time.monotonic() - signalled:.2f}")
    signal.signal(signal.SIGTERM, lambda signum, frame: CUATrainer.on_signal(trainer, signum))
    os.kill(os.getpid(), signal.SIGTERM)  # not waiting for episodes: the step goes on
    time.sleep(30)  # the rest of the step, its checkpoint, the shutdown


def test_the_stop_deadline_counts_from_the_signal_and_bounds_the_checkpoint_too(tmp_path):
    """checkpoint.stop_timeout_s started only after the stop-time checkpoint: a save that hung held the
    process for ever. Now it counts from the signal; past it the process removes its sandboxes and exits."""
    out = tmp_path / "cleanup"
    proc = mp.get_context("spawn").Process(target=slow_stop, args=(str(out),))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 128 + signal.SIGTERM, proc.exitcode
    after = float(out.read_text())  # seconds from the signal to the removal of the sandboxes
    assert 2.0 <= after < 10.0, after
