"""Every example in README.md and docs/*.md is one sweeperd accepts: its command lines parsed by
sweeperd's own command line and settings, its files by their parsers, its ACL lines the code's,
its links and anchors there. (The TOML examples load in tests/test_config_schema.py.)"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import cast

import click
import pytest
import typer
import yaml

from sweeperd.cli.app import app
from sweeperd.cli.inputs import one_queue, settings_of
from sweeperd.cli.reply import Reply
from sweeperd.commands import privileges
from sweeperd.config.webconfig import TLS_KEYS, TOP_KEYS
from sweeperd.constants import ACL, INSPECT, ONCE, RUN, TOP
from sweeperd.top.view import options_of
from tests.support.doc_pages import PAGES, README, Block, anchors, blocks, links, shown_files
from tests.support.invoke import sweeperd
from tests.support.paths import REPO

LANGS = {
    "sh": "command lines: sweeperd's parsed by its own command line, make's targets found",
    "toml": "sweeperd config files, loaded by its settings (tests/test_config_schema.py)",
    "yaml": "yaml.safe_load; a web config's keys are the ones sweeperd reads",
    "json": "json.loads",
    "text": "output as it was captured, and ACL SETUSER lines (the code's own)",
}
CONTROL = {";", "&&", "||", "|", "&"}  # between two commands on one line
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
CONFIG_FLAG = "--config"
SPEC_CITATION = re.compile(r"\bSPEC ?§")  # a section of a contract kept outside the repository
# Files elsewhere in the repository that point into the docs (alerts' runbooks, the unit, code).
POINTERS = re.compile(r"\b((?:docs/[\w-]+|README)\.md)(#[\w-]+)?")
POINTING = (
    "sweeperd/**/*.py",
    "sweeperd/**/*.lua",
    "module/*.c",
    "tests/**/*.py",
    "deploy/**/*.y*ml",
    "deploy/**/*.json",
    "systemd/*",
    "Dockerfile",
    ".ci/run",
    "bench/*.py",
)


def read_text(path: Path) -> str:
    """A file's text, undecodable bytes replaced (a binary file reads as noise, not an error)."""
    return path.read_bytes().decode("utf-8", "replace")


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """The block's commands, each with where it is: its lines joined where they end with a
    backslash, comments dropped, split at ; && || | &."""
    found = []
    joined: list[str] = []  # a line ended by a backslash, and the lines it goes on to
    for n, part in enumerate(block.text.splitlines(), start=block.line + 1):
        joined.append(part.removesuffix("\\"))
        if part.endswith("\\"):
            continue
        where = f"{block.page.relative_to(REPO)}:{n + 1 - len(joined)}"
        lexer = shlex.shlex(" ".join(joined), posix=True, punctuation_chars=True)
        joined = []
        lexer.whitespace_split = True
        command: list[str] = []
        for token in [*lexer, ";"]:
            if token in CONTROL:
                if command:
                    found.append((where, command))
                command = []
            else:
                command.append(token)
    return found


def sweeperd_lines() -> list[tuple[str, list[str], dict[str, str]]]:
    """Every `sweeperd ...` command line of the sh blocks: where, its arguments, its env."""
    found = []
    for block in blocks():
        if block.lang != "sh":
            continue
        for where, words in commands(block):
            env = {}
            while words and ASSIGNMENT.match(words[0]):
                name, _, value = words.pop(0).partition("=")
                env[name] = value
            if words[:2] in (["python", "-m"], ["python3", "-m"]):
                words = words[2:]
            if words and Path(words[0]).name == "sweeperd":
                found.append((where, words[1:], env))
    return found


def make_lines() -> list[tuple[str, list[str]]]:
    """Every `make ...` command line of the sh blocks: where, its arguments."""
    return [
        (where, words[1:])
        for block in blocks()
        if block.lang == "sh"
        for where, words in commands(block)
        if words[0] == "make"
    ]


def accepted(args: list[str], tmp_path: Path) -> None:
    """The command line as sweeperd reads it, up to the point where it would connect: the
    command's options parsed by its own parser, then its settings built and checked as the
    command builds them (once and inspect: exactly one queue; top: its own flags too). A
    --config path is the file the docs show under that name. Raises on anything refused."""
    shown = shown_files()
    for n, word in enumerate(args[:-1]):
        if word == CONFIG_FLAG:
            path = args[n + 1]
            assert path in shown, f"--config {path}: show it in a ```toml block headed # {path}"
            config = tmp_path / "sweeperd.toml"
            config.write_text(shown[path])
            args = [*args[: n + 1], str(config), *args[n + 2 :]]
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    root = group.make_context("sweeperd", args if args[0].startswith("-") else [])
    if args[0].startswith("-"):
        return
    name, command, rest = group.resolve_command(root, args)
    assert name is not None and command is not None
    ctx = cast(typer.Context, command.make_context(name, rest, parent=root))  # as typer passes it
    reply = Reply(json=False)
    if name in (ONCE, INSPECT):
        one_queue(ctx, reply)
    elif name == RUN:
        settings_of(ctx, reply)
    elif name == TOP:
        settings_of(ctx, reply, discover="1")
        options_of(ctx.params, False)
    elif name == ACL:
        privileges.user_named(ctx.params["acl_user"])
        privileges.commands_for(ctx.params["acl_for"])
        settings_of(ctx, reply, needs_queue=False)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No SWEEPERD_ variable nor systemd credential of the machine's: the line alone counts."""
    for name in [*os.environ]:
        if name.startswith("SWEEPERD_") or name == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(name)
    return monkeypatch


class TestBlocks:
    def test_every_block_says_what_it_is(self) -> None:
        """Every fenced block is tagged with a language the tests check (or `text`)."""
        for block in blocks():
            assert block.lang in LANGS, f"{block.where}: tag the block, one of {sorted(LANGS)}"

    def test_there_is_something_to_check(self) -> None:
        """The search finds command lines, make targets, YAML and the ACL lines."""
        assert len(sweeperd_lines()) >= 10
        assert len(make_lines()) >= 2
        assert any(b.lang == "yaml" for b in blocks())

    @pytest.mark.parametrize(
        ("where", "args", "env"), [pytest.param(*line, id=line[0]) for line in sweeperd_lines()]
    )
    def test_command_lines_are_accepted(
        self,
        where: str,
        args: list[str],
        env: dict[str, str],
        clean_env: pytest.MonkeyPatch,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Each `sweeperd ...` line is one its command accepts: known options with good
        values, settings that build (nothing is sent anywhere)."""
        for name, value in env.items():
            clean_env.setenv(name, value)
        try:
            accepted(args, tmp_path)
        except click.exceptions.Exit as stop:
            assert stop.exit_code == 0, f"{where}: {capsys.readouterr().err}"
        except (click.UsageError, ValueError) as refused:
            pytest.fail(f"{where}: sweeperd {shlex.join(args)}: {refused}")

    @pytest.mark.parametrize(
        ("where", "args"), [pytest.param(*line, id=line[0]) for line in make_lines()]
    )
    def test_make_targets_exist(self, where: str, args: list[str]) -> None:
        """Each `make ...` line names targets of the Makefile it runs."""
        directory = REPO
        targets = []
        words = iter(args)
        for word in words:
            if word == "-C":
                directory = REPO / next(words)
            elif not word.startswith("-") and "=" not in word:
                targets.append(word)
        makefile = (directory / "Makefile").read_text()
        for target in targets:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{where}: {target}"

    def test_yaml_parses(self) -> None:
        """Each YAML block parses; a web config has only the keys sweeperd reads."""
        for block in blocks():
            if block.lang != "yaml":
                continue
            for document in yaml.safe_load_all(block.text):
                assert isinstance(document, dict), block.where
                if "tls_server_config" in document or "basic_auth_users" in document:
                    assert set(document) <= set(TOP_KEYS), block.where
                    assert set(document.get("tls_server_config") or {}) <= set(TLS_KEYS)

    def test_json_parses(self) -> None:
        """Each JSON block parses into an object, and there are some to parse."""
        shown = [block for block in blocks() if block.lang == "json"]
        assert shown, "no page shows a JSON block: the check would pass on nothing"
        for block in shown:
            for line in block.text.splitlines():
                assert isinstance(json.loads(line), dict), block.where

    def test_acl_lines_are_the_commands_output(self) -> None:
        """Every ACL SETUSER line shown is what a `sweeperd acl` line of the sh block right
        before it prints, in their order, and every `sweeperd acl` line shown is followed so."""
        shown = printed = 0
        for page in PAGES:
            found = blocks((page,))
            for before, block in zip([None, *found], found, strict=False):
                lines = [line for line in block.text.splitlines() if line.startswith("ACL ")]
                if not lines:
                    continue
                assert before is not None and before.lang == "sh", block.where
                runs = [words for _, words in commands(before) if words[:2] == ["sweeperd", "acl"]]
                assert lines == [acl_output(words[1:]) for words in runs], block.where
                shown += len(lines)
            printed += sum(
                words[:2] == ["sweeperd", "acl"]
                for block in found
                if block.lang == "sh"
                for _, words in commands(block)
            )
        assert shown == printed >= 4


def acl_output(args: list[str]) -> str:
    """What `sweeperd ARGS` prints, once it exited 0."""
    ran = sweeperd(*args)
    assert ran.code == 0, ran.err
    return ran.out.rstrip("\n")


class TestLinks:
    @pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
    def test_links_lead_somewhere(self, page: Path) -> None:
        """Each link to a file of the repository finds it, and its #anchor a heading there."""
        for line, target in links(page):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            found = (page.parent / path).resolve() if path else page
            assert found.exists(), f"{page.name}:{line}: {target}"
            if anchor:
                assert found.suffix == ".md", f"{page.name}:{line}: {target}"
                assert anchor in anchors(found), f"{page.name}:{line}: no #{anchor} in {path}"

    def test_pointers_from_other_files(self) -> None:
        """docs/<page>.md#anchor named in code, alert runbooks, the unit and the images lead
        to a page and a heading that exist."""
        checked = 0
        for pattern in POINTING:
            for source in REPO.glob(pattern):
                for match in POINTERS.finditer(source.read_text()):
                    page = REPO / match.group(1)
                    assert page.exists(), f"{source.relative_to(REPO)}: {match.group(0)}"
                    anchor = match.group(2)
                    if anchor:
                        assert anchor[1:] in anchors(page), f"{source}: {match.group(0)}"
                    checked += 1
        assert checked > 0


class TestOwnWords:
    def test_nothing_cites_a_contract_the_repository_lacks(self) -> None:
        """No file of the repository cites a section of SPEC: the contract it was built to is
        not in the repository, so the pages say it in the project's own words
        (docs/keyspace.md)."""
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        citing = [
            name
            for name in listed
            if (REPO / name).is_file() and SPEC_CITATION.search(read_text(REPO / name))
        ]
        assert citing == []


class TestReadme:
    def test_opens_with_the_two_commands(self) -> None:
        """The README's first block is `make demo` and `make test`, and CI runs the second."""
        first = blocks((README,))[0]
        assert [words[:2] for _, words in commands(first)] == [["make", "demo"], ["make", "test"]]
        assert README.read_text().startswith(f"# sweeperd\n\n```sh\n{first.text}```\n")
        ci = (REPO / ".ci" / "run").read_text()
        assert re.search(r"^make test$", ci, re.M)

    def test_says_it_never_runs_the_reaper(self) -> None:
        """The README says, in bold, that sweeperd never runs the uncounted reaper."""
        assert "**sweeperd never runs the uncounted reaper**" in README.read_text()
