"""The viewer's reading of a run folder and its pages, on records in the recorder's format (the real
browser and a real run: tests/viewer/test_viewer_real.py)."""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path

from cua_agent.viewer import pages, plots
from cua_agent.viewer.runs import Run


def episode(
    ep: str, group: str, reward: float, output: str = "<tool_call>{}</tool_call>", x: int = 50
) -> dict:
    return {
        "time": 0.0, "group": group, "episode": ep, "task_id": "miniwob/click-test", "seed": 7,
        "instruction": "Click the button.", "status": "task_done", "error": None, "task_reward": reward,
        "format_failures": 0, "advantage": 1.0 if reward else -1.0, "wall_s": 1.0,
        "turns": [{"output": output, "action": {"type": "click", "x": x, "y": 60}, "note": "ok", "model_s": 0.5,
                   "env_s": 0.1, "prompt_tokens": 900, "output_tokens": 30, "version": 3, "images": 1,
                   "attempts": 1}],
    }  # fmt: skip


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\0" + b"\x80" * width * 3 for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )


def write(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:
        f.write("".join(lines))


def test_a_run_in_progress_grows_on_refresh_and_a_torn_or_malformed_line_does_not_break_it(tmp_path: Path):
    rollouts = tmp_path / "rollouts.jsonl"
    wrong_type = {**episode("aaaaaa09", "g1", 1.0), "advantage": "high"}
    write(
        rollouts,
        [json.dumps(episode("aaaaaa01", "g1", 1.0)) + "\n", "{not json\n", json.dumps(wrong_type) + "\n"],
    )
    run = Run(tmp_path)
    run.refresh()
    assert [e.episode for e in run.episodes()] == ["aaaaaa01"]
    assert run.files["rollouts.jsonl"].skipped == [2, 3]
    # a line still being written (no newline yet) waits; once complete, it is read, and nothing twice
    line = json.dumps(episode("aaaaaa02", "g1", 0.0))
    write(rollouts, [line[:40]])
    run.refresh()
    assert len(run.episodes()) == 1
    write(rollouts, [line[40:] + "\n"])
    run.refresh()
    assert [e.episode for e in run.episodes()] == ["aaaaaa01", "aaaaaa02"]
    assert [e.success for e in run.episodes()] == [True, False]
    html = pages.index(run, {})
    assert "lines 2, 3" in html and html.count("class='group'") == 1


def test_a_group_page_escapes_model_output_and_reports_a_missing_screenshot(tmp_path: Path):
    write(
        tmp_path / "rollouts.jsonl",
        [json.dumps(episode("bbbbbb01", "g1", 1.0, output="<script>alert(1)</script>", x=40)) + "\n",
         json.dumps(episode("bbbbbb02", "g1", 0.0)) + "\n"],
    )  # fmt: skip
    shots = tmp_path / "screenshots" / "bbbbbb01"
    shots.mkdir(parents=True)
    (shots / "turn00.png").write_bytes(png(320, 200))
    run = Run(tmp_path)
    run.refresh()
    html = pages.group(run, "rollouts.jsonl", "g1")
    assert html is not None and "<script>" not in html and "&lt;script&gt;" in html
    assert "viewBox='0 0 320 200'" in html  # the marker is drawn in the screenshot's own pixels
    assert "<circle class='marker' data-type='click' cx='40' cy='60'" in html
    assert html.count("screenshot not kept") == 1  # the second episode's
    assert "advantage +1.000" in html and "advantage -1.000" in html
    assert pages.group(run, "rollouts.jsonl", "nope") is None and pages.group(run, "../x", "g1") is None


def test_a_screenshot_outside_the_run_cannot_be_asked_for(tmp_path: Path):
    write(tmp_path / "rollouts.jsonl", [json.dumps(episode("cccccc01", "g1", 1.0)) + "\n"])
    run = Run(tmp_path)
    run.refresh()
    f = run.files["rollouts.jsonl"]
    assert f.screenshot("../../etc", 0) is None and f.screenshot("cccccc01", 0) is None


def test_plots_hold_each_series_with_a_point_per_step_that_has_it(tmp_path: Path):
    records = [
        {"global_step": 0, "episodes": {"all/success_rate": 0.25}, "eval": {}, "faults": {"groups_filtered": 1},
         "timing": {"train_step": 12.0}},
        {"global_step": 1, "episodes": {"all/success_rate": 0.5}, "eval": {"eval/all/success_rate": 0.4},
         "faults": {"groups_filtered": 0}, "timing": {"train_step": 11.0}},
    ]  # fmt: skip
    steps = tmp_path / "steps.jsonl"
    steps.write_text("\n".join(json.dumps(r) for r in records) + "\nnot a record\n")
    loaded = plots.load_steps([steps])
    assert [r["global_step"] for r in loaded] == [0, 1]
    success = next(c for c in plots.CHARTS if c.name == "success")
    assert plots.points(loaded, success.series[0]) == [(1, 0.25), (2, 0.5)]
    assert plots.points(loaded, success.series[1]) == [(2, 0.4)]  # held-out only where it ran
    svg = plots.svg(success, loaded)
    assert (
        'data-label="training episodes" data-points="2"' in svg
        and 'data-label="held-out" data-points="1"' in svg
    )
    written = plots.write(loaded, tmp_path / "plots", "t")
    assert {p.name for p in written} >= {"success.svg", "time.svg", "groups.svg", "plots.html"}


def test_filters_narrow_the_groups_and_the_newest_come_first(tmp_path: Path):
    lines = []
    for i, (group, reward, version) in enumerate([("g1", 1.0, 1), ("g1", 0.0, 1), ("g2", 0.0, 2)]):
        e = episode(f"dddddd0{i}", group, reward)
        e["time"], e["turns"][0]["version"] = float(i), version
        lines.append(json.dumps(e) + "\n")
    write(tmp_path / "rollouts.jsonl", lines)
    run = Run(tmp_path)
    run.refresh()

    def listed(q: dict[str, str]) -> list[str]:
        html = pages.index(run, q)
        return [g for g in ("g2", "g1") if f"id={g}'" in html]

    assert listed({}) == ["g2", "g1"] and pages.index(run, {}).index("id=g2") < pages.index(run, {}).index(
        "id=g1"
    )
    assert listed({"outcome": "success"}) == ["g1"]
    assert listed({"outcome": "failure"}) == ["g2", "g1"]
    assert listed({"version": "2"}) == ["g2"]
    assert listed({"task": "miniwob/other"}) == []


def test_plots_show_one_trial_the_newest_by_default_and_link_the_others(tmp_path: Path):
    """A folder holds one steps.jsonl per trial (make local starts a new trial each run): merging them would
    draw two runs' step 1 as one."""
    for trial, success in (("old", 0.1), ("new", 0.9)):
        d = tmp_path / "logs" / "me" / "cua-local" / trial
        d.mkdir(parents=True)
        (d / "steps.jsonl").write_text(
            json.dumps({"global_step": 0, "episodes": {"all/success_rate": success}}) + "\n"
        )
        time.sleep(0.01)  # "new" is written last
    run = Run(tmp_path)
    assert list(run.trials()) == ["me/cua-local/new", "me/cua-local/old"]
    html = pages.plots_page(run, {})
    assert "me/cua-local/new: 1 steps" in html and "trial=me%2Fcua-local%2Fold" in html
    assert "me/cua-local/old: 1 steps" in pages.plots_page(run, {"trial": "me/cua-local/old"})
