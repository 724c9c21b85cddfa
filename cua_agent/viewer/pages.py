"""The viewer's HTML: the run's groups with filters, a group's episodes side by side (what GRPO compared),
each turn's screenshot with its action drawn on it. Everything a record holds is escaped: model outputs
are untrusted text."""

from __future__ import annotations

from collections import defaultdict
from html import escape
from typing import Any
from urllib.parse import urlencode

from cua_agent.viewer import plots
from cua_agent.viewer.runs import EpisodeSummary, Run, png_size

MAX_GROUPS = 300  # newest first; the filters narrow the rest

STYLE = """
body { font-family: sans-serif; margin: 16px; color: #222; }
table { border-collapse: collapse; } td, th { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: left; }
.ok { color: #17803d; } .fail { color: #b3261e; } .warn { background: #fff4ce; padding: 6px; }
.episodes { display: flex; gap: 12px; overflow-x: auto; align-items: flex-start; }
.episode { min-width: 340px; max-width: 420px; border: 1px solid #ccc; padding: 8px; }
.shot { position: relative; } .shot img { width: 100%; display: block; }
.shot svg { position: absolute; left: 0; top: 0; width: 100%; height: 100%; }
.missing { background: #eee; color: #666; padding: 24px 8px; text-align: center; }
pre { white-space: pre-wrap; word-break: break-all; background: #f6f6f6; padding: 4px; font-size: 12px; }
.meta { color: #666; font-size: 12px; } .turn { border-top: 1px dashed #bbb; margin-top: 8px; padding-top: 6px; }
pre.diff { background: #eef6ff; } pre.observation { background: #1e1e1e; color: #e6e6e6; }
"""


def page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<p><a href='/'>groups</a> · <a href='/plots'>plots</a></p>{body}</body></html>"
    )


def _skipped_warning(run: Run) -> str:
    notes = [
        f"{escape(f.name)}: line{'s' if len(f.skipped) > 1 else ''} "
        f"{', '.join(map(str, f.skipped[:10]))}{' ...' if len(f.skipped) > 10 else ''}"
        for f in run.files.values()
        if f.skipped
    ]
    if not notes:
        return ""
    return f"<p class='warn' id='skipped'>Skipped lines that are not episode records: {'; '.join(notes)}</p>"


def _matches(e: EpisodeSummary, q: dict[str, str]) -> bool:
    if q.get("src") and e.source != q["src"]:
        return False
    if q.get("task") and e.task_id != q["task"]:
        return False
    if q.get("outcome") in ("success", "failure") and e.success != (q["outcome"] == "success"):
        return False
    if q.get("version") and q["version"] not in {str(v) for v in e.versions}:
        return False
    return not (q.get("status") and e.status != q["status"])


def _select(name: str, label: str, options: list[str], q: dict[str, str]) -> str:
    opts = "".join(
        f"<option value='{escape(o)}'{' selected' if q.get(name) == o else ''}>{escape(o) or 'all'}</option>"
        for o in ["", *options]
    )
    return f"<label>{label} <select name='{name}'>{opts}</select></label> "


def index(run: Run, q: dict[str, str]) -> str:
    episodes = run.episodes()
    form = (
        "<form method='get'>"
        + _select("src", "file", sorted(run.files), q)
        + _select("task", "task", sorted({e.task_id for e in episodes}), q)
        + _select("outcome", "outcome", ["success", "failure"], q)
        + _select(
            "version",
            "weight version",
            [str(v) for v in sorted({v for e in episodes for v in e.versions})],
            q,
        )
        + _select("status", "end", sorted({e.status for e in episodes}), q)
        + "<button>filter</button></form>"
    )
    groups: dict[tuple[str, str], list[EpisodeSummary]] = defaultdict(list)
    for e in episodes:
        if _matches(e, q):
            groups[(e.source, e.group)].append(e)
    newest = sorted(groups.items(), key=lambda g: max(e.time for e in g[1]), reverse=True)
    rows = []
    for (source, group), members in newest[:MAX_GROUPS]:
        wins = sum(e.success for e in members)
        versions = sorted({v for e in members for v in e.versions})
        rewards = " ".join(f"{e.task_reward:g}" if e.task_reward is not None else "–" for e in members)
        link = "/group?" + urlencode({"src": source, "id": group})
        rows.append(
            f"<tr class='group'><td><a href='{escape(link)}'>{escape(group)}</a></td><td>{escape(source)}</td>"
            f"<td>{escape(members[0].task_id)}</td><td>{escape(str(members[0].seed))}</td>"
            f"<td>{', '.join(map(str, versions))}</td><td>{len(members)}</td>"
            f"<td class='{'ok' if wins else 'fail'}'>{wins}</td><td>{escape(rewards)}</td></tr>"
        )
    more = (
        f"<p>{len(newest) - MAX_GROUPS} older groups not shown: filter to find them.</p>"
        if len(newest) > MAX_GROUPS
        else ""
    )
    table = (
        "<table><tr><th>group</th><th>file</th><th>task</th><th>seed</th><th>weight versions</th>"
        "<th>episodes</th><th>solved</th><th>task rewards</th></tr>" + "".join(rows) + "</table>"
    )
    head = (
        f"<h1>{escape(str(run.root))}</h1><p>{len(episodes)} episodes in {len(run.files)} file(s); "
        f"{len(groups)} groups match.</p>"
    )
    return page(f"{run.root.name}: groups", head + _skipped_warning(run) + form + table + more)


def group(run: Run, source: str, group_id: str) -> str | None:
    f = run.files.get(source)
    if f is None:
        return None
    members = [e for e in f.episodes if e.group == group_id]
    if not members:
        return None
    columns = "".join(_episode(run, source, e, f.read(e.offset)) for e in members)
    wins = sum(e.success for e in members)
    head = (
        f"<h1>group {escape(group_id)}</h1><p>{escape(members[0].task_id)}, seed {escape(str(members[0].seed))} · "
        f"{len(members)} episodes, {wins} solved · {escape(source)}</p>"
    )
    return page(f"group {group_id}", head + f"<div class='episodes'>{columns}</div>")


def _episode(run: Run, source: str, e: EpisodeSummary, record: dict[str, Any]) -> str:
    adv = f"{e.advantage:+.3f}" if e.advantage is not None else "not trained"
    head = (
        f"<div class='episode' id='ep-{e.episode}'><b class='{'ok' if e.success else 'fail'}'>"
        f"{'solved' if e.success else 'not solved'}</b> · task reward {escape(str(e.task_reward))} · "
        f"advantage {escape(adv)}<br>"
        f"<span class='meta'>episode {e.episode} · ended: {escape(e.status)} · {e.turns} turns · "
        f"{e.format_failures} format failures</span>"
    )
    if record.get("error"):
        head += f"<pre class='fail'>{escape(str(record['error']))}</pre>"
    if record.get("instruction"):
        head += f"<p>{escape(str(record['instruction']))}</p>"
    turns = "".join(_turn(run, source, e.episode, i, t) for i, t in enumerate(record.get("turns") or []))
    return head + turns + "</div>"


def _terminal_turn(i: int, t: dict[str, Any], call: dict[str, Any] | None) -> str:
    """A terminal agent's turn: its output, the tool call (a command, a file, a diff) and what came back."""
    if call is None:
        parsed = f"<div class='fail'>{escape(str(t.get('note') or 'no tool call'))}</div>"
    else:
        args = {k: v for k, v in call.items() if k != "tool"}
        shown = {"run": "$ " + str(args.get("command", "")), "submit": "submit"}.get(
            str(call.get("tool")), f"{call.get('tool')} {args.get('path', '')}".strip()
        )
        parsed = f"<div class='action'>{escape(shown)}</div>"
        body = args.get("patch") or args.get("content")
        if body:
            parsed += f"<pre class='diff'>{escape(str(body))}</pre>"
    observation = t.get("observation")
    seen = f"<pre class='observation'>{escape(str(observation))}</pre>" if observation else ""
    meta = (
        f"model {t.get('model_s')} s · box {t.get('env_s')} s · weight version {t.get('version')} · "
        f"{t.get('prompt_tokens')} prompt tokens · attempts {t.get('attempts')}"
    )
    return (
        f"<div class='turn'><b>turn {i}</b><pre class='output'>{escape(str(t.get('output', '')))}</pre>"
        f"{parsed}{seen}<div class='meta'>{escape(meta)}</div></div>"
    )


def _turn(run: Run, source: str, episode: str, i: int, t: dict[str, Any], full_size: bool = False) -> str:
    action = t.get("action") if isinstance(t.get("action"), dict) else None
    if (action is not None and "tool" in action) or "observation" in t:
        return _terminal_turn(i, t, action)
    path = run.files[source].screenshot(episode, i)
    size = png_size(path) if path else None
    where = urlencode({"src": source, "ep": episode, "turn": i})
    if path is None or size is None:
        shot = "<div class='missing'>screenshot not kept (agent.save_screenshots off, or pruned)</div>"
    else:
        style = f" style='width:{size[0]}px'" if full_size else ""
        shot = (
            f"<a href='/turn?{escape(where)}'><div class='shot'{style}><img src='/shot?{escape(where)}' "
            f"alt='turn {i}'><svg viewBox='0 0 {size[0]} {size[1]}' preserveAspectRatio='none'>"
            f"{marker(action)}</svg></div></a>"
        )
    label = f"<b>turn {i}</b>"
    parsed = (
        f"<div class='action'>{escape(describe(action))}</div>"
        if action
        else f"<div class='fail'>{escape(str(t.get('note') or 'no action'))}</div>"
    )
    meta = (
        f"model {t.get('model_s')} s · sandbox {t.get('env_s')} s · weight version {t.get('version')} · "
        f"{t.get('images')} image(s) · {t.get('prompt_tokens')} prompt tokens · attempts {t.get('attempts')}"
    )
    return (
        f"<div class='turn'>{shot + label if full_size else label + shot}<pre class='output'>{escape(str(t.get('output', '')))}</pre>"
        f"{parsed}<div class='meta'>{escape(meta)}</div></div>"
    )


def turn(run: Run, source: str, episode: str, i: int) -> str | None:
    """One turn at the screenshot's own size, the screenshot first (at the page's top left corner)."""
    f = run.files.get(source)
    summary = next((e for e in f.episodes if e.episode == episode), None) if f else None
    if summary is None:
        return None
    turns = f.read(summary.offset).get("turns") or []
    if not 0 <= i < len(turns):
        return None
    group = "/group?" + urlencode({"src": source, "id": summary.group})
    body = _turn(run, source, episode, i, turns[i], full_size=True)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>turn {i} of {escape(episode)}</title>"
        f"<style>{STYLE} body {{ margin: 0; }} .turn {{ border: 0; margin: 0; padding: 0; }}</style></head>"
        f"<body>{body}<p><a href='{escape(group)}'>its group</a> · <a href='/'>groups</a></p></body></html>"
    )


def describe(action: dict[str, Any]) -> str:
    kind = action.get("type")
    if kind == "drag":
        return f"drag ({action.get('x')}, {action.get('y')}) → ({action.get('to_x')}, {action.get('to_y')})"
    if kind == "scroll":
        return f"scroll at ({action.get('x')}, {action.get('y')}) by ({action.get('dx')}, {action.get('dy')})"
    if kind == "type":
        return f"type {action.get('text')!r}"
    if kind == "key":
        return f"key {action.get('keys')}"
    if "x" in action and "y" in action:
        return f"{kind} ({action['x']}, {action['y']})"
    return str(kind)


def marker(action: dict[str, Any] | None) -> str:
    """The action in the screenshot's own pixels (the SVG's viewBox is the screenshot's size)."""
    if not action or not isinstance(action.get("x"), int) or not isinstance(action.get("y"), int):
        return ""
    x, y, kind = action["x"], action["y"], escape(str(action.get("type")))
    dot = (
        f"<circle class='marker' data-type='{kind}' cx='{x}' cy='{y}' r='14' fill='none' stroke='#ff1744' "
        f"stroke-width='4'/><circle cx='{x}' cy='{y}' r='3' fill='#ff1744'/>"
    )
    to = action.get("to_x"), action.get("to_y")
    if action.get("type") == "drag" and all(isinstance(v, int) for v in to):  # a record is not trusted
        return dot + (
            f"<line x1='{x}' y1='{y}' x2='{to[0]}' y2='{to[1]}' stroke='#ff1744' stroke-width='4'/>"
            f"<circle cx='{to[0]}' cy='{to[1]}' r='8' fill='#ff1744'/>"
        )
    if action.get("type") == "scroll":
        dx, dy = (v if isinstance(v, int) else 0 for v in (action.get("dx"), action.get("dy")))
        return dot + (
            f"<line x1='{x}' y1='{y}' x2='{x + 40 * dx}' y2='{y + 40 * dy}' stroke='#ff1744' stroke-width='4' "
            "stroke-dasharray='8 4'/>"
        )
    return dot


def plots_page(run: Run, q: dict[str, str]) -> str:
    trials = run.trials()
    if not trials:
        return page("plots", "<p>No steps.jsonl in this folder (an evaluation has no training steps).</p>")
    trial = q.get("trial") if q.get("trial") in trials else next(iter(trials))
    records = plots.load_steps([trials[trial]])
    charts = "\n".join(plots.svg(c, records) for c in plots.CHARTS)
    others = " · ".join(
        f"<a href='/plots?{escape(urlencode({'trial': t}))}'>{escape(t)}</a>" for t in trials if t != trial
    )
    head = f"<h1>{escape(trial)}: {len(records)} steps</h1>" + (
        f"<p>other trials: {others}</p>" if others else ""
    )
    return page("plots", head + charts)
