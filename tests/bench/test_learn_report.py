"""bench/learn.py's bookkeeping: per-task tables, both kinds of control, learning.json. The real runs
(train_areal.py and the evaluation command, ~15-60 min) are stood in for by writing the reports they write;
`make learn` runs them for real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.learn as learn
from cua_agent.evaluate.report import wilson

TASKS = ("miniwob/click-test", "miniwob/focus-text")


def figures(successes: int, episodes: int = 200) -> dict:
    return {
        "episodes": episodes,
        "successes": successes,
        "success_rate": successes / episodes,
        "ci95": list(wilson(successes, episodes)),
    }


def report(per_task: dict[str, int]) -> dict:
    total = sum(per_task.values())
    return {
        "overall": figures(total, 200 * len(per_task)),
        "tasks": {t: figures(s) for t, s in per_task.items()},
    }


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """Stands in for the evaluation command (step 0: 60 and 30 of 200) and train_areal.py (GRPO rises by
    20 successes a task every 20 steps, lr = 0 stays)."""
    calls: list[list[str]] = []

    def run(cmd: list[str], log: Path) -> None:
        calls.append(cmd)
        if "cua_agent.warmstart" in cmd:
            out = Path(cmd[cmd.index("--out") + 1])
            out.mkdir(parents=True)
            (out / "config.json").write_text("{}")
            return
        if "cua_agent.evaluate" in cmd:
            out = Path(cmd[cmd.index("--out") + 1])
            out.mkdir(parents=True)
            tasks = cmd[cmd.index("--task-ids") + 1].split(",")
            (out / "report.json").write_text(json.dumps(report(dict(zip(tasks, (60, 30), strict=False)))))
            return
        opts = dict(a.split("=", 1) for a in cmd if "=" in a)
        root, lr = Path(opts["cluster.fileroot"]), float(opts["actor.optimizer.lr"])
        tasks = opts["tasks.task_ids"].strip("[]").split(",")
        for step in (20, 40):
            rise = step if lr > 0 else 0
            out = root / "eval" / f"step{step}"
            out.mkdir(parents=True)
            (out / "report.json").write_text(
                json.dumps(report(dict(zip(tasks, (60 + rise, 30 + rise), strict=False))))
            )

    monkeypatch.setattr(learn, "run", run)
    monkeypatch.setattr(learn, "LEARN_WARM", tmp_path / "learn-warm")
    model = tmp_path / "warm"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return calls


@pytest.mark.parametrize("control", ["lr0", "warm-start"])
def test_each_task_gets_its_table_against_the_control(runs, tmp_path, capsys, control):
    out = tmp_path / "learn"
    argv = ["--out", str(out), "--model", str(tmp_path / "warm"), "--task-ids", ",".join(TASKS)]
    assert learn.main([*argv, "--control", control]) == 0
    trained = [c for c in runs if "train_areal.py" in c]
    assert len(trained) == (2 if control == "lr0" else 1)  # the warm-start control trains no second arm
    assert any(f"tasks.task_ids=[{','.join(TASKS)}]" in c for c in trained[0])

    text = capsys.readouterr().out
    for task in (*TASKS, "all tasks"):
        assert f"{task}:\n| step |" in text
    assert "| 40 | 50.0% " in text and "+20.0 pts" in text  # click-test: 100/200 against 60/200
    result = json.loads((out / "learning.json").read_text())
    assert result["final_step"] == 40
    assert result["final"]["miniwob/click-test"]["difference_pts"] == 20.0
    assert result["final"]["miniwob/focus-text"]["difference_pts"] == 20.0
    assert result["final"]["all"]["difference_pts"] == 20.0
    assert result["final"]["miniwob/click-test"]["p_one_sided"] < 0.01
    assert (out / "learning.png").stat().st_size > 0


def test_by_default_the_warm_start_of_the_task_is_built_first_then_trained_from(runs, tmp_path):
    assert learn.main(["--out", str(tmp_path / "learn")]) == 0
    warm, step0, grpo = runs  # the warm-start control: no second run
    assert warm[warm.index("--out") + 1] == str(tmp_path / "learn-warm")
    assert warm[warm.index("--tasks") + 1] == str(learn.LEARN_TASKS)
    assert warm[warm.index("--task-ids") + 1] == "miniwob/click-test"
    assert "--max-turns" not in warm  # the shipped recipe's (episodes end at the first click)
    assert step0[step0.index("--checkpoint") + 1] == str(tmp_path / "learn-warm")
    assert f"actor.path={tmp_path / 'learn-warm'}" in grpo
    assert "tasks.task_ids=[miniwob/click-test]" in grpo


def test_another_tasks_warm_start_has_its_own_folder_and_the_runs_turns(runs, tmp_path):
    """copy-paste (six actions) next to click-test: its demonstrations need the run's 8 turns, and building
    it must not replace click-test's warm start."""
    copy = "tasks/miniwob-copy-paste-400x300.jsonl"
    argv = ["--tasks", copy, "--task-ids", "miniwob/copy-paste", "--max-turns", "8"]
    assert learn.main(["--out", str(tmp_path / "learn"), *argv]) == 0
    warm, step0, grpo = runs
    folder = str(tmp_path / "learn-warm-miniwob-copy-paste")
    assert warm[warm.index("--out") + 1] == folder and warm[warm.index("--max-turns") + 1] == "8"
    assert step0[step0.index("--checkpoint") + 1] == folder and f"actor.path={folder}" in grpo
    assert "agent.max_turns=8" in grpo


def test_the_plots_labels_keep_their_spaces(tmp_path):
    """PIL's default font drew "GRPO step" as "GRPOstep": the plot's font draws a space."""
    font = learn.label_font()
    assert font.getlength("GRPO step") > font.getlength("GRPOstep") + 2
    curves = {arm: {0: figures(60), 20: figures(60 + 20 * (arm == "grpo"))} for arm in ("grpo", "control")}
    learn.plot(curves, tmp_path / "learning.png", "click-test: held-out success, 200 seeds", "the warm start")
    assert (tmp_path / "learning.png").stat().st_size > 0


def test_make_learns_warm_start_is_the_one_setup_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Setup builds `python -m cua_agent.warmstart --small-screen`; make learn asks for its default warm
    start with its own arguments. Different inputs would make every make learn rebuild it (~6 min)."""
    from cua_agent.warmstart.__main__ import inputs_hash, parse_args

    calls: list[list[str]] = []
    monkeypatch.setattr(learn, "run", lambda cmd, log: calls.append(cmd))
    args = learn.parse_args(["--out", str(tmp_path)])
    args.model = learn.default_warm_start(args.task_ids)
    learn.warm_start(args)
    [cmd] = calls
    asked = parse_args(cmd[cmd.index("cua_agent.warmstart") + 1 :])
    built = parse_args(["--small-screen"])
    assert (asked.out, Path(asked.tasks)) == (built.out, Path(built.tasks))
    assert inputs_hash(asked) == inputs_hash(built)
