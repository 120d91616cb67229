"""The choice of the queues owned on its own thread (daemon/choosing.py): asks made during a
choice are answered by one more run, choices never overlap, a failed one is logged and the next
ask runs (the daemon's heartbeat hands the choice over: test_daemon_inprocess.py)."""

from __future__ import annotations

import threading

from structlog.testing import capture_logs

from sweeperd.daemon.choosing import Chooser
from tests.support.daemon_process import wait_until


class Choices:
    """A choose function that counts its runs and their overlap, the first one held until
    `release` is set."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.runs = 0
        self.running = 0
        self.most_at_once = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail_first = fail_first
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        self.started.set()
        self.release.wait(10)
        with self._lock:
            self.running -= 1
            self.runs += 1
            first = self.runs == 1
        if first and self.fail_first:
            raise RuntimeError("a bug in the choice")


def test_asks_during_a_choice_are_answered_by_one_more() -> None:
    choices = Choices()
    chooser = Chooser(choices)
    chooser.start()
    chooser.soon()
    assert choices.started.wait(10)
    for _ in range(3):
        chooser.soon()
    choices.release.set()
    wait_until(lambda: choices.runs == 2, what="the second choice")
    chooser.stop()
    chooser.join(5)
    assert (choices.runs, choices.most_at_once) == (2, 1)


def test_a_failed_choice_is_logged_and_the_next_ask_runs() -> None:
    choices = Choices(fail_first=True)
    choices.release.set()
    chooser = Chooser(choices)
    with capture_logs() as logs:
        chooser.start()
        chooser.soon()
        wait_until(lambda: choices.runs == 1, what="the first choice")
        wait_until(lambda: any(e["event"] == "choice_failed" for e in logs), what="logged")
        chooser.soon()
        wait_until(lambda: choices.runs == 2, what="the next choice")
    chooser.stop()
    chooser.join(5)
    assert [e["event"] for e in logs] == ["choice_failed"]


def test_stopped_before_an_ask_chooses_nothing() -> None:
    choices = Choices()
    chooser = Chooser(choices)
    chooser.start()
    chooser.stop()
    chooser.soon()
    chooser.join(5)
    assert choices.runs == 0
