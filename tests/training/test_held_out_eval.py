"""The trainer's held-out evaluation: an evaluation that cannot run (a server gone, a sandbox engine down)
is logged and counted, and training goes on."""

from __future__ import annotations

from types import SimpleNamespace

from cua_agent.train.trainer import CUATrainer


def test_a_failing_evaluation_does_not_stop_training(tmp_path):
    def unreachable(*args, **kwargs):
        raise ConnectionRefusedError("vLLM server at 127.0.0.1:1 refused the connection")

    fake = SimpleNamespace(
        held_out=SimpleNamespace(run=unreachable),
        config=SimpleNamespace(cluster=SimpleNamespace(fileroot=str(tmp_path))),
        server_addresses=["127.0.0.1:1"],
        _eval_stats={},
    )
    CUATrainer._evaluate_held_out(fake, 4)  # type: ignore[arg-type]
    assert fake._eval_stats == {"eval/failed": 1.0}
