"""Secrets and endpoints come from the environment first, then `.env`; secrets never print."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cua_agent.settings import Settings


@pytest.fixture
def clean_env(monkeypatch, tmp_path: Path):
    for key in ("WANDB_API_KEY", "HF_TOKEN", "AREAL_LLM_SERVER_ADDRS", "DOCKER_HOST", "CUA_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_dotenv_is_read_and_environment_wins(clean_env: Path, monkeypatch):
    (clean_env / ".env").write_text(
        "WANDB_API_KEY=from-dotenv\nAREAL_LLM_SERVER_ADDRS=10.0.0.1:8000, 10.0.0.2:8000\nDOCKER_HOST=unix:///x.sock\n"
    )
    monkeypatch.setenv("DOCKER_HOST", "unix:///from-env.sock")
    s = Settings()
    assert s.wandb_api_key is not None and s.wandb_api_key.get_secret_value() == "from-dotenv"
    assert s.server_addresses == ["10.0.0.1:8000", "10.0.0.2:8000"]
    assert s.docker_host == "unix:///from-env.sock"
    assert "from-dotenv" not in repr(s)  # secrets are masked in logs and tracebacks


def test_export_fills_only_missing_variables(clean_env: Path, monkeypatch):
    (clean_env / ".env").write_text("WANDB_API_KEY=k1\nHF_TOKEN=h1\n")
    monkeypatch.setenv("HF_TOKEN", "already-set")
    Settings().export()
    assert os.environ["WANDB_API_KEY"] == "k1" and os.environ["HF_TOKEN"] == "already-set"


def test_defaults_without_env_or_dotenv(clean_env: Path):
    s = Settings()
    assert s.wandb_api_key is None and s.server_addresses == [] and s.cua_home.name == "cua-areal"


def test_env_example_lists_exactly_the_settings():
    """env.example has two sections: what the trainer reads (exactly Settings' fields) and, after the
    "# ---- Deployment" marker, what only docker-compose.areal.yml and docker_train_areal.sh read (checked
    against those files by tests/deploy/test_compose_file.py). No key may be in both."""
    example = Path(__file__).resolve().parents[2] / "env.example"
    sections: dict[str, set[str]] = {"settings": set(), "deployment": set()}
    current = "settings"
    for line in example.read_text().splitlines():
        if line.startswith("# ---- Deployment"):
            current = "deployment"
        elif line.strip() and not line.lstrip().startswith("#"):
            sections[current].add(line.split("=", 1)[0].strip())
    fields = {f.validation_alias for f in Settings.model_fields.values()}
    keys = sections["settings"]
    assert keys == fields, f"env.example and cua_agent/settings.py disagree: {sorted(keys ^ fields)}"
    assert sections["deployment"], "the deployment section is missing (marker '# ---- Deployment')"
    assert not sections["deployment"] & fields, "a Settings variable is listed as deployment-only"
