"""Secrets and endpoints: from the process environment, else a `.env` file in the working directory.

Everything a run reads from outside its YAML config goes through `Settings`, so there is one list of what
can be set (and `.env` stays out of git). Run configuration (models, sizes, steps) stays in configs/*.yaml.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    wandb_api_key: SecretStr | None = Field(
        None, validation_alias="WANDB_API_KEY", description="wandb online if set"
    )
    hf_token: SecretStr | None = Field(
        None, validation_alias="HF_TOKEN", description="gated hub models (GPU setup)"
    )
    llm_server_addrs: str = Field(
        "", validation_alias="AREAL_LLM_SERVER_ADDRS", description="vLLM servers, host:port,host:port"
    )
    docker_host: str | None = Field(
        None,
        validation_alias="DOCKER_HOST",
        description="Docker API for sandboxes (default: podman's socket)",
    )
    openai_api_key: SecretStr | None = Field(
        None,
        validation_alias="OPENAI_API_KEY",
        description="evaluation against a hosted OpenAI-compatible API",
    )
    gbox_api_key: SecretStr | None = Field(
        None, validation_alias="GBOX_API_KEY", description="GBox sandboxes (sandbox.backend: gbox)"
    )
    gbox_base_url: str | None = Field(
        None,
        validation_alias="GBOX_CLIENT_BASE_URL",
        description="GBox API endpoint (default: the GBox cloud's)",
    )
    cua_home: Path = Field(
        Path.home() / ".cache" / "cua-areal", validation_alias="CUA_HOME", description="environments, models"
    )

    @property
    def server_addresses(self) -> list[str]:
        return [a.strip() for a in self.llm_server_addrs.split(",") if a.strip()]

    def export(self) -> None:
        """Put values that came from `.env` into os.environ for libraries that read the environment
        themselves (wandb, huggingface_hub, docker-py, gbox-sdk)."""
        pairs = {
            "WANDB_API_KEY": self.wandb_api_key.get_secret_value() if self.wandb_api_key else None,
            "HF_TOKEN": self.hf_token.get_secret_value() if self.hf_token else None,
            "DOCKER_HOST": self.docker_host,
            "GBOX_API_KEY": self.gbox_api_key.get_secret_value() if self.gbox_api_key else None,
            "GBOX_CLIENT_BASE_URL": self.gbox_base_url,
        }
        for key, value in pairs.items():
            if value and key not in os.environ:
                os.environ[key] = value
