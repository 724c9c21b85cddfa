"""Typed sandbox errors: callers tell infrastructure failures (drop the episode) from bad requests."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """Base class: something went wrong with a sandbox (not with the policy)."""


class SandboxDied(SandboxError):
    """The box or its control server is gone (killed, crashed, out of memory)."""


class SandboxTimeout(SandboxError):
    """A request or an acquire did not finish in time."""


class SandboxStartError(SandboxError):
    """A box could not be started (after retries)."""


class BoxBroken(SandboxError):
    """A box stopped working because of what ran in it (the agent's commands, or its code under test): the
    policy's failure, scored 0, unlike a box the infrastructure lost."""


class SandboxImpostor(BoxBroken):
    """Something other than the box's control server answered (its answer is not signed with the key only
    that server holds): a process in the box took the server's place."""


class SandboxRequestError(SandboxError):
    """The control server rejected a request (4xx): a malformed action or an unknown task."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message

    def __reduce__(self) -> tuple[type, tuple[int, str]]:  # crosses processes (the ray backend) intact
        return type(self), (self.status, self.message)
