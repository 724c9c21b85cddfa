"""A pool of sandboxes that never leaks.

- boxes of several specs (a browser task's, a desktop task's, a task with its own image) share one pool:
  `acquire(spec)` hands out an idle box of that spec or starts one (default: the pool's spec)
- at most `max_size` boxes exist at once (idle + busy + starting), whatever their specs; when the pool is
  full, idle boxes of other specs are stopped to make room, else `acquire` waits for a free one
- `warm` boxes (of the pool's spec) are started up front (optionally with a warm-up task so chromium is
  already running) and handed out again after `release`; the episode's own `/task/reset` resets them
- every acquire health-checks the box it hands out; a dead one is replaced
- starts are retried with backoff; an acquire that times out never orphans the box it was starting
- reaper: `start()` removes boxes of runs whose owner process is gone; SIGINT/SIGTERM/exit remove this
  run's boxes by label query (so even boxes still being created are found)
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from sandbox.base import Backend, Sandbox, SandboxSpec
from sandbox.errors import SandboxError, SandboxRequestError, SandboxStartError, SandboxTimeout

log = logging.getLogger(__name__)

# Backends with boxes to remove at exit or on a fatal signal, and the handlers we replaced.
_LIVE: dict[int, Backend] = {}
_PREV_HANDLERS: dict[int, Any] = {}
_HOOKS_LOCK = threading.Lock()


def _cleanup_all() -> None:
    for backend in list(_LIVE.values()):
        try:
            for box in backend.list_boxes(run_id=backend.run_id):
                backend.remove_sync(box["id"])
        except Exception as exc:  # keep going: other backends still need cleaning
            log.warning("sandbox cleanup of run %s failed: %s", backend.run_id, exc)
    _LIVE.clear()


def _on_signal(signum: int, frame: Any) -> None:
    _cleanup_all()
    prev = _PREV_HANDLERS.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_ATEXIT_REGISTERED = False


def _install_hooks() -> None:
    """The exit hook from any thread (pools often start in a worker thread's event loop, e.g. AReaL's
    rollout thread); signal handlers only from the main thread, the only place Python allows them, and only
    for a signal that still has Python's default handling. A host program with handlers of its own (the
    trainer's stop: it finishes a step and removes its boxes itself), or that starts its pool off the main
    thread, keeps its own signal handling: on SIGINT/SIGTERM it must exit normally (raise) so the exit hook
    runs."""
    global _ATEXIT_REGISTERED
    with _HOOKS_LOCK:
        if not _ATEXIT_REGISTERED:
            atexit.register(_cleanup_all)
            _ATEXIT_REGISTERED = True
        if _PREV_HANDLERS or threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            current = signal.getsignal(sig)
            if current in (signal.SIG_DFL, signal.default_int_handler):
                _PREV_HANDLERS[sig] = current
                signal.signal(sig, _on_signal)


class SandboxPool:
    def __init__(
        self,
        backend: Backend,
        spec: SandboxSpec | None = None,
        *,
        max_size: int = 4,
        warm: int = 0,
        warmup_task: str | None = None,
        start_retries: int = 2,
        acquire_timeout: float = 300.0,
        health_timeout: float = 5.0,
        recycle_after: int = 500,
        reap_orphans: bool = True,
        install_handlers: bool = True,
    ) -> None:
        if max_size < 1 or not 0 <= warm <= max_size:
            raise ValueError("need max_size >= 1 and 0 <= warm <= max_size")
        self.backend, self.spec = backend, spec or SandboxSpec()  # the default spec: warm boxes, acquire()
        self.max_size, self.warm, self.warmup_task = max_size, warm, warmup_task
        self.start_retries, self.acquire_timeout = start_retries, acquire_timeout
        self.health_timeout, self.recycle_after = health_timeout, recycle_after
        self.reap_orphans, self.install_handlers = reap_orphans, install_handlers
        self._idle: deque[Sandbox] = deque()
        self._busy: dict[str, Sandbox] = {}
        self._count = 0  # boxes that exist or are being started
        self._cond = asyncio.Condition()
        self._closed = False
        self._bg: set[asyncio.Future] = set()
        self.stats = {
            "started": 0,
            "start_failures": 0,
            "replaced_unhealthy": 0,
            "reaped": 0,
            "stopped_for_other_spec": 0,
        }

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> SandboxPool:
        if self.reap_orphans:
            reaped = await asyncio.to_thread(self.backend.reap)
            self.stats["reaped"] = len(reaped)
            if reaped:
                log.info("reaped %d orphaned sandboxes: %s", len(reaped), ", ".join(reaped))
        _LIVE[id(self.backend)] = self.backend
        if self.install_handlers:
            _install_hooks()
        if self.warm:
            boxes = await asyncio.gather(*(self._reserve_and_start(self.spec) for _ in range(self.warm)))
            async with self._cond:
                self._idle.extend(boxes)
                self._cond.notify_all()
        return self

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        boxes = list(self._idle) + list(self._busy.values())
        self._idle.clear()
        self._busy.clear()
        await asyncio.gather(*(self._destroy(sb) for sb in boxes), return_exceptions=True)
        # Anything still labelled with this run (e.g. a start cut short) goes too.
        await asyncio.to_thread(self._remove_run_boxes)
        _LIVE.pop(id(self.backend), None)

    def _remove_run_boxes(self) -> None:
        for box in self.backend.list_boxes(run_id=self.backend.run_id):
            self.backend.remove_sync(box["id"])

    # -- starting ----------------------------------------------------------------------------------
    async def _start_with_retries(self, spec: SandboxSpec) -> Sandbox:
        last: Exception | None = None
        for attempt in range(1 + self.start_retries):
            try:
                sb = await self.backend.start(spec)
                if self.warmup_task:
                    await sb.reset(self.warmup_task, 0)
                    sb.episodes, sb.reusable = 0, True  # the host's own reset: no agent acted
                self.stats["started"] += 1
                return sb
            except (SandboxError, OSError) as exc:
                last = exc
                self.stats["start_failures"] += 1
                log.warning("sandbox start failed (attempt %d): %s", attempt + 1, exc)
                await asyncio.sleep(0.5 * 2**attempt)
            except Exception as exc:  # docker API errors and the like
                last = exc
                self.stats["start_failures"] += 1
                log.warning("sandbox start failed (attempt %d): %r", attempt + 1, exc)
                await asyncio.sleep(0.5 * 2**attempt)
        raise SandboxStartError(f"could not start a sandbox after {1 + self.start_retries} attempts: {last}")

    async def _reserve_and_start(self, spec: SandboxSpec) -> Sandbox:
        self._count += 1
        try:
            return await self._start_with_retries(spec)
        except BaseException:
            self._count -= 1
            raise

    def _adopt_late(self, task: asyncio.Task) -> None:
        """A start whose acquirer gave up: keep the box for the next acquirer instead of leaking it."""

        async def settle() -> None:
            failed = task.cancelled() or task.exception() is not None
            if not failed and self._closed:
                await self._destroy(task.result())
                return
            async with self._cond:
                if failed:
                    self._count -= 1
                else:
                    self._idle.append(task.result())
                self._cond.notify_all()

        bg = asyncio.ensure_future(settle())
        self._bg.add(bg)
        bg.add_done_callback(self._bg.discard)

    # -- acquire / release ---------------------------------------------------------------------------
    async def acquire(self, spec: SandboxSpec | None = None, *, timeout: float | None = None) -> Sandbox:
        """A healthy box of `spec` (default: the pool's spec): an idle one, else a new one."""
        if self._closed:
            raise SandboxError("pool is closed")
        if spec is not None and not isinstance(spec, SandboxSpec):  # e.g. a timeout passed positionally
            raise TypeError(f"acquire(spec, *, timeout=...): spec must be a SandboxSpec, got {spec!r}")
        try:
            async with asyncio.timeout(timeout if timeout is not None else self.acquire_timeout):
                return await self._acquire(spec or self.spec)
        except TimeoutError:
            raise SandboxTimeout(
                f"no sandbox within {timeout or self.acquire_timeout:.0f} s "
                f"({len(self._busy)} busy of max {self.max_size})"
            ) from None

    def _take_idle(self, spec: SandboxSpec) -> Sandbox | None:
        """The idle box of `spec` that waited longest, removed from the idle queue."""
        for i, sb in enumerate(self._idle):
            if sb.spec == spec:
                del self._idle[i]
                return sb
        return None

    async def _acquire(self, spec: SandboxSpec) -> Sandbox:
        while True:
            other: Sandbox | None = None
            async with self._cond:
                while (sb := self._take_idle(spec)) is None and self._count >= self.max_size:
                    if self._idle:  # full, but idle boxes of other specs: stop the longest idle one
                        other = self._idle.popleft()
                        break
                    await self._cond.wait()
                if sb is None and other is None:
                    self._count += 1
            if other is not None:
                self.stats["stopped_for_other_spec"] += 1
                # Shielded: a timed-out acquire still frees the slot. The freed slot goes to whichever
                # acquirer gets the lock first (this one, or a waiter of any spec): no slot is lost either way.
                await asyncio.shield(self._destroy(other))
                continue
            if sb is not None:
                try:
                    await sb.health(timeout=self.health_timeout)
                except SandboxError as exc:
                    log.warning("sandbox %s unhealthy, replacing: %s", sb.id, exc)
                    self.stats["replaced_unhealthy"] += 1
                    await self._destroy(sb)
                    continue
                self._busy[sb.id] = sb
                return sb
            task = asyncio.ensure_future(self._start_with_retries(spec))
            try:
                sb = await asyncio.shield(task)
            except asyncio.CancelledError:
                task.add_done_callback(self._adopt_late)
                raise
            except BaseException:
                async with self._cond:
                    self._count -= 1
                    self._cond.notify_all()
                raise
            self._busy[sb.id] = sb
            return sb

    async def release(self, sb: Sandbox, broken: bool = False) -> None:
        self._busy.pop(sb.id, None)
        if broken or not sb.reusable or self._closed or sb.episodes >= self.recycle_after:
            await self._destroy(sb)
            return
        async with self._cond:
            self._idle.append(sb)
            self._cond.notify_all()

    async def _destroy(self, sb: Sandbox) -> None:
        try:
            await sb.close()
        except Exception as exc:
            log.warning("removing sandbox %s failed: %s", sb.id, exc)
        finally:
            async with self._cond:
                self._count -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def sandbox(
        self, spec: SandboxSpec | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[Sandbox]:
        """`async with pool.sandbox(spec) as sb:` — released in all cases; a failed box is replaced."""
        sb = await self.acquire(spec, timeout=timeout)
        broken = False
        try:
            yield sb
        except SandboxError as exc:
            broken = not isinstance(exc, SandboxRequestError)
            raise
        finally:
            await self.release(sb, broken=broken)

    @property
    def size(self) -> dict[str, int]:
        return {"idle": len(self._idle), "busy": len(self._busy), "total": self._count}
