"""What `python -m cua_agent.evaluate` decides before it plays an episode."""

from __future__ import annotations

import pytest

from cua_agent.evaluate import __main__ as cli
from cua_agent.inference.local_server import MODELS, REPO
from sandbox.tasks import TaskSpecError

SERVER = ["--base-url", "http://127.0.0.1:9/v1"]


def test_the_processor_defaults_to_the_served_model_folder():
    """The project's server serves a model under its folder's path. Without its processor the agent took
    'absolute' coordinates as screen pixels and wrote the screen's size into the system prompt (1280x800,
    not the 896x560 the model sees): the warm start, trained on the latter, answered nothing valid (0 of
    64 episodes solved, against 26 of 64 with the processor; same server and seeds)."""
    model = str(MODELS["untied"])
    assert cli.processor_source(cli.parse_args([*SERVER, "--model", model])) == model
    assert cli.processor_source(cli.parse_args([*SERVER, "--model", model, "--processor", "none"])) is None
    other = cli.parse_args([*SERVER, "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--processor", model])
    assert cli.processor_source(other) == model
    assert cli.processor_source(cli.parse_args([*SERVER, "--model", "gpt-4.1"])) is None
    assert cli.processor_source(cli.parse_args(["--checkpoint", model])) == model


def test_max_prompt_tokens_needs_a_processor_it_can_find(capsys):
    with pytest.raises(SystemExit):
        cli.parse_args([*SERVER, "--model", "gpt-4.1", "--max-prompt-tokens", "100"])
    assert "--max-prompt-tokens needs --processor" in capsys.readouterr().err
    cli.parse_args([*SERVER, "--model", str(MODELS["untied"]), "--max-prompt-tokens", "100"])


def test_a_bad_task_file_fails_before_a_server_starts(tmp_path, monkeypatch):
    line = next(t for t in (REPO / "tasks" / "miniwob.jsonl").read_text().splitlines() if '"test"' in t)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(f"{line}\n{line}\n")

    def no_server(*args, **kwargs):
        raise AssertionError("a server was started for a task file that cannot be read")

    monkeypatch.setattr("cua_agent.inference.local_server.start_vllm", no_server)
    with pytest.raises(TaskSpecError, match="already on line 1"):
        cli.main(["--checkpoint", str(MODELS["untied"]), "--tasks", str(tasks), "--out", str(tmp_path / "o")])


def test_each_seed_is_played_episodes_per_seed_times():
    args = cli.parse_args(
        [*SERVER, "--model", "m", "--task-ids", "miniwob/click-test", "--seeds-per-task", "3",
         "--episodes-per-seed", "4"]
    )  # fmt: skip
    rows = cli.task_rows(args)
    seeds = [r["seed"] for r in rows]
    assert len(rows) == 12 and len(set(seeds)) == 3 and all(seeds.count(s) == 4 for s in seeds)
    with pytest.raises(SystemExit):
        cli.parse_args([*SERVER, "--model", "m", "--episodes-per-seed", "0"])
