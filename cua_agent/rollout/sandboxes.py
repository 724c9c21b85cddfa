"""The rollouts' sandboxes over a run: one pool, created in the event loop that runs the episodes (AReaL's
rollout thread), a preflight that names an unreachable backend before anything slow starts, and a last
resort that removes this process's boxes when an orderly shutdown did not finish.

Repository boxes (terminal agent) are started per episode from the task's own image (in about 0.2 s, so
none is kept warm) on the run's first Docker endpoint (`sandbox.backend: ray`: on a machine of the Ray
cluster with a free slot, driven through an actor there), at most `sandbox.max_concurrency` at once beside
the pool's desktops; each episode's tests run in one more, fresh box (scoring boxes: as many again at
most, and never waiting on an episode's slot, which the episode holds while it is scored)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sandbox.backends import make_backend
from sandbox.backends.ray_hosts import repo_box_on_ray
from sandbox.backends.routed import RoutedBackend
from sandbox.base import Backend, SandboxSpec, made_by_this_process
from sandbox.errors import SandboxError
from sandbox.pool import SandboxPool
from sandbox.repo.box import RepoBox, RepoSpec, repo_box


class RolloutSandboxes:
    def __init__(self, config: Any):
        """`config`: the run's `sandbox` section (SandboxConfig)."""
        self.config = config
        self.spec = SandboxSpec(
            image=config.image
        )  # the run's defaults; a row's `sandbox` block overrides them
        self._pool: SandboxPool | None = None
        self._pool_backend: Backend | None = None  # made before the pool starts, so its boxes are found
        self._lock: asyncio.Lock | None = None
        self._repo_backend: Any = None  # a DockerBackend, made on the first repository box
        self._slots: dict[str, asyncio.Semaphore] = {}  # "repo": episodes' boxes, "scoring": their tests'

    def spec_for(self, row: dict[str, Any]) -> SandboxSpec:
        """The box a task row needs: its `sandbox` block (backend, image, resources) over the run's defaults."""
        return SandboxSpec.from_dict(row.get("sandbox"), base=self.spec)

    def _backend(self) -> Backend:
        """The run's backend, and those task rows name (`sandbox.backend`), behind one Backend."""
        return RoutedBackend(self.config.backend, self._make_backend)

    def _make_backend(self, name: str, run_id: str) -> Backend:
        cfg = self.config
        if name == "gbox":
            return make_backend(
                "gbox",
                run_id=run_id,
                expires_in_s=cfg.gbox_expires_in_s,
                setup_command=cfg.gbox_setup_command,
            )
        if name == "ray":
            return make_backend("ray", run_id=run_id, address=cfg.ray_address or None)
        return make_backend(name, docker_hosts=cfg.docker_hosts if name == "docker" else (), run_id=run_id)

    async def pool(self) -> SandboxPool:
        """Created on first use, in the event loop that runs the episodes."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._pool is None:
                cfg = self.config
                self._pool_backend = self._backend()
                self._pool = await SandboxPool(
                    self._pool_backend,
                    self.spec,
                    max_size=cfg.max_concurrency,
                    warm=cfg.warm,
                    acquire_timeout=cfg.acquire_timeout_s,
                ).start()
        return self._pool

    def repo_box(self, spec: RepoSpec) -> contextlib.AbstractAsyncContextManager[RepoBox]:
        """A repository box for one episode, removed after it whatever happens."""
        return self._box("repo", spec)

    def scoring_box(self, spec: RepoSpec) -> contextlib.AbstractAsyncContextManager[RepoBox]:
        """A fresh box of the same image for an episode's tests, removed after them."""
        return self._box("scoring", spec)

    @contextlib.asynccontextmanager
    async def _box(self, kind: str, spec: RepoSpec) -> AsyncIterator[RepoBox]:
        if kind not in self._slots:  # made in the event loop that runs the episodes
            self._slots[kind] = asyncio.Semaphore(self.config.max_concurrency)
        async with self._slots[kind], self._started(spec) as box:
            yield box

    def _started(self, spec: RepoSpec) -> contextlib.AbstractAsyncContextManager[Any]:
        # on Ray, a box's control folder is on the box's machine: an actor there drives it
        if self.config.backend == "ray":
            return repo_box_on_ray(self._repo("ray"), spec, self.config.acquire_timeout_s)
        return repo_box(self._repo("docker"), spec)

    def _repo(self, name: str) -> Any:
        """The repository boxes' backend (a run id of its own): a RayBackend, else the first Docker endpoint."""
        if self._repo_backend is None:
            if name == "ray":
                self._repo_backend = make_backend("ray", address=self.config.ray_address or None)
            else:
                self._repo_backend = make_backend("docker", docker_hosts=self.config.docker_hosts[:1])
        return self._repo_backend

    def preflight(self) -> None:
        """Fail fast, naming the cause, when the sandbox backend cannot be reached: otherwise every episode
        of the run would fail the same way."""
        backend = None
        try:
            backend = self._backend()  # docker-py connects here already
            backend.list_boxes()
        except Exception as exc:
            fix = {
                "gbox": "check GBOX_API_KEY and GBOX_CLIENT_BASE_URL (environment or .env)",
                "local": "run `make setup`",
            }.get(self.config.backend, "for podman run `make setup`, or point DOCKER_HOST at a Docker engine")
            raise SandboxError(
                f"sandbox backend {self.config.backend!r} is unreachable ({type(exc).__name__}: {exc}); {fix}"
            ) from exc
        finally:
            close = getattr(backend, "close", None)
            if close is not None:
                close()

    def remove_own(self) -> list[str]:
        """Last resort at a forced exit: remove this process's boxes directly through the backend: those of
        its backends' run ids that this process made (another trainer on the engine may share its pid).
        The episodes still run and start boxes: the backends first refuse new ones and let those being
        created appear in the engine's list."""
        backends = [b for b in (self._pool_backend, self._repo_backend) if b is not None]
        for b in backends:
            b.stop_creating()
        mine = []
        for b in backends:
            ids = [x["id"] for x in b.list_boxes(run_id=b.run_id) if made_by_this_process(x["labels"])]
            for box_id in ids:
                b.remove_sync(box_id)
            mine += ids
        return sorted(set(mine))

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = self._pool_backend = None
        if self._repo_backend is not None:
            self._repo_backend.close()
            self._repo_backend = None
