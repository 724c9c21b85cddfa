"""An AReaL inference engine for a *stock* vLLM server.

AReaL 1.0.4's `RemotevLLMEngine` speaks to AReaL's own patched vLLM server (`/areal_update_weights`,
`/areal_pause_generation`, ...), which does not run under current vLLM. This engine keeps AReaL's rollout
machinery (`RemoteInfEngine`: workflow executor, staleness control, submit/wait/prepare_batch, server
discovery) and replaces what touches the server:

- `agenerate` (token in, token out) and `achat` (chat with images: the server's own prompt ids, with image
  tokens expanded, + output ids + logprobs) go through `VLLMServer` with bounded retries and typed errors;
- pause/resume map to vLLM's `/pause?mode=abort` and `/resume`;
- `update_weights_from_disk` runs reload → cache resets → served-version update on every server, and
  verifies tied-embedding models (see `weight_sync`);
- a server that stops answering (restart, crash, hang) is waited for, bounded by `recovery_timeout_s`;
  when it answers again its served version is checked and, if it lost our weights (a restarted server
  serves the base model), the current weights are pushed again before it generates; the weights owner
  also asks every server what it serves every SERVER_CHECK_EVERY_S, so a restart that none of its own
  requests met (another rank's did, or none was in flight) is caught too;
- with LoRA (`serve_lora`), updates load the adapter under a versioned name and requests name the adapter
  of their weight version (see `adapter_sync`).

With several trainer ranks, each rank has an engine of its own, but AReaL calls `update_weights_from_disk`
on rank 0 only: that engine is the weights owner. It loads each version on the servers, publishes what it
loaded (the checkpoint directory and, with LoRA, the adapter's served name) in name_resolve, re-pushes the
weights to a server that lost them, and removes old weight directories and adapters. Every other rank's
engine follows: when AReaL sets the new version on it (`set_version`, after the update's barrier), it reads
the published record, so its requests name the same adapter and it knows what a recovered server must serve.
Training bookkeeping around it (which rows a batch trained on, stop signals) is `train/rollouts.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from areal.api import ModelRequest, ModelResponse, ParamSpec, WeightUpdateMeta
from areal.api.cli_args import InferenceEngineConfig
from areal.api.io_struct import HttpRequest, WeightUpdateRequests
from areal.engine.vllm_remote import VLLMBackend
from areal.infra import RemoteInfEngine
from areal.infra.utils.concurrent import get_executor
from areal.utils import logging, name_resolve, names, stats_tracker

from .adapter_sync import (
    adapter_digest,
    adapter_inert,
    adapter_name,
    is_adapter,
    load_adapter,
    serve_initial_adapter,
)
from .errors import ServerRequestError, ServerUnavailableError, WeightUpdateError
from .http import RetryPolicy
from .model_call import ModelCall
from .vllm_server import (
    SamplingParams,
    VLLMServer,
    close_loop_session,
    close_sessions_of_other_loops,
)
from .weight_sync import update_servers_from_disk

log = logging.getLogger("StockVLLMEngine")


async def _unload_all(server: VLLMServer, names: list[str]) -> None:
    for name in names:
        try:
            await server.unload_lora_adapter(name)
        except ServerRequestError as exc:  # already gone: a restarted server, or the run's other engine
            if exc.status != 404:
                raise


@dataclasses.dataclass
class _Lora:
    """The adapters the servers serve: versioned names, the newest `keep` of them loaded."""

    name: str
    keep: int
    digest: str | None  # the newest version's tensors (the initial adapter's: the base model's)
    inert: bool = True  # the newest version serves exactly the base model (every B is zero; version 0 does)
    served: dict[int, tuple[str, str]] = dataclasses.field(default_factory=dict)  # version -> (name, dir)


def served_weights_key(experiment_name: str, trial_name: str, version: int) -> str:
    """The name_resolve entry in which the weights owner publishes what the servers serve as `version`."""
    return f"{names.trial_root(experiment_name, trial_name)}/cua_served_weights/{version}"


FOLLOW_TIMEOUT_S = 60.0  # a follower's wait for the owner's record of a version (NFS may show it late)

# finish reasons after which a generation is complete; "abort" means the server was paused mid-request.
_DONE = ("stop", "length", "tool_calls")
RECOVERY_TIMEOUT_S = 300.0
SERVER_CHECK_EVERY_S = 5.0  # the weights owner asks each server which weights it serves this often


class StockVLLMBackend(VLLMBackend):
    """The parts of AReaL's backend protocol that `RemoteInfEngine` itself still uses, for a stock server."""

    def get_pause_request(self) -> HttpRequest:
        return HttpRequest(endpoint="/pause?mode=abort", payload={})

    def get_resume_request(self) -> HttpRequest:
        return HttpRequest(endpoint="/resume", payload={})

    def build_disk_weight_update_requests(self, meta: WeightUpdateMeta) -> WeightUpdateRequests:
        raise NotImplementedError("StockVLLMEngine.update_weights_from_disk drives disk updates itself")

    def build_distributed_weight_update_requests(
        self, meta: WeightUpdateMeta, param_specs: list[ParamSpec]
    ) -> WeightUpdateRequests:
        raise NotImplementedError(
            "a stock vLLM server takes weight updates from disk only: set actor.weight_update_mode=disk"
        )

    def build_init_weights_group_request(
        self, addr: str, server_idx: int, meta: WeightUpdateMeta
    ) -> HttpRequest:
        raise NotImplementedError(
            "a stock vLLM server takes weight updates from disk only: set actor.weight_update_mode=disk"
        )


class StockVLLMEngine(RemoteInfEngine):
    """Drop-in for AReaL's `RemotevLLMEngine` against an unmodified vLLM server."""

    def __init__(
        self,
        config: InferenceEngineConfig,
        *,
        tied_embeddings: bool | None = None,
        recovery_timeout_s: float = RECOVERY_TIMEOUT_S,
        weights_owner: bool = True,
    ):
        super().__init__(config, StockVLLMBackend())
        self.weights_owner = weights_owner  # rank 0's engine (module doc); the others follow it
        # AReaL's request_retries counts attempts; request_timeout bounds each one.
        self.policy = RetryPolicy(attempts=max(1, config.request_retries), timeout_s=config.request_timeout)
        self.tied_embeddings = tied_embeddings
        self.recovery_timeout_s = recovery_timeout_s
        self._servers: dict[str, VLLMServer] = {}
        # The weights every server should serve: (checkpoint dir, version), kept on disk until the next
        # update so a server that restarts can be given them again. None: the servers' initial weights.
        self._current_weights: tuple[str, int] | None = None
        self._weights_lock = threading.Lock()  # a re-push and a trainer update never interleave
        self._recovering: dict[str, asyncio.Task[None]] = {}
        self.counters = {"server_errors": 0, "server_recoveries": 0, "weight_repushes": 0, "stale_servers": 0}
        self._lora: _Lora | None = None
        self._checker: threading.Thread | None = None
        self._stop_checking = threading.Event()

    def serve_lora(self, lora_name: str, keep_versions: int, initial_adapter: str | None = None) -> None:
        """Weight updates are LoRA adapters from now on. Version 0 is `initial_adapter`, the trainer's fresh
        adapter (it serves exactly the base model), under a name of its own: the weights owner loads it on
        every server (a server that cannot serve the run's adapters fails now, not after the first step) and
        publishes it; the other ranks wait for that record. Requests then always name an adapter, never the
        base model (`serve_initial_adapter` says why)."""
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        digest = adapter_digest(initial_adapter) if initial_adapter else None
        inert = adapter_inert(initial_adapter) if initial_adapter else True
        self._lora = _Lora(lora_name, keep_versions, digest, inert)
        if initial_adapter is None or digest is None:
            return
        if not self.weights_owner:
            self._follow(0)
            return
        name = adapter_name(lora_name, 0, digest)
        self._on_all_servers(lambda s: serve_initial_adapter(s, initial_adapter, name))
        with self._weights_lock:
            self._lora.served[0] = (name, initial_adapter)
            self._current_weights = (initial_adapter, 0)
        self._publish(0, initial_adapter, name)
        log.info(
            f"LoRA adapter {name} serves weight version 0 ({initial_adapter}, the trainer's initial adapter)"
        )

    def model_for(self, version: int) -> str | None:
        """The served name of a weight version: its adapter with LoRA (the newest one loaded at or before
        it), else None (the server's model)."""
        if self._lora is None:
            return None
        loaded = [v for v in self._lora.served if v <= version]
        return self._lora.served[max(loaded)][0] if loaded else None

    def set_version(self, version: int) -> None:
        """AReaL sets the new version on every rank after an update; a follower learns what it serves."""
        if not self.weights_owner and version > 0:
            self._follow(version)
        super().set_version(version)

    def _follow(self, version: int) -> None:
        current = self._current_weights
        if current is not None and current[1] == version:
            return
        key = served_weights_key(self.config.experiment_name, self.config.trial_name, version)
        try:  # the owner publishes before the update's barrier: the record is there, or the owner failed
            record = json.loads(name_resolve.wait(key, timeout=FOLLOW_TIMEOUT_S))
        except TimeoutError as exc:
            raise WeightUpdateError(
                "-",
                "(weight update)",
                f"rank 0 published no record of weight version {version} within {FOLLOW_TIMEOUT_S:.0f}s: "
                "its sync failed (see its training.log) or name_resolve is not shared by the ranks",
            ) from exc
        with self._weights_lock:
            self._current_weights = (record["path"], version)
            if self._lora is not None:
                if record["adapter"] is None:
                    raise WeightUpdateError(
                        "-", "(weight update)", f"version {version} was synced without LoRA"
                    )
                self._lora.served[version] = (record["adapter"], record["path"])
                for v in [v for v in self._lora.served if v <= version - self._lora.keep]:
                    del self._lora.served[v]  # the owner unloads it and removes its files

    def initialize(self, *args: Any, **kwargs: Any) -> Any:
        """AReaL's server discovery; then every server is resumed: a trainer killed during a weight update
        leaves its servers paused, and nothing would ever generate."""
        result = super().initialize(*args, **kwargs)
        self.continue_generation()
        if self.weights_owner:
            self._checker = threading.Thread(target=self._check_servers, name="server-weights", daemon=True)
            self._checker.start()
        return result

    def _check_servers(self) -> None:
        """The owner's watch (its own thread): a server that serves other weights than the current ones gets
        them again within SERVER_CHECK_EVERY_S. A restart is otherwise seen only by a rank whose request
        failed on it: when that was a follower, or no request was in flight, the server generated from the
        base weights, under the current version, until the next update. A server that does not answer is
        left to the episodes' recovery."""

        async def watch() -> None:
            try:
                while not await asyncio.to_thread(self._stop_checking.wait, SERVER_CHECK_EVERY_S):
                    for address in self.addresses:
                        try:
                            await self.ensure_current_weights(address)
                        except (ServerUnavailableError, ServerRequestError):
                            pass
                        except Exception as exc:  # the watch never ends the run: the next round tries again
                            log.warning(f"checking the weights {address} serves failed: {exc!r}")
            finally:
                await close_loop_session()

        asyncio.run(watch())

    def pause_generation(self) -> None:
        """Before a weight update (AReaL's FSDP engine calls it): pause every server that answers. One
        that does not (restarting, down) generates nothing now and gets the new weights when it is back
        (`ensure_current_weights`), so it must not fail the training step."""
        self._on_all_servers(lambda server: server.pause())
        time.sleep(self.config.pause_grace_period)  # as AReaL: let the aborts land

    def continue_generation(self) -> None:
        self._on_all_servers(lambda server: server.resume())

    def _on_all_servers(self, call: Callable[[VLLMServer], Any]) -> None:
        async def run() -> list[BaseException | None]:
            try:
                servers = [VLLMServer(a, policy=self.policy) for a in self.addresses]
                return await asyncio.gather(*(call(s) for s in servers), return_exceptions=True)
            finally:
                await close_loop_session()

        for address, result in zip(self.addresses, asyncio.run(run()), strict=True):
            if isinstance(result, ServerUnavailableError):
                self.counters["stale_servers"] += 1
                log.warning(
                    f"vLLM server {address} unavailable ({result}); it will get the weights when back"
                )
            elif isinstance(result, BaseException):
                raise result

    def export_stats(self) -> dict[str, float]:
        """PPOTrainer calls it every step; RemoteInfEngine lacks it (AReaL's RemotevLLMEngine has it)."""
        return stats_tracker.export_all(reduce_group=None)

    def destroy(self) -> None:
        self._stop_checking.set()
        if self._checker is not None:
            self._checker.join(timeout=60)  # a re-push under way ends first
        close_sessions_of_other_loops()  # the rollout thread's HTTP session, before its loop stops
        super().destroy()
        if not self.weights_owner:  # the servers' adapters and the weight directories are the owner's
            return
        if self._lora is not None and self._lora.served:  # training is over: its sync adapters go
            names = [name for name, _ in self._lora.served.values()]
            log.info(f"Training is over: unloading LoRA adapters {names} from the servers")
            self._on_all_servers(lambda server: _unload_all(server, names))
            for version, (_, path) in self._lora.served.items():
                if version > 0:  # version 0's directory is the trainer's initial adapter
                    shutil.rmtree(path, ignore_errors=True)
            self._lora.served.clear()
        if self._current_weights is not None:  # training is over: nothing left to re-push
            if self._current_weights[1] > 0:
                shutil.rmtree(self._current_weights[0], ignore_errors=True)
            self._current_weights = None

    def server(self, address: str) -> VLLMServer:
        if address not in self._servers:
            self._servers[address] = VLLMServer(address, policy=self.policy)
        return self._servers[address]

    def _server_for(self, rid: str | None) -> str:
        """Requests of one episode (same rid) stick to one server so its prefix cache is reused."""
        if rid is None:
            return self.choose_server()
        if rid not in self.rid_to_address:
            if len(self.rid_queue) >= 128:
                self.rid_to_address.pop(self.rid_queue.pop(0), None)
            self.rid_to_address[rid] = self.choose_server()
            self.rid_queue.append(rid)
        return self.rid_to_address[rid]

    async def _wait_unpaused(self) -> None:
        while self._initialized and self.workflow_executor.is_paused():
            await asyncio.sleep(0.2)

    # ---- generation -------------------------------------------------------------------------------------
    async def achat(
        self, messages: list[dict[str, Any]], sampling: SamplingParams, *, rid: str | None = None
    ) -> ModelCall:
        """One chat completion. If a weight update aborts it mid-way, the whole turn is generated again
        after the update (a chat turn cannot be continued from partial output), so every token of the
        result comes from one weight version."""
        address = self._server_for(rid)
        attempts = 0
        while True:
            await self._wait_unpaused()
            version = self.get_version()
            attempts += 1
            model = self.model_for(version)
            call = await self._generate(address, lambda s, m=model: s.chat(messages, sampling, model=m))
            if call.finish_reason != "abort":
                return dataclasses.replace(call, version=version, attempts=attempts)
            await asyncio.sleep(0.2)

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        """Token-in/token-out generation with AReaL's semantics: an aborted request continues from the
        tokens generated so far; each output token carries the version that produced it."""
        if req.image_data or req.vision_msg_vllm:
            raise ValueError("StockVLLMEngine.agenerate takes token prompts; use achat for images")
        g = req.gconfig
        if g.n_samples != 1:
            raise ValueError("inference engines generate one sample per request; AReaL groups by repetition")
        budget = min(g.max_tokens - len(req.input_ids), g.max_new_tokens)
        if budget <= 0:
            raise ValueError(
                f"prompt of {len(req.input_ids)} tokens leaves no room under max_tokens={g.max_tokens}"
            )
        sampling = SamplingParams(
            max_tokens=budget,
            temperature=0.0 if g.greedy else g.temperature,
            top_p=g.top_p,
            top_k=g.top_k,
            stop_token_ids=list(g.stop_token_ids or []),
        )
        address = self._server_for(req.rid)
        start = time.perf_counter()
        out_ids: list[int] = []
        out_lp: list[float] = []
        versions: list[int] = []
        finish = "abort"
        while finish not in _DONE and len(out_ids) < budget:
            await self._wait_unpaused()
            version = self.get_version()
            sampling.max_tokens = budget - len(out_ids)
            prompt = list(req.input_ids) + out_ids
            model = self.model_for(version)
            gen = await self._generate(
                address, lambda s, p=prompt, m=model: s.complete_tokens(p, sampling, model=m)
            )
            out_ids += gen.output_token_ids
            out_lp += gen.output_logprobs
            versions += [version] * len(gen.output_token_ids)
            finish = gen.finish_reason
        latency = time.perf_counter() - start
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=out_ids,
            output_logprobs=out_lp,
            output_versions=versions,
            stop_reason="length" if finish == "abort" else finish,
            latency=latency,
            ttft=latency,
            tokenizer=req.tokenizer,
            processor=req.processor,
        )

    # ---- server faults ----------------------------------------------------------------------------------
    async def _generate(self, address: str, call: Callable[[VLLMServer], Any]) -> ModelCall:
        """`call` on the server; if the server is unavailable after its retries, wait for it to recover
        (and get our weights back) and try once more."""
        server = self.server(address)
        try:
            return await call(server)
        except ServerUnavailableError as exc:
            self.counters["server_errors"] += 1
            log.warning(f"{exc}; waiting up to {self.recovery_timeout_s:.0f}s for it to recover")
            await self._recover(address)
            return await call(server)

    async def _recover(self, address: str) -> None:
        """One recovery per server at a time; concurrent episodes wait on the same one."""
        task = self._recovering.get(address)
        if task is None or task.done():
            task = asyncio.ensure_future(self._recover_server(address))
            self._recovering[address] = task
        await asyncio.shield(task)

    async def _recover_server(self, address: str) -> None:
        server = self.server(address)
        start = time.monotonic()
        try:
            await server.wait_healthy(self.recovery_timeout_s)
        except TimeoutError as exc:
            raise ServerUnavailableError(
                address, "/health", 1, time.monotonic() - start, f"no recovery: {exc}"
            ) from exc
        self.counters["server_recoveries"] += 1
        await self.ensure_current_weights(address)
        log.info(f"vLLM server {address} answers again after {time.monotonic() - start:.1f}s")

    async def ensure_current_weights(self, address: str) -> bool:
        """Push the current weights to `address` if it does not serve them (e.g. after a restart).
        Returns whether it had to. A follower pushes nothing: it waits, within `recovery_timeout_s`, for the
        owner, whose requests reach every server (round robin), to give the server its weights again."""
        server = self.server(address)
        if not self.weights_owner:
            await self._wait_for_owner(server)
            return False
        await asyncio.to_thread(self._weights_lock.acquire)
        try:
            current = self._current_weights
            if current is None:
                return False
            path, version = current
            if self._lora is not None:
                name = self._lora.served[version][0]
                if name in await server.served_models():
                    return False
                log.warning(f"vLLM server {address} does not serve adapter {name}: loading {path} again")
                await server.load_lora_adapter(name, path)
            else:
                served = await server.weight_version()
                if served == version:
                    return False
                log.warning(
                    f"vLLM server {address} serves version {served}, not {version}: pushing {path} again"
                )
                await update_servers_from_disk(
                    [server], path, version, tied_embeddings=self.tied_embeddings, pause=True
                )
            self.counters["weight_repushes"] += 1
            return True
        finally:
            self._weights_lock.release()

    async def _serves_current(self, server: VLLMServer) -> bool:
        current = self._current_weights
        if current is None:
            return True
        if self._lora is not None:
            return self._lora.served[current[1]][0] in await server.served_models()
        return await server.weight_version() == current[1]

    async def _wait_for_owner(self, server: VLLMServer) -> None:
        deadline = time.monotonic() + self.recovery_timeout_s
        while not await self._serves_current(server):
            if time.monotonic() > deadline:
                raise ServerUnavailableError(
                    server.address,
                    "/weight_info",
                    1,
                    self.recovery_timeout_s,
                    "it came back without the current weights, and the weights owner (rank 0) did not push "
                    "them again in time",
                )
            await asyncio.sleep(1.0)

    # ---- weights ----------------------------------------------------------------------------------------
    def update_weights_from_disk(self, meta: WeightUpdateMeta) -> Future[float]:
        """Called by AReaL's FSDP engine right after `pause_generation`, *before* it saves the checkpoint:
        wait for its "saved" signal in name_resolve, then load the checkpoint on every server."""
        if meta.type != "disk" or meta.path is None:
            raise ValueError(f"disk weight update needs type='disk' and a path, got type={meta.type!r}")
        if self.config.experiment_name is None or self.config.trial_name is None:
            raise RuntimeError(
                "rollout.experiment_name and rollout.trial_name must be set for disk weight updates"
            )
        key = names.update_weights_from_disk(
            self.config.experiment_name, self.config.trial_name, self.get_version()
        )
        version = meta.version if meta.version is not None else self.get_version() + 1
        return get_executor().submit(self._load_after_save_signal, key, meta.path, version, meta)

    def _load_after_save_signal(self, key: str, path: str, version: int, meta: WeightUpdateMeta) -> float:
        """Runs in a worker thread with its own event loop. Returns seconds spent loading.

        A server that cannot be reached does not fail the step: it is behind, and gets these weights when
        it answers again (`ensure_current_weights`). Any other failure (a reload error, a stale tied head)
        does. The previous version's directory is removed (else a full model copy piles up per step); this
        one is kept for re-pushes until the next update (or the end of training)."""
        name_resolve.wait(key, timeout=self.config.request_timeout)
        start = time.perf_counter()
        servers = [VLLMServer(a, policy=self.policy) for a in self.addresses]
        if is_adapter(path) != (self._lora is not None):
            what = "a LoRA adapter" if is_adapter(path) else "no LoRA adapter"
            serves = "LoRA adapters" if self._lora is not None else "full weights"
            raise WeightUpdateError(
                "-", "(weight update)", f"{path} holds {what}, this engine syncs {serves}"
            )
        digest = adapter_digest(path) if self._lora is not None else None  # what the adapter's tensors are
        load_one = self._adapter_loader(path, version, digest) if digest is not None else None

        async def load() -> list[BaseException | None]:
            try:
                return await asyncio.gather(
                    *(
                        load_one(s)
                        if load_one is not None
                        else update_servers_from_disk(
                            [s], path, version, tied_embeddings=self.tied_embeddings, pause=False
                        )
                        for s in servers
                    ),
                    return_exceptions=True,
                )
            finally:
                await close_loop_session()

        with self._weights_lock:
            results = asyncio.run(load())
            for server, result in zip(servers, results, strict=True):
                if isinstance(result, ServerUnavailableError):
                    self.counters["stale_servers"] += 1
                    log.warning(f"weights v{version} not loaded on {server.address} (unavailable): {result}")
                elif isinstance(result, BaseException):
                    raise result
            previous, self._current_weights = self._current_weights, (path, version)
            adapter = (
                self._after_adapter_sync(path, version, digest, meta) if self._lora is not None else None
            )
            self._publish(version, path, adapter)
        full = self._lora is None  # an adapter's directory stays while it is loaded (_after_adapter_sync)
        if full and previous is not None and previous[0] != path and meta.clear_checkpoint_after_load:
            shutil.rmtree(previous[0], ignore_errors=True)
        return time.perf_counter() - start

    def _publish(self, version: int, path: str, adapter: str | None) -> None:
        """What the servers serve as `version`, for the other ranks' engines (`_follow`)."""
        key = served_weights_key(self.config.experiment_name, self.config.trial_name, version)
        name_resolve.add(key, json.dumps({"path": path, "adapter": adapter}), replace=True)

    def _adapter_loader(self, path: str, version: int, digest: str) -> Callable[[VLLMServer], Any]:
        """The verified load of the adapter at `path` as `version`'s name on one server (adapter_sync)."""
        lora = self._lora
        assert lora is not None
        name = adapter_name(lora.name, version, digest)
        previous = self.model_for(version - 1)
        inert = adapter_inert(path)
        # what it serves changes with its tensors, unless both versions serve the base model (B A = 0)
        changed = digest != lora.digest and not (inert and lora.inert)
        # versions older than the newest `keep` (this one included) are unloaded once it serves
        unload = [n for v, (n, _) in lora.served.items() if v <= version - lora.keep]

        async def load(server: VLLMServer) -> float:
            # AReaL paused the servers for the update; an adapter loads beside the one generating, and the
            # probes that verify it need the server scheduling. Requests meanwhile name their own version's
            # adapter, so every token keeps the version that produced it.
            await server.resume()
            return await load_adapter(server, path, name, previous=previous, changed=changed, unload=unload)

        return load

    def _after_adapter_sync(self, path: str, version: int, digest: str | None, meta: WeightUpdateMeta) -> str:
        """Record the served adapter and return its name; remove the directories of adapters no longer
        loaded (a server may read an adapter's files again while it is loaded, so those stay)."""
        lora = self._lora
        assert lora is not None and digest is not None
        name = adapter_name(lora.name, version, digest)
        lora.digest, lora.inert = digest, adapter_inert(path)
        lora.served[version] = (name, path)
        log.info(f"LoRA adapter {name} serves weight version {version} ({path}, sha256 {digest})")
        for v in [v for v in lora.served if v <= version - lora.keep]:
            _, old_path = lora.served.pop(v)
            if meta.clear_checkpoint_after_load and old_path != path and v > 0:  # v0: the trainer's
                shutil.rmtree(old_path, ignore_errors=True)
        return name
