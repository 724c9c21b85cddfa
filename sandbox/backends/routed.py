"""One pool over several backends: each box starts where its spec says (`SandboxSpec.backend`, a task row's
`sandbox.backend`), else on the run's default backend. So one run can keep MiniWoB on docker and put a
task family on GBox; the pool does not know.

- backends are made on first use (`make(name, run_id)`), all with the run's id, so labels, listing and
  the exit cleanup by run id cover every box the run started; the default one too: constructing the
  router connects nothing (it is built on the rollout loop, and a backend's construction may block: docker-py
  asks the engine for its version, GBox imports its SDK). A start makes its backend in a worker thread;
  listing and reaping (blocking calls, run in threads) make the default first, so an unreachable default
  still fails them
- a box is removed by the backend that started or listed it
- listing and reaping cover the default backend and every backend in use; one that does not answer is
  logged and skipped, so the others are still cleaned (orphans of a backend this run never used are
  `scripts/reap_sandboxes.py`'s, and a GBox box's `expiresIn` ends it anyway)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from sandbox.base import Backend, Sandbox, SandboxSpec

log = logging.getLogger(__name__)


class RoutedBackend(Backend):
    name = "routed"

    def __init__(self, default: str, make: Callable[[str, str], Backend], run_id: str | None = None) -> None:
        super().__init__(run_id)
        self.default, self._make = default, make
        self._backends: dict[str, Backend] = {}
        self._owner: dict[str, str] = {}  # box id -> backend name
        self._lock = threading.Lock()  # removal runs in worker threads and exit handlers

    def backend(self, name: str | None = None) -> Backend:
        """The named backend (default: the run's), made on first use. Blocking the first time."""
        name = name or self.default
        with self._lock:
            b = self._backends.get(name)
        if b is None:
            b = self._make(name, self.run_id)
            with self._lock:
                b = self._backends.setdefault(name, b)
        if self.creating_stopped:  # made after the run's last resort began
            b.stop_creating(0)
        return b

    def made_backends(self) -> list[Backend]:
        with self._lock:
            return list(self._backends.values())

    async def start(self, spec: SandboxSpec) -> Sandbox:
        name = spec.backend or self.default
        with self._lock:
            backend = self._backends.get(name)
        if backend is None:
            backend = await asyncio.to_thread(self.backend, name)
        sb = await backend.start(spec)  # sb.backend is that backend: Sandbox.close goes there
        with self._lock:
            self._owner[sb.id] = name
        return sb

    async def stop(self, sb: Sandbox) -> None:
        with self._lock:
            self._owner.pop(sb.id, None)
        await sb.backend.stop(sb)

    def remove_sync(self, box_id: str) -> None:
        with self._lock:
            name = self._owner.pop(box_id, self.default)
        self.backend(name).remove_sync(box_id)

    def _on_each(self, what: str, fn: Callable[[Backend], list[Any]]) -> list[tuple[str, list[Any]]]:
        """fn on every backend in use; one that fails is skipped (logged), except the default (made here if
        it is not yet: a dead one fails the run's preflight)."""
        backends = {self.default: self.backend(self.default)}  # first, as when it was made at once
        with self._lock:
            backends.update(self._backends)
        done = []
        for name, b in backends.items():
            try:
                done.append((name, fn(b)))
            except Exception as exc:
                if name == self.default:
                    raise  # as a single backend would: its engine is down
                log.warning("%s the boxes on %s failed, skipped: %s", what, name, exc)
        return done

    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        out = []
        for name, boxes in self._on_each("listing", lambda b: b.list_boxes(run_id)):
            with self._lock:
                self._owner.update((box["id"], name) for box in boxes)
            out += [{**box, "backend": name} for box in boxes]
        return out

    def reap(self, all_boxes: bool = False) -> list[str]:
        # Each backend's own reap: the docker backend's also removes stale socket folders.
        return [
            box for _, removed in self._on_each("reaping", lambda b: b.reap(all_boxes)) for box in removed
        ]

    def close(self) -> None:
        for b in list(self._backends.values()):
            close = getattr(b, "close", None)
            if close is not None:
                close()
