"""`sweeperd demo`, the README's first command, as a user runs it: a real server, swept live."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sweeperd.commands.demo import BACKLOG, MAX_STALLED, find_module, find_server
from tests.support.paths import REPO
from tests.support.servers import server_binary


def demo(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sweeperd", "demo", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=cwd,
    )


class TestDemo:
    def test_the_demo_sweeps_its_queues_and_cleans_up(self, server_kind: str) -> None:
        """On each server (--server), with the module named relative to the working directory,
        the demo exits 0 and its summary shows the backlog drained, the dead, the exempt and
        the ghost, and the restart it caused."""
        done = demo(
            "--seconds",
            "6",
            "--server",
            server_binary(server_kind),
            "--module",
            "emq_stalled.so",
            cwd=REPO / "module",
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = done.stdout
        assert f"module: {REPO / 'module' / 'emq_stalled.so'}" in out
        reports = re.search(r"reports\s+recovered\s+(\d+) \(exempt (\d+)\)\s+dead\s+(\d+)", out)
        assert reports is not None, out
        # stalled 0 or 1 before, 1 or 2 after: under the demo's budget of 3, none dies
        assert MAX_STALLED == 3
        assert tuple(map(int, reports.groups())) == (BACKLOG, 0, 0)
        assert re.search(r"reports .* now: active 0,", out), out
        emails = re.search(
            r"emails\s+recovered\s+\d+ \(exempt (\d+)\)\s+dead\s+\d+\s+ghosts (\d+)", out
        )
        assert emails is not None, out
        assert (int(emails.group(1)) >= 2, emails.group(2)) == (True, "1"), out
        assert "server restarts seen: 1" in out

    def test_a_server_that_does_not_start_is_one_line(self, server_kind: str) -> None:
        """A server that exits at start (its module is not one): exit 3 and one line naming the
        server and ending its log, no traceback."""
        binary = server_binary(server_kind)
        done = demo("--server", binary, "--module", "README.md")
        assert done.returncode == 3, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"sweeperd: {binary} exited with code 1; its log ends: "), line
        assert line.endswith(f"Can't load module from {REPO / 'README.md'}: server aborting")

    def test_a_missing_module_or_server_is_a_bad_option(self) -> None:
        """A --module that is no file, or a --server that is no executable: exit 2, one line."""
        for args, said in [
            (["--module", "no-such.so"], "sweeperd: --module no-such.so (SWEEPERD_MODULE): "),
            (["--server", "no-such-server"], "sweeperd: --server no-such-server: "),
        ]:
            done = demo(*args)
            assert done.returncode == 2, done.stderr
            [line] = done.stderr.splitlines()
            assert line.startswith(said), line

    def test_a_taken_metrics_port_is_a_bad_option(self, server_kind: str) -> None:
        """A --metrics-port something listens on: exit 2, one line naming the address."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            done = demo("--metrics-port", str(port), "--server", server_binary(server_kind))
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"sweeperd: --metrics-port: cannot listen on 127.0.0.1:{port}: Address already in "
            "use; pick a free one, or 0"
        ]

    def test_seconds_that_are_no_number_are_a_bad_option(self) -> None:
        """--seconds nan passes the minimum click checks; it is refused in one line, exit 2."""
        done = demo("--seconds", "nan")
        assert (done.returncode, done.stderr.splitlines()) == (
            2,
            ["sweeperd: --seconds must be a number of seconds, not nan"],
        )


class TestFinding:
    def test_the_first_server_on_path(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without --server: redis-server when both are on PATH, else valkey-server, else a
        FileNotFoundError saying how to install one."""
        for name in ("valkey-server", "redis-server"):
            (tmp_path / name).write_text("#!/bin/sh\n")
            (tmp_path / name).chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))
        assert find_server(None) == str(tmp_path / "redis-server")
        (tmp_path / "redis-server").unlink()
        assert find_server(None) == str(tmp_path / "valkey-server")
        assert find_server("valkey-server") == str(tmp_path / "valkey-server")
        (tmp_path / "valkey-server").unlink()
        with pytest.raises(FileNotFoundError, match="apt-get install redis-server"):
            find_server(None)

    def test_a_relative_module_is_made_absolute(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The server runs in a directory of its own: a module named relative to the working
        directory is passed to it as an absolute path."""
        (tmp_path / "m.so").write_bytes(b"")
        monkeypatch.chdir(tmp_path)
        assert find_module(Path("m.so")) == tmp_path / "m.so"
