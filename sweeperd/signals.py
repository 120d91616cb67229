"""Signals heard without a lock: the handler does nothing, a wakeup socket carries each signal.

A handler runs on the main thread between two of its bytecodes, wherever it is: one that sets
a threading.Event can interrupt that thread while it holds the Event's own lock (on the way out
of Event.wait) and wait for that lock forever. The main thread then never turns again.
"""

from __future__ import annotations

import select
import signal
import socket
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType

Handler = Callable[[int, FrameType | None], object]


def ignore(_signum: int, _frame: FrameType | None) -> None:
    """Do nothing: the wakeup socket has the signal already (the handler only overrides the
    default action, which would end the process)."""


class SignalInbox:
    """Hear `signums` while in use: their handler is `handler` (by default one that does
    nothing), and `wait` returns them to the loop that reads them, in the order they came."""

    def __init__(self, signums: Iterable[int], handler: Handler = ignore) -> None:
        self.signums = frozenset(signums)
        self._handler = handler
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self._previous: dict[int, Handler | int | None] = {}
        self._previous_fd = -1

    def __enter__(self) -> SignalInbox:
        """Take the signals (on the main thread, as Python requires)."""
        self._previous_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        self._previous = {s: signal.signal(s, self._handler) for s in self.signums}
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Give the signals and the wakeup fd back to what held them before."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        signal.set_wakeup_fd(self._previous_fd)
        self._read.close()
        self._write.close()

    def wait(self, timeout_s: float) -> list[signal.Signals]:
        """Return the signals that came since the last call, waiting up to `timeout_s` for one."""
        readable, _, _ = select.select([self._read], [], [], timeout_s)
        return self.take() if readable else []

    def take(self) -> list[signal.Signals]:
        """Return the signals that came since the last call, without waiting."""
        came = bytearray()
        while True:
            try:
                chunk = self._read.recv(4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            came += chunk
        # The socket hears every signal Python handles; only ours are read.
        return [signal.Signals(n) for n in came if n in self.signums]
