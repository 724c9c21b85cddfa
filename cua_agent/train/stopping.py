"""The stop of a training run by SIGINT/SIGTERM (see CUATrainer.request_stop)."""

from __future__ import annotations

import signal


class StopTraining(BaseException):
    """SIGINT/SIGTERM: the run stops at a consistent point (between steps, or abandoning a rollout).
    A BaseException, like KeyboardInterrupt, so no `except Exception` on the way swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


class RunAborted(BaseException):
    """The rollouts cannot go on (e.g. every episode fails for infrastructure reasons): the trainer stops at
    once with this reason (raised in the main thread by the stop-signal handler, see CUATrainer)."""
