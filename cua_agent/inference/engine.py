"""An AReaL inference engine for a *stock* vLLM server.

AReaL 1.0.4's `RemotevLLMEngine` speaks to AReaL's own patched vLLM server (`/areal_update_weights`,
`/areal_pause_generation`, ...), which does not run under current vLLM. This engine keeps AReaL's rollout
machinery (`RemoteInfEngine`: workflow executor, staleness control, submit/wait/prepare_batch, server
discovery) and replaces what touches the server:

- `agenerate` (token in, token out) and `achat` (chat with images: the server's own prompt ids, with image
  tokens expanded, + output ids + logprobs) go through `VLLMServer` with bounded retries and typed errors;
- pause/resume map to vLLM's `/pause?mode=abort` and `/resume`;
- `update_weights_from_disk` runs reload → cache resets → served-version update on every server, and
  verifies tied-embedding models (see `weight_sync`).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from areal.api import ModelRequest, ModelResponse, ParamSpec, WeightUpdateMeta
from areal.api.cli_args import InferenceEngineConfig
from areal.api.io_struct import HttpRequest, WeightUpdateRequests
from areal.engine.vllm_remote import VLLMBackend
from areal.infra import RemoteInfEngine
from areal.infra.utils.concurrent import get_executor
from areal.utils import name_resolve, names, stats_tracker

from .http import RetryPolicy
from .vllm_server import (
    Generation,
    SamplingParams,
    VLLMServer,
    close_loop_session,
    close_sessions_of_other_loops,
)
from .weight_sync import update_servers_from_disk

# finish reasons after which a generation is complete; "abort" means the server was paused mid-request.
_DONE = ("stop", "length", "tool_calls")


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


@dataclass
class ChatTurn:
    """A chat call as the trainer needs it: exact ids, logprobs and the weight version that produced them."""

    generation: Generation
    version: int
    server: str
    attempts: int = 1  # > 1 when a weight update aborted the turn and it was generated again


class StockVLLMEngine(RemoteInfEngine):
    """Drop-in for AReaL's `RemotevLLMEngine` against an unmodified vLLM server."""

    def __init__(self, config: InferenceEngineConfig, *, tied_embeddings: bool | None = None):
        super().__init__(config, StockVLLMBackend())
        # AReaL's request_retries counts attempts; request_timeout bounds each one.
        self.policy = RetryPolicy(attempts=max(1, config.request_retries), timeout_s=config.request_timeout)
        self.tied_embeddings = tied_embeddings
        self._servers: dict[str, VLLMServer] = {}

    def export_stats(self) -> dict[str, float]:
        """PPOTrainer calls it every step; RemoteInfEngine lacks it (AReaL's RemotevLLMEngine has it)."""
        return stats_tracker.export_all(reduce_group=None)

    def destroy(self) -> None:
        close_sessions_of_other_loops()  # the rollout thread's HTTP session, before its loop stops
        super().destroy()

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
    ) -> ChatTurn:
        """One chat completion. If a weight update aborts it mid-way, the whole turn is generated again
        after the update (a chat turn cannot be continued from partial output), so every token of the
        result comes from one weight version."""
        address = self._server_for(rid)
        attempts = 0
        while True:
            await self._wait_unpaused()
            version = self.get_version()
            attempts += 1
            gen = await self.server(address).chat(messages, sampling)
            if gen.finish_reason != "abort":
                return ChatTurn(gen, version, address, attempts)
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
            gen = await self.server(address).complete_tokens(list(req.input_ids) + out_ids, sampling)
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
        future = get_executor().submit(
            _load_after_save_signal,
            key,
            list(self.addresses),
            meta.path,
            version,
            self.policy,
            self.tied_embeddings,
            self.config.request_timeout,
        )
        if meta.clear_checkpoint_after_load:  # else a full model copy piles up per step (as AReaL's engine)
            path = meta.path
            future.add_done_callback(
                lambda f: f.exception() is None and shutil.rmtree(path, ignore_errors=True)
            )
        return future


def _load_after_save_signal(
    key: str,
    addresses: list[str],
    path: str,
    version: int,
    policy: RetryPolicy,
    tied: bool | None,
    save_timeout_s: float,
) -> float:
    """Runs in a worker thread with its own event loop. Returns seconds spent loading."""
    name_resolve.wait(key, timeout=save_timeout_s)
    start = time.perf_counter()
    servers = [VLLMServer(a, policy=policy) for a in addresses]

    async def load() -> None:
        try:
            await update_servers_from_disk(servers, path, version, tied_embeddings=tied, pause=False)
        finally:
            await close_loop_session()

    asyncio.run(load())
    return time.perf_counter() - start
