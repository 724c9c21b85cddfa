"""R2E-Gym's dataset export to our repository tasks (sandbox/repo/r2e_import.py), and the loader's refusal
of SWE-bench-style entries."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sandbox.repo import r2e_import
from sandbox.repo.tasks import load_repo_tasks
from sandbox.tasks import TaskSpecError

EXPECTED = {"TestShutdown.test_handler": "PASSED", "test_run_app[pyloop - Multiple Paths, Port]": "PASSED"}
R2E = {
    "repo_name": "aiohttp",
    "docker_image": "namanjain12/aiohttp_final:1c1c0ea353041c8814a6131c3a92978dc2373e52",
    "commit_hash": "1c1c0ea353041c8814a6131c3a92978dc2373e52",
    "problem_statement": "Preamble naming the fix.\n[ISSUE]\nrun_app swallows CancelledError\n[/ISSUE]",
    "expected_output_json": json.dumps(EXPECTED, indent=4),
    "modified_files": ["aiohttp/web.py"],
}
SWEBENCH = {
    "docker_image": "slimshetty/swebench-verified:sweb.eval.x86_64.astropy__astropy-12907",
    "problem_statement": "Modeling's separability_matrix ...",
    "FAIL_TO_PASS": '["test_a"]',
    "PASS_TO_PASS": "[]",
}
EMPTY = {**R2E, "repo_name": "moto", "commit_hash": "ab" * 20, "problem_statement": ""}


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "json"])
def test_an_export_becomes_entries_and_rows_scored_by_r2e_gyms_rule(tmp_path, fmt):
    rows = [R2E, SWEBENCH, EMPTY, R2E]
    src = tmp_path / f"rows.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist([{**r2e_import_row(r)} for r in rows]), src)
    elif fmt == "jsonl":
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        src.write_text(json.dumps(rows))
    assert r2e_import.main([str(src), "--out", str(tmp_path / "out"), "--split", "test"]) == 0
    (task,) = load_repo_tasks(tmp_path / "out" / "tasks.jsonl")
    assert task.task_id == "repo/r2e-aiohttp-1c1c0ea3" and task.split == "test"
    assert task.spec.image == R2E["docker_image"] and task.spec.workdir == "/testbed"
    assert task.issue.strip() == "run_app swallows CancelledError"
    assert task.tests.report == "r2e" and dict(task.tests.expected) == {
        "TestShutdown.test_handler": "PASSED",
        "test_run_app[pyloop": "PASSED",  # R2E-Gym cuts keys at " - " on both sides
    }


def r2e_import_row(row: dict) -> dict:
    """A parquet table needs one schema: the columns every row has, absent ones null."""
    cols = {k for r in (R2E, SWEBENCH, EMPTY) for k in r}
    return {k: row.get(k) for k in sorted(cols)}


def test_left_out_rows_are_counted_by_reason(tmp_path, capsys):
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [R2E, SWEBENCH, EMPTY, R2E, {"x": 1}]))
    assert r2e_import.main([str(src), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "1 tasks in" in out and "left out 1: SWE-bench-style" in out and "left out 1: empty problem" in out
    assert "left out 1: duplicate repository and commit" in out and "left out 1: no docker_image" in out


def test_a_row_naming_a_swebench_style_entry_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "e.json").write_text(json.dumps(SWEBENCH))
    row = {"task_id": "repo/x", "split": "train", "max_steps": 5, "sandbox": {}, "r2e_ds_json": "e.json"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(TaskSpecError, match=r"field 'r2e_ds_json': .*SWE-bench-style entry .*tests.expected"):
        load_repo_tasks(tmp_path / "tasks.jsonl")
