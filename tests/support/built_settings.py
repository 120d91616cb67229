"""Settings built as sweeperd builds them, from a config file's TOML and overrides, or refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeperd.config.settings import ConfigError, Settings, build_settings


def config(tmp_path: Path, toml: str | None) -> Path | None:
    """The config file holding `toml`, or none."""
    if toml is None:
        return None
    path = tmp_path / "sweeperd.toml"
    path.write_text(toml)
    return path


def build(
    tmp_path: Path, toml: str | None = None, tty: bool = False, **overrides: object
) -> Settings:
    return build_settings(overrides, config(tmp_path, toml), logs_to_tty=tty)


def refusal(tmp_path: Path, toml: str | None = None, **overrides: object) -> str:
    """The one-line message of the ConfigError these settings raise."""
    with pytest.raises(ConfigError) as caught:
        build_settings(overrides, config(tmp_path, toml), logs_to_tty=False)
    message = str(caught.value)
    assert "\n" not in message
    return message
