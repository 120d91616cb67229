"""The command line's help and version, run as the operator runs it: `python -m sweeperd`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from sweeperd import __version__

CLI_TIMEOUT_S = 30
SCREEN = {"COLUMNS": "100", "LINES": "20"}  # a fixed terminal size for text output


@dataclass(frozen=True)
class Ran:
    """One finished `python -m sweeperd` process."""

    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        """The single JSON object on stdout."""
        body = json.loads(self.out)
        assert isinstance(body, dict)
        return body

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def _environment() -> dict[str, str]:
    """This environment without SWEEPERD_* settings, on a fixed terminal size."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPERD_")}
    return {**env, **SCREEN}


def sweeperd_many(*argvs: Sequence[str]) -> list[Ran]:
    """Runs `python -m sweeperd ARGV` for each argv at once; the results in the same order."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sweeperd", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
        )
        for argv in argvs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
        done.append(Ran(proc.returncode, out, err))
    return done


def sweeperd(*args: str) -> Ran:
    """Runs `python -m sweeperd ARGS` with no SWEEPERD_* settings from the environment."""
    [ran] = sweeperd_many(args)
    return ran


def flat(text: str) -> str:
    """Help text with the frame and line wrapping removed: words separated by single spaces."""
    return " ".join(text.replace("│", " ").split())


def listed_commands(help_text: str) -> list[str]:
    """The subcommand names in the Commands panel of the top-level help."""
    panel = help_text.split("Commands", 1)[1]
    rows = (line.strip("│ ").split(" ", 1)[0] for line in panel.splitlines())
    return [name for name in rows if name.isidentifier()]


@pytest.fixture(scope="module")
def top_help() -> Ran:
    return sweeperd("--help")


@pytest.fixture(scope="module")
def helps(top_help: Ran) -> dict[str, Ran]:
    """Each listed subcommand's --help, run side by side."""
    names = listed_commands(top_help.out)
    return dict(zip(names, sweeperd_many(*([name, "--help"] for name in names)), strict=True))


class TestHelp:
    """`--help` at the top and on each subcommand."""

    def test_top_level(self, top_help: Ran) -> None:
        """The top-level help exits 0, lists the subcommands and says @reap is never run."""
        assert (top_help.code, top_help.err) == (0, "")
        assert "never runs the uncounted reaper (@reap)" in flat(top_help.out)
        assert {"once", "inspect", "version"} <= set(listed_commands(top_help.out))

    def test_every_listed_subcommand(self, helps: dict[str, Ran]) -> None:
        """Every command the top-level help lists answers its own --help with exit 0."""
        for name, ran in helps.items():
            assert (name, ran.code, ran.err) == (name, 0, "")
            assert f"Usage: sweeperd {name}" in flat(ran.out)

    def test_once_states_exit_codes(self, helps: dict[str, Ran]) -> None:
        """`once --help` states its exit codes and what a dry run does."""
        text = flat(helps["once"].out)
        for words in ("Exit 0", "1 when the server refused", "2 on a bad option", "3 when"):
            assert words in text
        assert "--dry-run" in text
        assert "Writes nothing" in text

    def test_no_reap_command(self, top_help: Ran) -> None:
        """No subcommand runs the reaper: asking for one is a usage error, exit 2."""
        assert not any("reap" in name for name in listed_commands(top_help.out))
        ran = sweeperd("reap", "--queue", "q")
        assert (ran.code, ran.out) == (2, "")
        assert len(ran.err_lines) == 1


class TestVersion:
    """`python -m sweeperd version`."""

    def test_prints_version(self) -> None:
        """It prints the package's version on one line and exits 0."""
        ran = sweeperd("version")
        assert (ran.code, ran.out, ran.err) == (0, f"sweeperd {__version__}\n", "")
