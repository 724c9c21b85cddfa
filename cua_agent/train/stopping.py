"""The stop of a training run by SIGINT/SIGTERM (see CUATrainer.request_stop), its abort, and how the
trainer ranks agree on either."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from areal.utils import logging

log = logging.getLogger("StopDeadline")


class StopTraining(BaseException):
    """SIGINT/SIGTERM: the run stops at a consistent point (between steps, or abandoning a rollout).
    A BaseException, like KeyboardInterrupt, so no `except Exception` on the way swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


class RunAborted(BaseException):
    """The rollouts cannot go on (e.g. every episode fails for infrastructure reasons): the trainer stops at
    once with this reason (raised in the main thread by the stop-signal handler, see CUATrainer)."""


def gather(obj: Any, ranks: Any) -> list[Any]:
    """Every trainer rank's `obj`, in rank order, on every rank (`ranks`: their CPU process group; None or
    one rank: just this one). Collective: every rank must call it at the same point."""
    if ranks is None or not dist.is_initialized() or dist.get_world_size(ranks) == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size(ranks)
    dist.all_gather_object(out, obj, group=ranks)
    return out


def agree(stop: int | None, fatal: BaseException | None, ranks: Any) -> None:
    """Raise the same on every rank: RunAborted if any rank aborts, else StopTraining if any rank was asked
    to stop (a signal may reach the ranks at different moments, or only some of them). Collective."""
    decide(gather((stop, None if fatal is None else str(fatal)), ranks))


def decide(states: list[tuple[int | None, str | None]]) -> None:
    """`agree`'s decision from every rank's (stop signal, abort reason)."""
    reasons = [f"rank {r}: {why}" if len(states) > 1 else why for r, (_, why) in enumerate(states) if why]
    if reasons:
        raise RunAborted("; ".join(reasons))
    signals = [s for s, _ in states if s is not None]
    if signals:
        raise StopTraining(signals[0])


class StopDeadline:
    """checkpoint.stop_timeout_s, counted from the first stop signal: the step's update, its checkpoint and
    the shutdown must fit in it. Past it (or at `expire`), the process removes its own sandboxes and exits
    with `exit_code`; the last committed checkpoint stands."""

    REPEAT_S = 2.0  # torchrun forwards the terminal's Ctrl-C that every rank also got: the same stop

    def __init__(self, timeout_s: float, cleanup: Callable[[], Any], exit_code: int):
        self.timeout_s, self.cleanup, self.exit_code = timeout_s, cleanup, exit_code
        self.since = time.monotonic()
        self._timer = threading.Timer(timeout_s, self.expire, args=(f"took over {timeout_s:.0f}s",))
        self._timer.daemon = True

    def start(self) -> StopDeadline:
        self.since = time.monotonic()
        self._timer.start()
        return self

    def repeated(self) -> bool:
        """Whether a signal now is a second request (Ctrl-C again), not the first one arriving twice."""
        return time.monotonic() - self.since > self.REPEAT_S

    def cancel(self) -> None:
        self._timer.cancel()

    def expire(self, why: str) -> None:
        log.error(f"Shutdown {why} (checkpoint.stop_timeout_s={self.timeout_s:.0f}s): abandoning episodes")
        try:
            self.cleanup()
        finally:
            os._exit(self.exit_code)


def stop_with_launcher() -> None:
    """Under torchrun (TORCHELASTIC_RUN_ID set), have the kernel send this rank SIGTERM when its launcher
    dies. torchrun starts each rank in a session of its own and kills it only while it lives itself: a
    torchrun that was killed (kill -9, the OOM killer) left its ranks training on, with their sandboxes. The
    SIGTERM gives them their usual graceful stop. Linux only (prctl); a no-op elsewhere."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the launcher died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)
