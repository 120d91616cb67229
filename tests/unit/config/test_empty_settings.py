"""An empty setting (flag, env var or file) is refused, never taken for its default."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeperd.config.settings import ConfigError, build_settings
from tests.support.invoke import Ran, sweeperd
from tests.support.servers import free_port

URL_FIX = "is empty: set it (URL) or leave it out (default: redis://localhost:6379/0)"


def one_line(ran: Ran) -> str:
    """The one stderr line of a command refused as bad usage (exit 2, nothing on stdout)."""
    assert (ran.code, ran.out) == (2, ""), ran
    [line] = ran.err_lines
    return line


class TestRedisUrl:
    @pytest.mark.parametrize("command", ["once", "inspect", "run"])
    def test_empty_flag(self, command: str) -> None:
        """`--redis-url ''` is refused, not read as localhost:6379."""
        extra = ["--metrics-addr", f"127.0.0.1:{free_port()}"] if command == "run" else []
        ran = sweeperd(command, "-q", "q", "--redis-url", "", *extra)
        assert one_line(ran) == f"sweeperd: --redis-url (SWEEPERD_REDIS_URL) {URL_FIX}"

    def test_empty_env_var(self) -> None:
        """SWEEPERD_REDIS_URL= (set, empty: a variable that did not expand) is refused too."""
        ran = sweeperd("inspect", "-q", "q", env={"SWEEPERD_REDIS_URL": ""})
        assert one_line(ran) == f"sweeperd: --redis-url (SWEEPERD_REDIS_URL) {URL_FIX}"

    def test_empty_in_the_file(self, tmp_path: Path) -> None:
        """redis_url = "" in the config file is refused naming the key and the file."""
        config = tmp_path / "sweeperd.toml"
        config.write_text('redis_url = " "\n')
        ran = sweeperd("once", "-q", "q", "--config", str(config))
        assert one_line(ran) == f"sweeperd: redis_url in {config} {URL_FIX}"


class TestEveryString:
    @pytest.mark.parametrize(
        ("key", "expected"),
        [
            (
                "limit",
                "--limit (SWEEPERD_LIMIT) is empty: set it (N) or leave it out (default: 1000)",
            ),
            (
                "prefix_root",
                "--prefix-root (SWEEPERD_PREFIX_ROOT) is empty: set it (ROOT) or "
                "leave it out (default: emq)",
            ),
            (
                "sentinel_master",
                "--sentinel-master (SWEEPERD_SENTINEL_MASTER) is empty: set it "
                "(NAME) or leave it out",
            ),
            (
                "cluster",
                "--cluster (SWEEPERD_CLUSTER) is empty: set it (true or false) or leave it out",
            ),
        ],
    )
    def test_empty_override(self, key: str, expected: str) -> None:
        """Any setting given as an empty string is refused, naming it and its default."""
        with pytest.raises(ConfigError) as caught:
            build_settings({"queues": ["q"], key: ""}, None, logs_to_tty=False)
        assert str(caught.value) == expected

    def test_empty_env_var_of_a_number(self) -> None:
        """SWEEPERD_LIMIT= is refused at the command line, as the flag is."""
        ran = sweeperd("once", "-q", "q", env={"SWEEPERD_LIMIT": ""})
        assert one_line(ran) == (
            "sweeperd: --limit (SWEEPERD_LIMIT) is empty: set it (N) or leave it out "
            "(default: 1000)"
        )

    def test_an_option_the_command_has_not_is_not_read(self, tmp_path: Path) -> None:
        """SWEEPERD_LIMIT= in a shared environment does not stop inspect, which takes no limit."""
        config = tmp_path / "sweeperd.toml"
        config.write_text('redis_url = "redis://127.0.0.1:1/0"\n')
        ran = sweeperd("inspect", "-q", "q", "--config", str(config), env={"SWEEPERD_LIMIT": ""})
        assert ran.code == 3, ran
