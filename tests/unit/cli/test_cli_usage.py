"""The command line's help, version and completion; its entry points run as processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sweeperd import __version__
from sweeperd.config.options import OPTIONS, WITH_ACL
from tests.support.doc_pages import options_table
from tests.support.invoke import PYTHON_M, Ran, sweeperd, sweeperd_many, sweeperd_process
from tests.support.paths import REPO

CONFIGURATION = REPO / "docs" / "configuration.md"


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


def completing(words: str, word: int) -> dict[str, str]:
    """The environment bash's completion function gives sweeperd."""
    return {"_SWEEPERD_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(word)}


class TestRunHelp:
    """`run --help` (and the other commands'): defaults, value types, env vars, 80 columns."""

    def test_defaults_from_the_table(self, helps: dict[str, Ran]) -> None:
        """Every default of the options table is shown, brackets and all, in each command's help."""
        for command in WITH_ACL:
            text = flat(helps[command].out)
            for option in OPTIONS.values():
                if command in option.commands and option.default_text:
                    assert f"[default: {option.default_text}]" in text, (command, option.key)

    def test_typed(self, helps: dict[str, Ran]) -> None:
        """Options name what their value is (SECONDS, N, MS, FRACTION, URL), never TEXT."""
        text = flat(helps["run"].out)
        for shown in ("--interval SECONDS", "--limit N", "--call-target-ms MS", "--redis-url URL"):
            assert shown in text
        assert "--drain-share FRACTION" in text
        assert "TEXT" not in text

    def test_every_option_has_its_env_var(self, helps: dict[str, Ran]) -> None:
        """Each command's help lists the env var of each of its options."""
        for command in WITH_ACL:
            text = flat(helps[command].out)
            for option in OPTIONS.values():
                if command in option.commands:
                    assert f"env var: {option.env_name}" in text, (command, option.key)

    def test_80_columns(self) -> None:
        """At 80 columns no help line is wider than the terminal."""
        runs = sweeperd_many(["--help"], *([c, "--help"] for c in WITH_ACL), env={"COLUMNS": "80"})
        for ran in runs:
            assert ran.code == 0
            assert max(len(line) for line in ran.out.splitlines()) <= 80


class TestDocs:
    def test_table_is_the_options_table(self) -> None:
        """docs/configuration.md's option table is exactly the one OPTIONS makes (tests/docs.py)."""
        expected = options_table()
        page = CONFIGURATION.read_text()
        assert expected in page, f"paste this table into docs/configuration.md:\n{expected}"


class TestEntryPoints:
    """`--version`, `-h`, bare `sweeperd` and shell completion."""

    def test_version_flag(self) -> None:
        """`sweeperd --version` prints the version and exits 0."""
        ran = sweeperd("--version")
        assert (ran.code, ran.out, ran.err) == (0, f"sweeperd {__version__}\n", "")

    def test_short_help(self) -> None:
        """`-h` is --help, at the top and on a command."""
        top, once = sweeperd_many(["-h"], ["once", "-h"])
        assert (top.code, once.code) == (0, 0)
        assert "Usage: sweeperd [OPTIONS]" in top.out
        assert "Usage: sweeperd once" in once.out

    def test_bare(self) -> None:
        """Bare `sweeperd` prints the help on stdout, no error line, and exits 2."""
        ran = sweeperd()
        assert (ran.code, ran.err) == (2, "")
        assert "Usage: sweeperd [OPTIONS]" in ran.out

    def test_a_mistyped_command_is_suggested_once(self) -> None:
        """A mistyped command is one line that suggests the nearest command once, exit 2."""
        ran = sweeperd("runn")
        assert (ran.code, ran.out) == (2, "")
        assert ran.err_lines == [
            "sweeperd: No such command 'runn'. Did you mean 'run'? (see: sweeperd --help)"
        ]

    def test_completion(self, tmp_path: Path) -> None:
        """--install-completion writes a bash script, and the script's protocol completes. The
        shell is named, not found among the test's parent processes (a run outside make has
        none): typer takes the name where its detection is off."""
        naming = {"HOME": str(tmp_path), "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
        installed = sweeperd("--install-completion", "bash", env=naming)
        assert installed.code == 0, installed.err
        script = (tmp_path / ".bash_completions" / "sweeperd.sh").read_text()
        assert "_SWEEPERD_COMPLETE" in script
        commands = sweeperd(env=completing("sweeperd on", 1))
        flags = sweeperd(env=completing("sweeperd once --dr", 2))
        assert commands.out.split() == ["once"]
        assert flags.out.split() == ["--drain", "--dry-run"]


class TestProcess:
    """What only a process shows: the installed entry points and the exit code they return."""

    @pytest.mark.parametrize(
        "argv0",
        [PYTHON_M, [str(Path(sys.executable).parent / "sweeperd")]],
        ids=["python -m sweeperd", "the sweeperd script"],
    )
    def test_version(self, argv0: list[str]) -> None:
        """`python -m sweeperd` and the installed `sweeperd` print the version and exit 0."""
        ran = sweeperd_process("--version", argv0=argv0)
        assert (ran.code, ran.out, ran.err) == (0, f"sweeperd {__version__}\n", "")

    def test_usage_error_exits_2(self) -> None:
        """A usage error leaves the process with exit 2 and one line on stderr, no traceback."""
        ran = sweeperd_process("reap", "--queue", "q")
        assert (ran.code, ran.out) == (2, "")
        [line] = ran.err_lines
        assert line.startswith("sweeperd: ")
