"""One backend over several endpoints (e.g. Docker/podman engines): the pool sees a single Backend.

- placement: a new box goes to the least-loaded endpoint; ties go to the first in this backend's own
  rotation of the list (random per process, so ranks sharing the endpoints do not all pick the first one);
  the pool's `max_size` bounds the total
- load of an endpoint: the boxes of other processes its engine runs (label cua.sandbox=1, another run id;
  listed at most once a second, in a worker thread, so a warm-up of many starts lists it once) + this
  process's boxes there + its starts in flight there (both exact)
- an endpoint that fails (cannot connect, start or list) is skipped for a while (exponential backoff,
  logged); only when every endpoint is backing off are they tried anyway, soonest-due first
- a box is removed by the endpoint that started it; listing and reaping cover every endpoint and skip
  (and log) the ones that do not answer, so cleanup of the others still happens; they raise only when no
  endpoint answers (as a single backend does when its engine is down)
- endpoints are connected lazily: a dead one never fails construction
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sandbox.base import LABEL, Backend, BoxState, Sandbox, SandboxSpec
from sandbox.errors import SandboxError, SandboxStartError

log = logging.getLogger(__name__)

ENDED = frozenset({"exited", "dead", "stopped", "removing"})  # engine states of boxes that hold nothing


class MultiBackend(Backend):
    def __init__(
        self,
        endpoints: Sequence[str],
        connect: Callable[[str, str], Backend],
        *,
        name: str,
        run_id: str | None = None,
        backoff_s: float = 5.0,
        max_backoff_s: float = 120.0,
        listing_ttl_s: float = 1.0,
        tie_start: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`connect(endpoint, run_id)` builds the backend of one endpoint (all share this run id).
        `listing_ttl_s`: how old the engines' listing of other processes' boxes may be. `tie_start`: the
        index in `endpoints` that ties start from (None: a random one)."""
        super().__init__(run_id)
        if len(set(endpoints)) != len(endpoints) or not endpoints:
            raise ValueError(f"need distinct endpoints, got {list(endpoints)}")
        self.name, self.endpoints = name, list(endpoints)
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.listing_ttl_s = listing_ttl_s
        first = random.randrange(len(self.endpoints)) if tie_start is None else tie_start
        self._tie_rank = {ep: (i - first) % len(self.endpoints) for i, ep in enumerate(self.endpoints)}
        self._connect, self._clock = connect, clock
        self._backends: dict[str, Backend] = {}
        self._mine: dict[str, str] = {}  # box id -> endpoint, for the boxes this process started
        self._others = dict.fromkeys(self.endpoints, 0)  # other processes' live boxes, as last listed
        self._listed_at: float | None = None
        self._listing = threading.Lock()  # one listing at a time; concurrent starts reuse its result
        self._starting = dict.fromkeys(self.endpoints, 0)
        self._failures = dict.fromkeys(self.endpoints, 0)
        self._down_until = dict.fromkeys(self.endpoints, 0.0)
        self._lock = threading.Lock()  # removal runs in worker threads and exit handlers

    # -- endpoint state ------------------------------------------------------------------------------
    def backend(self, endpoint: str) -> Backend:
        """The endpoint's backend, connected on first use (raises if it cannot connect)."""
        with self._lock:
            b = self._backends.get(endpoint)
        if b is None:
            b = self._connect(endpoint, self.run_id)
            with self._lock:
                b = self._backends.setdefault(endpoint, b)
        if self.creating_stopped:  # made after the run's last resort began
            b.stop_creating(0)
        return b

    def made_backends(self) -> list[Backend]:
        with self._lock:
            return list(self._backends.values())

    def loads(self) -> dict[str, int]:
        """Boxes per endpoint: other processes' (listed now unless the last listing is fresh), this
        process's, and its starts in flight. Blocking."""
        self._list_others()
        return self._loads()

    def _loads(self) -> dict[str, int]:
        with self._lock:
            counts = {ep: self._others[ep] + self._starting[ep] for ep in self.endpoints}
            for ep in self._mine.values():
                counts[ep] += 1
        return counts

    def _listing_fresh(self) -> bool:
        return self._listed_at is not None and self._clock() - self._listed_at < self.listing_ttl_s

    def _list_others(self) -> None:
        """Count the live boxes of other processes on each answering endpoint, unless the last count is
        fresh. Blocking (engine calls): run it in a worker thread."""
        # A listing under way (e.g. an engine slow to answer) holds up no start that has an older count.
        if not self._listing.acquire(blocking=self._listed_at is None):
            return
        try:
            if self._listing_fresh():
                return
            now = self._clock()
            others = dict(self._others)  # an endpoint that is not asked keeps its last count
            for ep in self.endpoints:
                if self._down_until[ep] > now:
                    continue  # backing off: it takes no box anyway, and may hang
                try:
                    boxes = self.backend(ep).list_boxes()
                except Exception as exc:  # a start there fails too, and backs it off: nothing to add here
                    log.debug("sandbox endpoint %s: listing its boxes for the load failed: %r", ep, exc)
                    continue
                others[ep] = sum(
                    b["labels"].get(LABEL) == "1"
                    and b["labels"].get("cua.run_id") != self.run_id
                    and b.get("status") not in ENDED
                    for b in boxes
                )
            with self._lock:
                self._others, self._listed_at = others, now
        finally:
            self._listing.release()

    async def _order(self) -> list[str]:
        if not self._listing_fresh():
            await asyncio.to_thread(self._list_others)
        now, loads = self._clock(), self._loads()
        up = [ep for ep in self.endpoints if self._down_until[ep] <= now]
        if up:
            return sorted(up, key=lambda ep: (loads[ep], self._tie_rank[ep]))
        return sorted(self.endpoints, key=lambda ep: self._down_until[ep])

    def _failed(self, endpoint: str, what: str, exc: BaseException) -> None:
        with self._lock:
            self._failures[endpoint] += 1
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** (self._failures[endpoint] - 1))
            self._down_until[endpoint] = self._clock() + delay
        log.warning("sandbox endpoint %s: %s failed (%r); skipping it for %.1f s", endpoint, what, exc, delay)

    def _ok(self, endpoint: str) -> None:
        with self._lock:
            self._failures[endpoint], self._down_until[endpoint] = 0, 0.0

    # -- Backend -----------------------------------------------------------------------------------
    async def start(self, spec: SandboxSpec) -> Sandbox:
        errors = []
        for ep in await self._order():
            with self._lock:
                self._starting[ep] += 1  # counted from now on, so concurrent starts spread out
            try:
                backend = await asyncio.to_thread(self.backend, ep)
                sb = await backend.start(spec)
            except Exception as exc:  # any failure of this endpoint: try the next one
                self._failed(ep, "start", exc)
                errors.append(f"{ep}: {exc}")
                continue
            finally:
                with self._lock:
                    self._starting[ep] -= 1
            with self._lock:
                self._mine[sb.id] = ep
            self._ok(ep)
            # Stopped through this backend (Backend.stop -> remove_sync), which routes to `ep`.
            sb.backend = self
            sb.meta["endpoint"] = ep
            return sb
        raise SandboxStartError("no endpoint could start a sandbox: " + "; ".join(errors))

    def state(self, box_id: str) -> BoxState | None:
        with self._lock:
            ep = self._mine.get(box_id)
        return None if ep is None else self.backend(ep).state(box_id)

    def remove_sync(self, box_id: str) -> None:
        with self._lock:
            ep = self._mine.get(box_id)
        if ep is not None:
            try:
                self.backend(ep).remove_sync(box_id)
            finally:  # a failure is the caller's to report; the box no longer counts as load here
                with self._lock:
                    self._mine.pop(box_id, None)
            return
        for ep in self.endpoints:  # e.g. a start cut short, found by label: look everywhere (no-op if absent)
            try:
                self.backend(ep).remove_sync(box_id)
            except Exception as exc:
                self._failed(ep, f"removing {box_id}", exc)

    def _on_each(self, what: str, call: Callable[[Backend], Any]) -> list[tuple[str, Any]]:
        """`call` on every endpoint; one that fails is logged and skipped. Raises only if all fail (like a
        single backend whose engine is down), so a caller can still tell "nothing reachable"."""
        done, errors = [], []
        for ep in self.endpoints:
            try:
                done.append((ep, call(self.backend(ep))))
            except Exception as exc:
                self._failed(ep, what, exc)
                errors.append(f"{ep}: {exc}")
        if errors and not done:
            raise SandboxError(f"{what}: no endpoint answered: " + "; ".join(errors))
        return done

    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Boxes of every answering endpoint, each with its `endpoint`."""
        found = self._on_each("listing boxes", lambda b: b.list_boxes(run_id))
        return [{**box, "endpoint": ep} for ep, boxes in found for box in boxes]

    def reap(self, all_boxes: bool = False) -> list[str]:
        return [
            box for _, removed in self._on_each("reaping", lambda b: b.reap(all_boxes)) for box in removed
        ]

    def close(self) -> None:
        for b in self._backends.values():
            close = getattr(b, "close", None)
            if close is not None:
                close()
