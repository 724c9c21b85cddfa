"""rollouts.jsonl: one line per episode (what the model said, what ran, the reward and the advantage its
group gave it), and optionally the screenshot the model saw at each turn (screenshots/<episode>/turnNN.png),
within a disk budget: past it, the oldest episodes' screenshots are removed first (the viewer says so)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from cua_agent.episode.loop import Episode


class RolloutRecorder:
    def __init__(self, path: Path, screenshots: bool = False, budget_mb: float = 0.0):
        self.path = path
        self.screenshots_dir = path.parent / "screenshots" if screenshots else None
        self.budget_bytes = int(budget_mb * 2**20)  # 0: no limit
        self._lock = threading.Lock()  # groups finish concurrently
        self._kept: deque[tuple[Path, int]] = deque()  # episode folders, oldest first, with their bytes
        self._bytes = 0
        if self.screenshots_dir is not None and self.budget_bytes and self.screenshots_dir.is_dir():
            self._count_existing()  # a resumed run: what earlier attempts kept counts against the budget

    def _count_existing(self) -> None:
        assert self.screenshots_dir is not None
        folders = [d for d in self.screenshots_dir.iterdir() if d.is_dir()]
        for d in sorted(folders, key=lambda d: d.stat().st_mtime_ns):
            size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
            self._kept.append((d, size))
            self._bytes += size

    def _keep_within_budget(self, folder: Path, size: int) -> None:
        """Count the episode's screenshots and remove the oldest episodes' while over the budget (the
        newest is kept even alone over it)."""
        self._kept.append((folder, size))
        self._bytes += size
        while self.budget_bytes and self._bytes > self.budget_bytes and len(self._kept) > 1:
            old, old_size = self._kept.popleft()
            for f in old.glob("*"):
                f.unlink(missing_ok=True)
            old.rmdir()
            self._bytes -= old_size

    @classmethod
    def for_run(cls, config: Any) -> RolloutRecorder | None:
        """outputs/<experiment>/<agent.rollouts_file>, one file per rank (appends from several hosts to one
        file are not atomic on NFS); None when the run records nothing."""
        agent = config.agent
        if getattr(config, "cluster", None) is None or not agent.rollouts_file:
            return None
        path = Path(config.cluster.fileroot) / agent.rollouts_file
        rank = int(os.environ.get("RANK", "0"))
        if rank > 0:
            path = path.with_name(f"{path.stem}-rank{rank}{path.suffix}")
        return cls(path, agent.save_screenshots, agent.screenshots_budget_mb)

    def record(self, episodes: list[Episode], advantage_of: dict[int, float], group_id: str) -> None:
        """Append the group's episodes; `advantage_of` maps id(episode) to its advantage (trained ones)."""
        lines, written = [], []
        for ep in episodes:
            episode_id = uuid.uuid4().hex[:12]
            turns = []
            shots = 0
            for i, t in enumerate(ep.turns):
                turns.append(
                    {
                        "output": t.output,
                        "action": t.wire,
                        "note": t.note,
                        **({"observation": t.observation} if t.observation else {}),
                        "model_s": round(t.model_s, 3),
                        "env_s": round(t.env_s, 3),
                        "prompt_tokens": len(t.call.prompt_token_ids),
                        "output_tokens": len(t.call.output_token_ids),
                        "version": t.call.version,
                        "model": t.call.model,  # the served name that answered (a LoRA run: its adapter)
                        "images": len(t.call.images),
                        "attempts": t.call.attempts,
                    }
                )
                if self.screenshots_dir is not None and t.call.images:
                    d = self.screenshots_dir / episode_id
                    d.mkdir(parents=True, exist_ok=True)
                    (d / f"turn{i:02d}.png").write_bytes(t.call.images[-1])
                    shots += len(t.call.images[-1])
            if shots and self.screenshots_dir is not None:
                written.append((self.screenshots_dir / episode_id, shots))
            record = {
                "time": time.time(),
                "group": group_id,
                "episode": episode_id,
                "task_id": ep.task_id,
                "seed": ep.seed,
                "instruction": ep.instruction,
                "status": ep.status,
                "error": ep.error,
                "task_reward": ep.task_reward,
                **({"verdict": ep.verdict} if ep.verdict else {}),
                "format_failures": ep.format_failures,
                "advantage": advantage_of.get(id(ep)),
                "wall_s": round(ep.wall_s, 3),
                "turns": turns,
            }
            lines.append(json.dumps(record, ensure_ascii=False))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            with open(self.path, "a") as f:
                f.write("\n".join(lines) + "\n")
            for folder, size in written:
                self._keep_within_budget(folder, size)
