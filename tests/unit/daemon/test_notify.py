"""systemd notify: messages arrive on a real AF_UNIX datagram socket; no socket, no effect."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from sweeperd.daemon.notify import Notifier


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket bound in tmp_path, as systemd's notify socket."""
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        yield sock, path


def receive(sock: socket.socket) -> str:
    return sock.recv(4096).decode()


class TestMessages:
    def test_every_message(self, listener: tuple[socket.socket, str]) -> None:
        """ready, watchdog, stopping and status send their datagrams."""
        sock, path = listener
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": path})
        try:
            assert notifier.ready()
            assert notifier.watchdog()
            assert notifier.status("sweeping 3 queues")
            assert notifier.stopping()
            received = [receive(sock) for _ in range(4)]
        finally:
            notifier.close()
        assert received == ["READY=1", "WATCHDOG=1", "STATUS=sweeping 3 queues", "STOPPING=1"]

    def test_reloading_carries_the_monotonic_clock(
        self, listener: tuple[socket.socket, str]
    ) -> None:
        """RELOADING=1 comes with MONOTONIC_USEC, CLOCK_MONOTONIC in microseconds read when it
        is sent (systemd >= 253 takes only a reload timed after its own signal)."""
        sock, path = listener
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": path})
        before_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert notifier.reloading()
        after_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        notifier.close()
        reloading, stamp = receive(sock).split("\n")
        assert reloading == "RELOADING=1"
        name, value = stamp.split("=")
        assert name == "MONOTONIC_USEC"
        assert before_us <= int(value) <= after_us

    def test_status_one_line(self, listener: tuple[socket.socket, str]) -> None:
        """A status with line breaks is sent on one line."""
        sock, path = listener
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": path})
        notifier.status("a\nb")
        notifier.close()
        assert receive(sock) == "STATUS=a b"

    def test_abstract_socket(self) -> None:
        """An @name socket is the abstract namespace."""
        name = f"sweeperd-test-{uuid.uuid4().hex}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(b"\0" + name.encode())
            sock.settimeout(5)
            notifier = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
            assert notifier.ready()
            notifier.close()
            assert receive(sock) == "READY=1"


class TestNoSocket:
    def test_no_op(self) -> None:
        """Without NOTIFY_SOCKET every call does nothing and raises nothing."""
        notifier = Notifier.from_environ({})
        with structlog.testing.capture_logs() as captured:  # a send tried would log its failure
            assert not notifier.ready()
            assert not notifier.reloading()
            assert not notifier.watchdog()
            assert not notifier.stopping()
            assert not notifier.status("x")
        assert captured == []
        assert notifier.watchdog_interval_s is None
        notifier.close()

    def test_send_failure(self, tmp_path: Path) -> None:
        """A socket that is gone is a logged debug event, never an exception."""
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
        with structlog.testing.capture_logs() as captured:
            assert not notifier.ready()
        notifier.close()
        assert [(e["event"], e["log_level"]) for e in captured] == [("notify_failed", "debug")]

    def test_default_environ(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """from_environ reads os.environ by default."""
        monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
        monkeypatch.delenv("WATCHDOG_USEC", raising=False)
        with structlog.testing.capture_logs() as captured:
            assert not Notifier.from_environ().ready()
        assert captured == []  # no socket: nothing sent, no failure logged


class TestWatchdog:
    @pytest.mark.parametrize(
        ("environ", "expected"),
        [
            ({"WATCHDOG_USEC": "30000000"}, 15.0),
            ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
            ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
            ({"WATCHDOG_USEC": "0"}, None),
            ({"WATCHDOG_USEC": "soon"}, None),
            ({}, None),
        ],
    )
    def test_interval(self, environ: dict[str, str], expected: float | None) -> None:
        """Half of WATCHDOG_USEC in seconds, when it is meant for this process."""
        assert Notifier.from_environ(environ).watchdog_interval_s == expected
