"""The coercers and the options table's parse column: one reader per setting, one HOST:PORT."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeperd.config.coercers import ConfigError, Given, file_path, host_port
from sweeperd.config.options import OPTIONS, SETTING_KEYS
from sweeperd.config.settings import build_settings


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


class TestHostPort:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [("h:1", ("h", 1)), (" [::1]:2 ", ("::1", 2)), ("h:65535", ("h", 65535))],
    )
    def test_both_take(self, text: str, expected: tuple[str, int]) -> None:
        """HOST:PORT and [IPv6]:PORT, spaces around, are an address for both rules."""
        assert host_port(text, empty_host=False, bare_ipv6=True) == expected
        assert host_port(text, empty_host=True, bare_ipv6=False) == expected

    @pytest.mark.parametrize("text", ["h", "h:0", "h:65536", "h:x", "[::1]1", "a b:1", "[::1]"])
    def test_neither_takes(self, text: str) -> None:
        """No port, a port out of range or not a number, a space in the host: no address."""
        assert host_port(text, empty_host=False, bare_ipv6=True) is None
        assert host_port(text, empty_host=True, bare_ipv6=False) is None

    def test_an_empty_host_is_every_interface_for_the_metrics_address(self) -> None:
        """:9787 is the metrics address on every interface; a Sentinel needs its host."""
        assert host_port(":9787", empty_host=True, bare_ipv6=False) == ("", 9787)
        assert host_port(":26379", empty_host=False, bare_ipv6=True) is None

    def test_a_bare_ipv6_host_is_a_sentinel_address_only(self) -> None:
        """::1:26379 is a Sentinel's address (the last colon starts the port); the metrics
        address wants the brackets."""
        assert host_port("::1:26379", empty_host=False, bare_ipv6=True) == ("::1", 26379)
        assert host_port("::1:9787", empty_host=True, bare_ipv6=False) is None

    def test_the_settings_apply_each_rule(self) -> None:
        """--sentinel refuses :26379 and takes ::1:26379; --metrics-addr the other way round."""
        assert refusal(queues="q", sentinels=":26379", sentinel_master="m").endswith(
            "a Sentinel's address must be HOST:PORT with a port from 1 to 65535, not ':26379'"
        )
        s = build_settings(
            {"queues": "q", "sentinels": "::1:26379", "sentinel_master": "m", "metrics_addr": ":1"},
            None,
            logs_to_tty=False,
        )
        assert s.connection.topology.sentinels == (("::1", 26379),)
        assert (s.daemon.metrics_host, s.daemon.metrics_port) == ("", 1)


class TestFilePath:
    def test_relative_in_the_file_is_its_neighbour(self, tmp_path: Path) -> None:
        """A relative path read from the config file is beside it; from a flag, as given."""
        assert file_path(Given("pw", "f", False, tmp_path)) == tmp_path / "pw"
        assert file_path(Given("pw", "--f", True)) == Path("pw")
        assert file_path(Given("/etc/pw", "f", False, tmp_path)) == Path("/etc/pw")
        assert file_path(Given(None, "the default f", False)) is None
