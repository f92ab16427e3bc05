"""What every settings group shares: the env-prefix rule and the default data dir."""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic_settings import SettingsConfigDict


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("memserve"))


def group(prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=prefix, extra="ignore", populate_by_name=True)


def env(name: str) -> str:
    """A field whose variable is not ``<group prefix><FIELD>`` (its historic name)."""
    return name
