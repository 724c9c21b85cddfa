"""Learning, measured: GRPO from the tiny model's warm start against a control, on held-out seeds, through
the real stack: `train_areal.py` on configs/local_cpu.yaml (vLLM CPU server, podman sandboxes, AReaL's
PPOTrainer), the held-out evaluation of the `evaluation` config section every `--eval-every` steps, and
`python -m cua_agent.evaluate` on the warm start itself for step 0.

The control (`--control`) is either a second run identical in every respect but `lr = 0` (same initial
weights, seeds, sampling, steps, sandboxes, held-out seeds), or the warm start's own step-0 evaluation:
with lr = 0 the weights never move, so such a run samples exactly the warm start at every step, and the
evaluation alone costs half the wall time.

Prints a table per task (step, held-out success with its Wilson 95% interval, per arm, the difference
and a one-sided Fisher p), and writes DIR/learning.json and DIR/learning.png (the first task's curves).

    python bench/learn.py [--out outputs/learn] [--steps 60] [--eval-every 20] [--eval-episodes 200]
                          [--lr 1e-3] [--group-size 4] [--groups-per-step 16] [--control warm-start|lr0]
                          [--task-ids miniwob/click-test[,miniwob/focus-text]] [--tasks FILE] [--model DIR]

`make learn` runs it with the defaults (docs/warm-start.md, last section, has why these): click-test at
400x300 from the warm start setup builds on those rows (another task set's warm start is built by its first
run: about 6 minutes for one-turn tasks; later runs find it up to date).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf
from PIL import Image, ImageDraw, ImageFont

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cua_agent.evaluate.report import fisher_greater  # noqa: E402
from cua_agent.inference.local_server import SMALL_SCREEN_TASKS, SMALL_SCREEN_WARM_MODEL  # noqa: E402

CONFIG = REPO / "configs" / "local_cpu.yaml"
# The measured setting (docs/warm-start.md): click-test on a screen that fits it, from a warm start built on
# its rows there (the shipped warm start, at 1280x800, is make local's). The file also holds focus-text, a
# second click-family task: --task-ids miniwob/click-test,miniwob/focus-text trains and reports both.
LEARN_TASKS = SMALL_SCREEN_TASKS
LEARN_TASK_IDS = ("miniwob/click-test",)
LEARN_WARM = SMALL_SCREEN_WARM_MODEL  # setup builds it
COLOURS = {"grpo": (200, 60, 40), "control": (60, 90, 200)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "outputs" / "learn")
    ap.add_argument(
        "--model",
        type=Path,
        default=None,
        help=f"the warm start both arms start from; default: {LEARN_WARM} (another task set's: a folder beside "
        "it), built (or found up to date) for --tasks, --task-ids and --max-turns by python -m cua_agent.warmstart",
    )
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-episodes", type=int, default=200, help="held-out seeds a task, one episode each")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--groups-per-step", type=int, default=16, help="seeds a step, one group each")
    ap.add_argument(
        "--concurrent-groups", type=int, default=2, help="groups in flight (rollout.max_concurrent_rollouts)"
    )
    ap.add_argument("--task-ids", default=",".join(LEARN_TASK_IDS), help="comma-separated")
    ap.add_argument("--tasks", type=Path, default=LEARN_TASKS, help="task file (train and test rows)")
    ap.add_argument("--max-turns", type=int, default=None, help="default: the config's agent.max_turns")
    ap.add_argument(
        "--control",
        choices=("lr0", "warm-start"),
        default="warm-start",
        help="lr0: a second run at lr = 0; warm-start: the warm start's step-0 evaluation stands for every step "
        "(an lr = 0 run samples exactly that policy), which halves the wall time",
    )
    args = ap.parse_args(argv)
    config = OmegaConf.load(CONFIG)
    agent = config.agent
    args.warm_max_turns = args.max_turns  # the warm start's demonstrations: as long as the run's episodes
    if args.max_turns is None:
        args.max_turns = agent.max_turns
    args.tasks = args.tasks.resolve()
    # Rollouts sample at the config's temperature (training needs 1: docs/inference.md), and the
    # held-out evaluation samples the policy at the same one.
    args.temperature = agent.temperature
    return args


def run(cmd: list[str], log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    start = time.monotonic()
    with open(log, "wb") as out:
        # Its own session: Ctrl-C reaches it once, passed on from here, not as a second signal mid-stop.
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        rc, stopped_by = wait_passing_signals_on(proc)
    if stopped_by is not None:
        name = signal.Signals(stopped_by).name
        print(f"{name}: {' '.join(cmd[:4])} ... stopped (exit {rc}); log {log}", flush=True)
        raise SystemExit(128 + stopped_by)
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {rc}); log {log}:\n{tail}")
    print(f"  done in {time.monotonic() - start:.0f} s (log {log})", flush=True)


def wait_passing_signals_on(proc: subprocess.Popen) -> tuple[int, int | None]:
    """The command's exit status, and the signal that stopped this script if one did. SIGTERM and SIGINT go
    on to the command, whose graceful stop takes its boxes and vLLM server with it, and the script waits for
    that stop: killed at once, it left them all running."""
    received: list[int] = []

    def pass_on(signum: int, frame: object) -> None:
        received.append(signum)
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return rc, received[0] if received else None


def evaluate_start(args: argparse.Namespace) -> dict:
    """Step 0: the warm start, with the settings the runs' held-out evaluation uses (the config's agent
    section and the arguments the runs get)."""
    agent = OmegaConf.load(CONFIG).agent
    out = args.out / "step0"
    print(f"step 0: evaluating the warm start on {args.eval_episodes} held-out seeds", flush=True)
    run(
        [sys.executable, "-m", "cua_agent.evaluate", "--checkpoint", str(args.model), "--task-ids", args.task_ids,
         "--tasks", str(args.tasks),
         "--seeds-per-task", str(args.eval_episodes), "--max-turns", str(args.max_turns),
         "--history-screenshots", str(agent.history_screenshots), "--max-new-tokens", str(agent.max_new_tokens),
         "--max-prompt-tokens", str(agent.max_prompt_tokens), "--on-parse-failure", agent.on_parse_failure,
         "--model-family", agent.model_family, "--temperature", str(args.temperature),
         "--out", str(out)],
        args.out / "step0.log",
    )  # fmt: skip
    return json.loads((out / "report.json").read_text())


def train(arm: str, args: argparse.Namespace) -> dict[int, dict]:
    """One arm through train_areal.py; its held-out reports by step."""
    root = args.out / arm
    lr = args.lr if arm == "grpo" else 0.0
    print(
        f"{arm}: {args.steps} GRPO steps at lr {lr:g}, held-out evaluation every {args.eval_every}",
        flush=True,
    )
    run(
        [sys.executable, "train_areal.py", "--config", str(CONFIG),
         f"actor.path={args.model}", f"cluster.fileroot={root}", f"trial_name={arm}",
         f"total_train_steps={args.steps}", "total_train_epochs=1000",
         f"tasks.train_path={args.tasks}", f"tasks.task_ids=[{args.task_ids}]",
         f"train_dataset.batch_size={args.groups_per_step}",
         f"agent.group_size={args.group_size}", f"agent.min_group_size={args.group_size // 2}",
         "agent.filter_equal_reward_groups=true", f"agent.max_turns={args.max_turns}",
         f"actor.optimizer.lr={lr}",
         f"rollout.max_concurrent_rollouts={args.concurrent_groups}",
         "evaluation.enabled=true", f"evaluation.seeds_per_task={args.eval_episodes}",
         f"evaluation.temperature={args.temperature}", f"evaluator.freq_steps={args.eval_every}",
         "saver.freq_steps=null", f"recover.freq_steps={args.steps}"],
        args.out / f"{arm}.log",
    )  # fmt: skip
    reports = {}
    for path in (root / "eval").glob("step*/report.json"):
        reports[int(path.parent.name.removeprefix("step"))] = json.loads(path.read_text())
    if not reports:
        raise SystemExit(f"{arm}: no held-out report under {root / 'eval'} (see {args.out / f'{arm}.log'})")
    return reports


def per_task(curves: dict[str, dict[int, dict]], task: str | None) -> dict[str, dict[int, dict]]:
    """Each arm's held-out figures by step for one task (None: all tasks together)."""
    return {
        arm: {step: r["overall"] if task is None else r["tasks"][task] for step, r in c.items()}
        for arm, c in curves.items()
    }


def table(curves: dict[str, dict[int, dict]]) -> str:
    """One task's (or the overall) held-out success per step and arm, with the one-sided Fisher p."""
    lines = [
        "| step | GRPO success (95% CI) | control success (95% CI) | difference | p (Fisher, one-sided) |",
        "|---|---|---|---|---|",
    ]
    for step in sorted(set(curves["grpo"]) & set(curves["control"])):
        g, c = curves["grpo"][step], curves["control"][step]
        cell = [
            f"{s['success_rate']:.1%} ({s['ci95'][0]:.1%}–{s['ci95'][1]:.1%}, n={s['episodes']})"
            for s in (g, c)
        ]
        p = fisher_greater(g["successes"], g["episodes"], c["successes"], c["episodes"])
        diff = 100 * (g["success_rate"] - c["success_rate"])
        lines.append(f"| {step} | {cell[0]} | {cell[1]} | {diff:+.1f} pts | {p:.3g} |")
    return "\n".join(lines)


def tables(curves: dict[str, dict[int, dict]], tasks: list[str]) -> str:
    """A table per task; with several tasks, one for all of them together as well."""
    parts = [(t, per_task(curves, t)) for t in tasks] + (
        [("all tasks", per_task(curves, None))] if len(tasks) > 1 else []
    )
    return "\n\n".join(f"{name}:\n{table(c)}" for name, c in parts)


def control_label(control: str) -> str:
    return "an lr = 0 run" if control == "lr0" else "the warm start's evaluation"


def label_font(size: int = 13) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """DejaVu Sans (setup installs fonts-dejavu-core): PIL's default font draws no spaces ("GRPOstep")."""
    try:
        return ImageFont.truetype("DejaVuSans.ttf", size)
    except OSError:
        return ImageFont.load_default(size)


def plot(curves: dict[str, dict[int, dict]], path: Path, title: str, control: str) -> None:
    """Both arms' held-out success against the step, with their 95% intervals (PIL: the trainer
    environment has no plotting library)."""
    w, h, left, right, top, bottom = 720, 440, 70, 20, 40, 60
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    d.font = label_font()
    last = max(max(c) for c in curves.values()) or 1

    def xy(step: float, rate: float) -> tuple[float, float]:
        return left + (w - left - right) * step / last, top + (h - top - bottom) * (1 - rate)

    for tick in range(0, 101, 20):
        x0, y = xy(0, tick / 100)
        d.line([(x0, y), (w - right, y)], fill=(225, 225, 225))
        d.text((left - 40, y - 6), f"{tick}%", fill="black")
    for step in sorted({s for c in curves.values() for s in c}):
        x, y = xy(step, 0)
        d.text((x - 6, y + 6), str(step), fill="black")
    d.rectangle([xy(0, 1), xy(last, 0)], outline="black")
    d.text((left, 12), title, fill="black")
    d.text((w // 2 - 40, h - 24), "GRPO step", fill="black")
    names = {arm: "GRPO" if arm == "grpo" else f"control: {control}" for arm in curves}
    legend_x = w - right - 10 - max(d.textlength(n) for n in names.values())
    for i, (arm, curve) in enumerate(curves.items()):
        colour, steps = COLOURS[arm], sorted(curve)
        points = [xy(s, curve[s]["success_rate"]) for s in steps]
        d.line(points, fill=colour, width=3)
        for s in steps:
            (x, lo), (_, hi) = xy(s, curve[s]["ci95"][0]), xy(s, curve[s]["ci95"][1])
            x += 4 * (i - 0.5)  # the two arms' bars side by side
            d.line([(x, lo), (x, hi)], fill=colour, width=2)
            d.line([(x - 5, lo), (x + 5, lo)], fill=colour, width=2)
            d.line([(x - 5, hi), (x + 5, hi)], fill=colour, width=2)
        d.text((legend_x, top + 10 + 16 * i), names[arm], fill=colour)
    img.save(path)


def default_warm_start(task_ids: str) -> Path:
    """Where the default warm start of `task_ids` lives: click-test's is LEARN_WARM, another task set's a
    folder of its own beside it (so switching tasks never rebuilds the other's)."""
    if task_ids == ",".join(LEARN_TASK_IDS):
        return LEARN_WARM
    return LEARN_WARM.with_name(f"{LEARN_WARM.name}-{task_ids.replace('/', '-').replace(',', '+')}")


def warm_start(args: argparse.Namespace) -> None:
    """The default warm start, built for the task file and ids (a no-op in a second while it is current)."""
    print(f"warm start: {args.model} for {args.task_ids} ({args.tasks.name})", flush=True)
    turns = [] if args.warm_max_turns is None else ["--max-turns", str(args.warm_max_turns)]
    run(
        [sys.executable, "-m", "cua_agent.warmstart", "--out", str(args.model), "--tasks", str(args.tasks),
         "--task-ids", args.task_ids, *turns],
        args.out / "warmstart.log",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if args.model is None:
        args.model = default_warm_start(args.task_ids)
        warm_start(args)
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"{args.model}: no model here (config.json missing)")
    first = evaluate_start(args)
    curves = {"grpo": {0: first, **train("grpo", args)}}
    if args.control == "lr0":
        curves["control"] = {0: first, **train("control", args)}
    else:  # the warm start's own evaluation: what an lr = 0 run would sample at every step
        curves["control"] = dict.fromkeys(curves["grpo"], first)
    wall_s = time.monotonic() - start
    tasks = [t for t in args.task_ids.split(",") if t]
    headline = tasks[0]
    title = (
        f"{headline}: held-out success, {args.eval_episodes} seeds, T={args.temperature:g}; "
        f"{args.steps} steps x {args.groups_per_step * args.group_size} episodes"
    )
    plot(per_task(curves, headline), args.out / "learning.png", title, control_label(args.control))
    final = max(curves["grpo"])
    finals = {}
    for task in [*tasks, None]:
        c = per_task(curves, task)
        g, k = c["grpo"][final], c["control"][final]
        finals[task or "all"] = {
            "difference_pts": round(100 * (g["success_rate"] - k["success_rate"]), 1),
            "p_one_sided": fisher_greater(g["successes"], g["episodes"], k["successes"], k["episodes"]),
        }
    result = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "curves": {arm: {str(s): v for s, v in sorted(c.items())} for arm, c in curves.items()},
        "final_step": final,
        "final": finals,
        "wall_s": round(wall_s),
    }
    (args.out / "learning.json").write_text(json.dumps(result, indent=2) + "\n")
    print(tables(curves, tasks))
    h = finals[headline]
    print(
        f"final step {final}, {headline}: {h['difference_pts']:+.1f} pts against {control_label(args.control)} "
        f"(p = {h['p_one_sided']:.3g}); wall {wall_s / 60:.1f} min; plot {args.out / 'learning.png'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
