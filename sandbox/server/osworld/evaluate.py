"""Scoring a task as OSWorld's DesktopEnv.evaluate does: `postconfig` steps, then each metric on its getters'
values, combined under `conj` ("and": any 0 is 0, else the mean; "or": any 1 is 1, else the maximum).
A result getter's FileNotFoundError scores that metric 0; the expected getter's or the metric's is the
evaluation's error, as in OSWorld. Deliberate difference: under "or", OSWorld's loop then reads an unbound
(or the previous metric's) result and raises or scores stale state; here that metric scores 0 and the
others are scored."""

from __future__ import annotations

from typing import Any

from sandbox.server.osworld.env import TaskEnv, TaskSetupError
from sandbox.server.osworld.getters import GETTERS
from sandbox.server.osworld.metrics import metric
from sandbox.server.osworld.steps import run_steps


def as_list(v: Any, n: int) -> list[Any]:
    """OSWorld's single-or-list fields, as a list of `n`."""
    if isinstance(v, list):
        return v
    return [v] * n


def setup(env: TaskEnv, task: dict[str, Any], where: str) -> None:
    """The task's `config` steps; one that fails is the box's error (a 500), naming the task `where`."""
    try:
        run_steps(env, task.get("config") or [], "config")
    except TaskSetupError as e:
        raise RuntimeError(f"{where}: {e}") from None


def verdict(env: TaskEnv, task: dict[str, Any], where: str, gave_up: bool = False) -> dict[str, Any]:
    """A runtime's evaluate answer: {'reward', 'done', 'info': {'metrics'}}."""
    try:
        out = evaluate(env, task, gave_up)
    except TaskSetupError as e:
        raise RuntimeError(f"{where}: {e}") from None
    return {"reward": out["score"], "done": out["score"] == 1.0, "info": {"metrics": out["metrics"]}}


def evaluate(env: TaskEnv, task: dict[str, Any], gave_up: bool = False) -> dict[str, Any]:
    """{'score': float, 'metrics': [{'func', 'score'}...]}. `gave_up`: the agent's last action declared the
    task impossible (OSWorld's FAIL): an `infeasible` task's only success, any other task's 0."""
    ev = task["evaluator"]
    run_steps(env, ev.get("postconfig") or [], "evaluator.postconfig")
    funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
    if funcs == ["infeasible"] or gave_up:
        score = float(gave_up and funcs == ["infeasible"])
        return {
            "score": score,
            "metrics": [{"func": "infeasible" if funcs == ["infeasible"] else "gave_up", "score": score}],
        }
    n = len(funcs)
    results = as_list(ev.get("result"), n)
    expecteds = as_list(ev.get("expected"), n)
    options = [o or {} for o in as_list(ev.get("options"), n)]
    conj = ev.get("conj", "and")
    scores: list[dict[str, Any]] = []
    for func, res_spec, exp_spec, opts in zip(funcs, results, expecteds, options, strict=False):
        try:
            result = GETTERS[res_spec["type"]](env, res_spec)
        except FileNotFoundError:
            score = 0.0
        else:
            if exp_spec:
                expected = GETTERS[exp_spec["type"]](env, exp_spec)
                score = float(metric(func)(result, expected, **opts))
            else:
                score = float(metric(func)(result, **opts))
        scores.append({"func": func, "score": score})
        if conj == "and" and score == 0.0:
            break
        if conj == "or" and score == 1.0:
            break
    values = [s["score"] for s in scores]
    if conj == "or":
        total = 1.0 if 1.0 in values else max(values)
    else:
        total = 0.0 if 0.0 in values else sum(values) / len(values)
    return {"score": total, "metrics": scores}
