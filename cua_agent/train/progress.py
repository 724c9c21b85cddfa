"""A line every `every_s` seconds while a training step waits for its episodes: how many have finished since
the last step out of what a step trains, the groups filtered or rejected meanwhile, the time waited. Plain
lines, so a terminal and a CI log read the same; a step shorter than `every_s` prints nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class StepProgress:
    def __init__(
        self,
        totals: Callable[[], dict[str, float]],  # cumulative counters: episodes, groups_filtered, ...
        episodes_per_step: int,
        log: Callable[[str], None],
        every_s: float = 30.0,
        first_step: int = 1,  # a resumed run's: the one after its checkpoint's
    ):
        self.totals, self.episodes_per_step, self.log, self.every_s = totals, episodes_per_step, log, every_s
        self.step = first_step
        self._base = dict(totals())
        self._since = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="step-progress", daemon=True)

    def start(self) -> StepProgress:
        self._thread.start()
        return self

    def step_done(self, global_step: int) -> None:
        """The step `global_step` (from 0) was recorded: count the next one from here."""
        with self._lock:
            self.step = global_step + 2
            self._base = dict(self.totals())
            self._since = time.monotonic()

    def line(self) -> str:
        with self._lock:
            now = self.totals()
            done = {k: int(now.get(k, 0) - self._base.get(k, 0)) for k in now}
            step, waited = self.step, time.monotonic() - self._since
        extra = [
            f"{done[k]} {what}"
            for k, what in (
                ("groups_filtered", "group(s) filtered (equal rewards)"),
                ("groups_rejected", "group(s) rejected"),
                ("groups_failed", "group(s) failed (workflow errors)"),
                ("infra_failures", "episode(s) lost to infrastructure"),
            )
            if done.get(k)
        ]
        return (
            f"Step {step}: {done.get('episodes', 0)} episodes finished of {self.episodes_per_step} a step"
            + "".join(f", {e}" for e in extra)
            + f" ({waited:.0f}s)"
        )

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            with self._lock:
                due = time.monotonic() - self._since >= self.every_s
            if not due:
                continue
            try:
                line = self.line()
            except RuntimeError:  # a counter dict grew while read (rollout thread): next tick
                continue
            self.log(line)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
