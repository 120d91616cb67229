"""The choice of the queues this replica owns, made on a thread of its own when the members
change: the membership's heartbeat never waits behind it (at 100,000 queues a choice and its
takeover outlast a heartbeat's time to live, and a replica whose heartbeats lapse is dropped by
the others, which choose again: the replicas flapped)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("sweeperd.daemon")

THREAD = "choose"


class Chooser:
    """Run `choose` on its thread once asked (`soon`); asks made while it runs are answered by
    one run more, never lost and never run side by side."""

    def __init__(self, choose: Callable[[], None]) -> None:
        self._choose = choose
        self._asked = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread, which waits to be asked."""
        self._thread = threading.Thread(target=self._run, name=THREAD, daemon=True)
        self._thread.start()

    def soon(self) -> None:
        """Ask for a choice: run once the one in flight, if any, is done."""
        self._asked.set()

    def stop(self) -> None:
        """Choose no more: a choice in flight ends, none starts."""
        self._stopped.set()
        self._asked.set()

    def join(self, timeout_s: float) -> None:
        """Wait at most `timeout_s` for a choice in flight to end."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._asked.wait()
            if self._stopped.is_set():
                return
            self._asked.clear()
            try:
                self._choose()
            except Exception:
                log.exception(
                    "choice_failed", hint="the queues are chosen again at the next change"
                )
