"""Structured clean-up for episodes that may be cancelled (the end of a run cancels the rollouts): every
child and every clean-up is awaited to its end before the caller ends, so no task is left running when the
event loop shuts down ("Task was destroyed but it is pending", and a box its pool still counts)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def finish(aw: Awaitable[Any]) -> Any:
    """Await `aw` to its end even if the caller is cancelled meanwhile (then re-raise the cancellation).
    For the clean-up of a cancelled episode, e.g. handing its box back: `asyncio.shield` alone lets a second
    cancellation end the caller while the clean-up still runs unawaited."""
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


async def gather_all(*aws: Awaitable[Any]) -> list[Any]:
    """`asyncio.gather`, but it returns (or raises the first error, or the cancellation) only once every
    awaitable has ended. Plain `gather` ends as soon as one child is cancelled or fails, and leaves the
    others running on their own: at the end of a run, an episode still handing its box back."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results
