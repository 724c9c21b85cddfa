"""Training plots from a run's steps.jsonl: success and task reward (training episodes and held-out
evaluations), format failures, episode length, filtered and rejected groups, infrastructure failures,
where each step's time went, and the staleness of the trained samples.

Each plot is a self-contained SVG (no plotting library in either environment; vector output suits papers
and scales in the viewer):

    python -m cua_agent.viewer.plots outputs/<experiment> [--out DIR]   # DIR/<name>.svg + DIR/plots.html
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Record = dict[str, Any]
COLOURS = ("#c83c28", "#3c5ac8", "#2a9d4b", "#b07d10", "#7a3fb0", "#555555")


@dataclass(frozen=True)
class Series:
    label: str
    value: Callable[[Record], float | None]


@dataclass(frozen=True)
class Chart:
    name: str  # file name
    title: str
    series: tuple[Series, ...]
    percent: bool = False


def _get(section: str, key: str) -> Callable[[Record], float | None]:
    def value(r: Record) -> float | None:
        v = (r.get(section) or {}).get(key)
        return float(v) if isinstance(v, (int, float)) else None

    return value


def _train_and_held_out(name: str, title: str, train_key: str, eval_key: str, percent: bool = False) -> Chart:
    """A metric of the step's training episodes beside the held-out evaluation's, where one ran."""
    return Chart(
        name,
        title,
        (Series("training episodes", _get("episodes", f"all/{train_key}")),
         Series("held-out", _get("eval", f"eval/all/{eval_key}"))),
        percent,
    )  # fmt: skip


CHARTS = (
    _train_and_held_out("success", "Success rate", "success_rate", "success_rate", percent=True),
    _train_and_held_out("reward", "Mean task reward", "task_reward", "task_reward"),
    _train_and_held_out(
        "format_failures", "Format failures (share of turns)", "format_failure_rate", "format_failure_rate", True
    ),
    _train_and_held_out("turns", "Episode length (turns)", "episode_turns", "turns"),
    Chart(
        "groups",
        "Groups per step",
        (Series("filtered (equal rewards)", _get("faults", "groups_filtered")),
         Series("rejected (infrastructure)", _get("faults", "groups_rejected")),
         Series("equal kept", _get("faults", "equal_groups_kept"))),
    ),
    Chart(
        "infra",
        "Infrastructure failures per step",
        (Series("episodes lost", _get("faults", "infra_failures")),
         Series("server errors", _get("faults", "server_errors")),
         Series("server recoveries", _get("faults", "server_recoveries")),
         Series("weight re-pushes", _get("faults", "weight_repushes")),
         Series("stale servers", _get("faults", "stale_servers"))),
    ),
    Chart(
        "time",
        "Step time (s)",
        (Series("train step", _get("timing", "train_step")),
         Series("rollout wait", _get("timing", "rollout")),
         Series("weight update", _get("timing", "update_weights")),
         Series("evaluation", _get("timing", "eval"))),
    ),
    Chart(
        "staleness",
        "Staleness of trained samples (weight versions)",
        (Series("mean", _get("versions", "sample_staleness_theta_avg")),
         Series("max", _get("versions", "sample_staleness_theta_max"))),
    ),
)  # fmt: skip


def load_steps(paths: list[Path]) -> list[Record]:
    """The step records, in step order; a resumed run's re-recorded step keeps its last record, and a line
    that is not a step record is skipped with a warning."""
    by_step: dict[int, Record] = {}
    for path in paths:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            try:
                r = json.loads(line)
                by_step[int(r["global_step"])] = r
            except (ValueError, KeyError, TypeError):
                log.warning("%s:%d: not a step record, skipped", path, n)
    return [by_step[s] for s in sorted(by_step)]


def points(records: list[Record], series: Series) -> list[tuple[int, float]]:
    """(step, value) where the step has a value; steps count from 1 as the training log does."""
    out = []
    for r in records:
        v = series.value(r)
        if v is not None:
            out.append((int(r["global_step"]) + 1, v))
    return out


def svg(chart: Chart, records: list[Record], width: int = 560, height: int = 260) -> str:
    left, right, top, bottom = 56, 16, 34, 64
    lines = [(s, points(records, s)) for s in chart.series]
    lines = [(s, p) for s, p in lines if p]
    steps = [x for _, p in lines for x, _ in p] or [1]
    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    top_value = max([v for _, p in lines for _, v in p] or [0.0])
    y1 = 1.0 if chart.percent else _nice(top_value)

    def xy(x: float, y: float) -> tuple[float, float]:
        return (
            left + (width - left - right) * (x - x0) / (x1 - x0),
            top + (height - top - bottom) * (1 - y / y1),
        )

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{chart.name}" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="13" font-weight="bold">{escape(chart.title)}</text>',
    ]
    for i in range(5):
        value = y1 * i / 4
        _, y = xy(x0, value)
        label = f"{value:.0%}" if chart.percent else f"{value:g}"
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for step in _ticks(x0, x1):
        x, y = xy(step, 0)
        out.append(f'<text x="{x:.1f}" y="{y + 16:.1f}" text-anchor="middle">{step}</text>')
    out.append(f'<text x="{width - right}" y="{height - bottom + 30}" text-anchor="end">step</text>')
    if not lines:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#888">no data</text>')
    for i, (s, p) in enumerate(lines):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(*q) for q in p))
        out.append(
            f'<polyline class="series" data-label="{escape(s.label)}" data-points="{len(p)}" fill="none" '
            f'stroke="{colour}" stroke-width="2" points="{coords}"/>'
        )
        for q in p:
            x, y = xy(*q)
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>')
        lx = left + 150 * (i % 3)
        ly = height - 12 - 14 * (1 - i // 3)
        out.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="3" fill="{colour}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly - 4}">{escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _nice(v: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above v (an axis top)."""
    if v <= 0:
        return 1.0
    scale = 10 ** len(str(int(v))) / 10 if v >= 1 else 1.0
    while v / scale < 1:
        scale /= 10
    for m in (1, 2, 5, 10):
        if v <= m * scale:
            return m * scale
    return 10 * scale


def _ticks(x0: int, x1: int, n: int = 8) -> list[int]:
    stride = max(1, -(-(x1 - x0) // n))
    return list(range(x0, x1 + 1, stride))


def write(records: list[Record], out: Path, title: str) -> list[Path]:
    """One SVG per chart and plots.html showing them all."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for chart in CHARTS:
        path = out / f"{chart.name}.svg"
        path.write_text(svg(chart, records))
        written.append(path)
    body = "\n".join(svg(c, records) for c in CHARTS)
    (out / "plots.html").write_text(
        f"<!doctype html><meta charset='utf-8'><title>{escape(title)}</title><h1>{escape(title)}</h1>\n{body}\n"
    )
    return [*written, out / "plots.html"]


def main(argv: list[str] | None = None) -> int:
    from cua_agent.viewer.runs import Run

    parser = argparse.ArgumentParser(
        prog="python -m cua_agent.viewer.plots", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run", type=Path, help="a training run's folder (outputs/<experiment>)")
    parser.add_argument("--trial", help="<user>/<experiment>/<trial> under RUN/logs; default: the newest")
    parser.add_argument("--out", type=Path, help="default: RUN/plots")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        trials = Run(args.run).trials()
    except FileNotFoundError as e:
        parser.error(str(e))
    if not trials:
        parser.error(f"no steps.jsonl under {args.run / 'logs'}: is it a training run's folder?")
    trial = args.trial or next(iter(trials))
    if trial not in trials:
        parser.error(f"--trial {trial}: not under {args.run / 'logs'}; there are: {', '.join(trials)}")
    records = load_steps([trials[trial]])
    written = write(records, args.out or args.run / "plots", f"{trial}: {len(records)} steps")
    print(f"{trial}: {len(records)} steps -> {written[-1]} and {len(written) - 1} SVG files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
