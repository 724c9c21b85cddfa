"""A training step that waits on its episodes says how far it got, every `every_s` seconds (the trainer
logs it on rank 0), counted from the last recorded step."""

from __future__ import annotations

import time

from cua_agent.train.progress import StepProgress


def test_a_waiting_step_prints_its_episodes_since_the_last_step_and_a_short_step_prints_nothing():
    counters = {"episodes": 5.0, "groups_filtered": 1.0, "infra_failures": 0.0}
    lines: list[str] = []
    progress = StepProgress(lambda: dict(counters), 16, lines.append, every_s=0.2).start()
    try:
        progress.step_done(0)  # step 1 recorded: step 2 counts from here
        counters.update(episodes=12.0, groups_filtered=2.0)
        time.sleep(0.05)
        assert lines == []  # not yet every_s into the step
        deadline = time.monotonic() + 5
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines and lines[0].startswith("Step 2: 7 episodes finished of 16 a step, 1 group(s) filtered")
        assert "lost to infrastructure" not in lines[0]  # nothing to say about what did not happen
        progress.step_done(1)
        n = len(lines)
        time.sleep(0.1)
        assert len(lines) == n  # a new step waits every_s again before its first line
    finally:
        progress.stop()
    assert not progress._thread.is_alive()


def test_a_held_out_evaluation_reports_episodes_done_and_success_so_far():
    from types import SimpleNamespace

    from cua_agent.evaluate.held_out import EvalProgress

    lines: list[str] = []
    progress = EvalProgress(total=4, every_s=0.0, log=lines.append)  # the trainer's: its logger
    progress(SimpleNamespace(task_reward=None), final=False)  # lost to infrastructure: played again
    progress(SimpleNamespace(task_reward=1.0), final=True)
    progress(SimpleNamespace(task_reward=0.0), final=True)
    progress(SimpleNamespace(task_reward=0.0), final=True)
    progress(SimpleNamespace(task_reward=1.0), final=True)  # the last: the report says the rest
    assert lines == [
        "Held-out eval: 1/4 episodes, success so far 100%",
        "Held-out eval: 2/4 episodes, success so far 50%",
        "Held-out eval: 3/4 episodes, success so far 33%",
    ]
