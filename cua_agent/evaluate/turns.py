"""Where a multi-turn policy gains or loses, per task: at each turn position, how many episodes reach it, the
actions taken there (by the model's action name, a key action with its keys: copy-paste's steps differ only
in them; "invalid" when nothing valid was parsed), how many end there
and how many of those succeed; and the typed text that matches the text the instruction quotes, exactly
(enter-text's "Enter \"Deneen\" into the text field..."). Over the episodes played to the end, as Score.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from cua_agent.episode.actions import Key, TypeText
from cua_agent.episode.loop import Episode
from cua_agent.rollout.outcomes import succeeded

_QUOTED = re.compile(r'"([^"]+)"')


@dataclass
class TurnPosition:
    turn: int  # from 1
    reached: int  # episodes with at least this many turns
    actions: dict[str, int]  # action name -> turns at this position
    ended: int  # episodes whose last turn this is
    ended_won: int  # of those, the successes


@dataclass
class Turns:
    positions: list[TurnPosition] = field(default_factory=list)
    typed: int = 0  # type actions in episodes whose instruction quotes a text
    typed_exact: int = 0  # of those, the ones that typed one of the quoted texts exactly

    @classmethod
    def of(cls, episodes: list[Episode]) -> Turns:
        scored = [e for e in episodes if e.ok]
        out = cls()
        for k in range(max((len(e.turns) for e in scored), default=0)):
            at = [e for e in scored if len(e.turns) > k]
            last = [e for e in at if len(e.turns) == k + 1]
            out.positions.append(
                TurnPosition(
                    turn=k + 1,
                    reached=len(at),
                    actions=dict(Counter(_name(e.turns[k].action) for e in at).most_common()),
                    ended=len(last),
                    ended_won=sum(succeeded(e) for e in last),
                )
            )
        for e in scored:
            quoted = set(_QUOTED.findall(e.instruction))
            if not quoted:
                continue
            typed = [t.action.text for t in e.turns if isinstance(t.action, TypeText)]
            out.typed += len(typed)
            out.typed_exact += sum(text in quoted for text in typed)
        return out

    @property
    def multi_turn(self) -> bool:
        return len(self.positions) > 1

    def markdown(self, task: str) -> str:
        lines = [
            f"{task}, by turn (of the episodes played to the end):",
            "",
            "| turn | reached | actions | ended here | of those, succeeded |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in self.positions:
            actions = ", ".join(f"{name} {n / p.reached:.0%}" for name, n in p.actions.items())
            lines.append(f"| {p.turn} | {p.reached} | {actions} | {p.ended} | {p.ended_won} |")
        if self.typed:
            lines += ["", f"typed text exactly as quoted: {self.typed_exact} of {self.typed}"]
        return "\n".join(lines) + "\n"


def _name(action: object) -> str:
    if isinstance(action, Key):
        return f"key {action.keys}"
    return getattr(action, "name", None) or "invalid"
