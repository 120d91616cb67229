"""The options table's parse column: each setting read by the coercer its row names."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeperd.coercers import ConfigError
from sweeperd.options import OPTIONS, SETTING_KEYS
from sweeperd.settings import build_settings


def refusal(**overrides: object) -> str:
    with pytest.raises(ConfigError) as caught:
        build_settings(overrides, None, logs_to_tty=False)
    return str(caught.value)


class TestParseColumn:
    def test_every_setting_names_its_coercer(self) -> None:
        """Each setting's row names the coercer that reads it; a command's own option none."""
        for key, option in OPTIONS.items():
            assert (option.parse is not None) == (key in SETTING_KEYS), key

    def test_the_first_wrong_setting_of_the_table_is_named(self) -> None:
        """With several settings wrong, the refusal names the first in the options table."""
        message = refusal(queues="q", metrics_addr="x", prefix_root="a{b", log_level="loud")
        assert message.startswith("--prefix-root (SWEEPERD_PREFIX_ROOT) must be ")

    def test_files_are_read_after_every_value(self, tmp_path: Path) -> None:
        """A password file is read once every value is taken: a wrong value is named first."""
        message = refusal(queues="q", redis_password_file=str(tmp_path / "no"), log_level="x")
        assert message.startswith("--log-level (SWEEPERD_LOG_LEVEL) must be one of ")

    def test_a_table_value_is_read_by_the_same_coercer(self, tmp_path: Path) -> None:
        """A [queue.<name>] table's interval is refused as the global interval is."""
        config = tmp_path / "sweeperd.toml"
        config.write_text("[queue.mail]\ninterval = 0\n")
        with pytest.raises(ConfigError) as caught:
            build_settings({}, config, logs_to_tty=False)
        assert str(caught.value) == (
            f"interval of [queue.mail] in {config} must be a positive number of seconds up to "
            "86400, not 0"
        )
