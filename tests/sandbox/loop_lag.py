"""How long the running event loop was held up: a ticker that sleeps 10 ms at a time and keeps the largest
gap between its wake-ups beyond those 10 ms. A blocking call on the loop shows up as a gap as long as it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator


class LoopLag:
    def __init__(self) -> None:
        self.worst_s = 0.0


@contextlib.asynccontextmanager
async def loop_lag(tick_s: float = 0.01) -> AsyncIterator[LoopLag]:
    lag = LoopLag()

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(tick_s)
            now = time.perf_counter()
            lag.worst_s = max(lag.worst_s, now - last - tick_s)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker runs before what is measured
    try:
        yield lag
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
