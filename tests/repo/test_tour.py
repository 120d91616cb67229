"""The README's tour, replayed as a reader runs it: each command block from `sweeperd demo --keep`
on, against the server it seeds, its output compared with the capture that follows the block,
line for line but for what changes from run to run (tests/support/captures.py)."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.support.captures import cut_event, cut_line, lines_of
from tests.support.daemon_process import wait_until
from tests.support.doc_pages import README, Block, blocks, shown_files
from tests.support.invoke import environment
from tests.support.servers import free_port, server_binary

TOUR_PORTS = ("6379", "9787")  # the server's and the metrics' ports in the README: the test's own
DRY_RUN = "--dry-run"
DRY_HEADER = "  (dry run: nothing written)"  # how the README says the dry run differs from once
KEPT = "it runs until"  # the line `demo --keep` ends with once its server is seeded
STEP_WAIT_S = 60.0  # the longest a step may take to show what the README captured
STOP_WAIT_S = 15.0  # the longest `run` or the kept server may take to stop at SIGTERM
SCREEN = {"COLUMNS": "80", "LINES": "40"}  # the terminal the README's captures were taken on


@dataclass(frozen=True)
class Step:
    """A command block of the tour and the capture that follows it."""

    block: Block
    capture: str

    def commands(self) -> list[list[str]]:
        """Its commands' words (a pipeline's with its `|`), but `make`'s: the tour's set-up,
        done by the suite's own."""
        split = (shlex.split(line, comments=True) for line in self.block.text.splitlines())
        return [words for words in split if words and words[0] != "make"]


def tour() -> list[Step]:
    """The README's sh blocks followed by a text block, from the one that seeds the tour on."""
    found = blocks((README,))
    pairs = [
        Step(block, after.text)
        for block, after in itertools.pairwise(found)
        if block.lang == "sh" and after.lang == "text"
    ]
    first = next(n for n, step in enumerate(pairs) if "demo --keep" in step.block.text)
    return pairs[first:]


@dataclass
class Reader:
    """Types the tour's commands in `workdir` (which holds the README's sweeperd.toml), on an
    80-column terminal, the README's two ports replaced by this test's."""

    workdir: Path
    server: str  # the binary `demo --keep` runs
    ports: dict[str, str] = field(default_factory=lambda: {p: str(free_port()) for p in TOUR_PORTS})
    background: list[tuple[subprocess.Popen[str], IO[str], IO[str]]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return environment(
            {
                **SCREEN,
                "SWEEPERD_REDIS_URL": f"redis://127.0.0.1:{self.ports[TOUR_PORTS[0]]}/0",
                "SWEEPERD_METRICS_ADDR": f"127.0.0.1:{self.ports[TOUR_PORTS[1]]}",
            }
        )

    def ours(self, words: list[str]) -> list[str]:
        for theirs, mine in self.ports.items():
            words = [word.replace(theirs, mine) for word in words]
        return words

    def start(self, args: list[str]) -> tuple[Path, Path]:
        """`sweeperd ARGS` in the background: the files its stdout and stderr go to."""
        out, err = (self.workdir / f"{args[0]}.{kind}" for kind in ("out", "err"))
        streams = out.open("w"), err.open("w")
        process = subprocess.Popen(
            [sys.executable, "-m", "sweeperd", *args],
            stdout=streams[0],
            stderr=streams[1],
            text=True,
            cwd=self.workdir,
            env=self.env,
        )
        self.background.append((process, *streams))
        return out, err

    def run(self, args: list[str]) -> str:
        """`sweeperd ARGS` in the foreground: what it printed; it must exit 0."""
        done = subprocess.run(
            [sys.executable, "-m", "sweeperd", *args],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env=self.env,
            timeout=STEP_WAIT_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def stop(self) -> list[int | None]:
        """SIGTERM to what runs in the background, newest first (SIGKILL to what outlives
        STOP_WAIT_S): their exit codes, None for a killed one."""
        codes: list[int | None] = []
        for process, *streams in reversed(self.background):
            process.send_signal(signal.SIGTERM)
            try:
                codes.append(process.wait(STOP_WAIT_S))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                codes.append(None)
            for stream in streams:
                stream.close()
        self.background = []
        return codes

    def replay(self, words: list[str], capture: str) -> str:
        """One command of the tour, what it printed as the capture shows it (a dry run is
        checked against the recovery the capture shows, and prints nothing here)."""
        words = self.ours(words)
        if words[0] == "curl":
            return curl(words)
        args = words[1:]
        if args[0] == "demo":
            out, _ = self.start([*args, "--server", self.server])
            return str(wait_until(lambda: printed(out, KEPT), STEP_WAIT_S, "the seeded server"))
        if args[0] == "run":
            _, err = self.start(args)
            return logged(err, capture)
        if DRY_RUN in args:
            once = capture.partition("\n\n")[2]
            assert lines_of(self.run(args)) == lines_of(as_dry_run(once))
            return ""
        return self.run(args)


def curl(words: list[str]) -> str:
    """`curl -s HOST:PORT/PATH [| grep -E PATTERN]`, as the README writes it."""
    assert words[:2] == ["curl", "-s"], words
    with urllib.request.urlopen(f"http://{words[2]}", timeout=10) as answer:
        body: str = answer.read().decode()
    if len(words) == 3:
        return body
    assert words[3:6] == ["|", "grep", "-E"] and len(words) == 7, words
    return "\n".join(line for line in body.splitlines() if re.search(words[6], line))


def printed(out: Path, last: str) -> str | None:
    """A background command's output up to its line that starts with `last`, once printed."""
    lines = out.read_text().splitlines()
    ends = [n for n, line in enumerate(lines) if line.startswith(last)]
    return "\n".join(lines[: ends[0] + 1]) if ends else None


def events(log: Path) -> dict[str, dict[str, Any]]:
    """The first JSON log line of each event a background `run` has logged so far."""
    first: dict[str, dict[str, Any]] = {}
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        first.setdefault(event["event"], event)
    return first


def logged(err: Path, capture: str) -> str:
    """The daemon's log lines the capture shows, cut as it cuts them, once it has logged each."""
    shown = [cut_event(line) for line in capture.splitlines()]
    names = {event["event"] for event in shown}
    seen = wait_until(lambda: (e := events(err)).keys() >= names and e, STEP_WAIT_S, str(names))
    assert isinstance(seen, dict)
    return "\n".join(cut_line(seen[event["event"]], event) for event in shown)


def as_dry_run(once: str) -> str:
    """`once`'s output as its dry run prints it, by the README's words."""
    head, _, rest = once.partition("\n")
    return f"{head}{DRY_HEADER}\n" + rest.replace("recovered ", "would recover ", 1)


@pytest.fixture
def reader(tmp_path: Path, server_kind: str) -> Iterator[Reader]:
    """A reader in a folder holding the README's sweeperd.toml; what still runs in the
    background at the end is killed."""
    for name, text in shown_files().items():
        if "/" not in name:
            (tmp_path / name).write_text(text)
    typing = Reader(tmp_path, server_binary(server_kind))
    try:
        yield typing
    finally:
        typing.stop()  # SIGTERM: the kept server is stopped and its files removed


class TestTour:
    def test_the_readme_says_how_the_dry_run_differs(self) -> None:
        """The README says what the dry run prints instead of showing it, in the words this
        test turns `once`'s capture into the dry run's with."""
        joined = " ".join(README.read_text().split())
        assert f"`{DRY_HEADER.strip()}`" in joined and "`would recover 3`" in joined

    def test_the_tour_replays_as_captured(self, reader: Reader) -> None:
        """Every command of the tour, run as written on the server `sweeperd demo --keep`
        seeded, prints what the README captured: the seeded server, inspect, the dry run and
        the recovery, the daemon's log lines, top, the metrics; `run` and the kept server
        stop at SIGTERM with exit 0."""
        steps = tour()
        assert [len(step.commands()) for step in steps] == [1, 3, 1, 1, 2]
        for step in steps:
            said = "\n".join(reader.replay(words, step.capture) for words in step.commands())
            if step.commands()[0][0] == "curl":  # an exposition's series come in no set order
                assert sorted(lines_of(said)) == sorted(lines_of(step.capture)), step.block.where
            else:
                assert lines_of(said) == lines_of(step.capture), step.block.where
        assert reader.stop() == [0, 0]
