"""The scripted oracles (sandbox/oracles) as a policy: a chat client whose answers are the oracle's actions
written in the policy's own output format, so that demonstrations are recorded through the agent's episode
loop exactly as the policy sees and answers its turns (prompt builder, history screenshots, coordinate
convention, tool-call format, the parser that reads it back).

The oracle runs as a task beside the episode loop. Each action it takes is handed to the loop as the
model's answer of the current turn; the loop parses it and steps the real sandbox, and the oracle gets the
step's result and goes on. When the oracle is finished, the answer is `done`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from cua_agent.episode.actions import Done, from_wire
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import DEFAULT_FAMILY, FAMILIES, ModelFamily
from cua_agent.inference.model_call import ModelCall
from sandbox.base import Sandbox
from sandbox.oracles import solve


@dataclass
class DemoTurn:
    messages: list[dict[str, Any]]  # the prompt the policy would get
    images: list[bytes]  # the screenshots in it, in order (PNG)
    answer: str  # what the policy should answer


class OracleChatClient:
    """One per episode. `sandbox` is the episode's box; run the episode on `self.relay` (it steps `sandbox`
    and lets the oracle know)."""

    def __init__(
        self, sandbox: Sandbox, mapping: CoordinateMapping, family: ModelFamily = FAMILIES[DEFAULT_FAMILY]
    ):
        self.sandbox, self.mapping, self.family = sandbox, mapping, family
        self.relay = _StepRelay(self)
        self.turns: list[DemoTurn] = []
        self._actions: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._results: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self._solver: asyncio.Task[Any] | None = None

    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ModelCall:
        if self._solver is None:  # the task was reset by now: the oracle reads its state from here on
            self._solver = asyncio.ensure_future(solve(_OracleView(self)))
        nxt = asyncio.ensure_future(self._actions.get())
        await asyncio.wait({nxt, self._solver}, return_when=asyncio.FIRST_COMPLETED)
        if nxt.done():
            action = from_wire(nxt.result())
        else:
            nxt.cancel()
            self._solver.result()  # an oracle that failed raises here (OracleError): no demonstration
            action = Done()
        answer = self.family.answer(action, self.mapping)
        self.turns.append(DemoTurn(messages, list(images), answer))
        return ModelCall(answer, images=list(images))

    async def close(self) -> None:
        if self._solver is not None and not self._solver.done():
            self._solver.cancel()


class _OracleView:
    """The sandbox as the oracle sees it: its actions go to the episode loop, its reads to the box."""

    def __init__(self, client: OracleChatClient):
        self.client = client

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        await self.client._actions.put(action)
        result = await self.client._results.get()
        if isinstance(result, BaseException):
            raise result
        return result

    async def oracle(self) -> dict[str, Any]:
        return await self.client.sandbox.oracle()


class _StepRelay:
    """The sandbox as the episode loop sees it: every call goes to the box; a step's result also goes back
    to the oracle that asked for it."""

    def __init__(self, client: OracleChatClient):
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client.sandbox, name)

    async def step(self, action: dict[str, Any], *args: Any, **kwargs: Any) -> tuple[dict[str, Any], bytes]:
        try:
            info, png = await self.client.sandbox.step(action, *args, **kwargs)
        except BaseException as exc:  # the oracle's act fails the same way, instead of waiting forever
            self.client._results.put_nowait(exc)
            raise
        self.client._results.put_nowait(info)
        return info, png
