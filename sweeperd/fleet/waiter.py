"""A thread's wait for a connection's next message that other threads can end early: a socket
pair beside the connection's socket, a byte written to it ends the wait."""

from __future__ import annotations

import contextlib
import select
import socket
from typing import Protocol


class Readable(Protocol):
    """What the wait uses of a redis-py connection."""

    def can_read(self, timeout: float) -> bool: ...


class Waiter:
    """Waits for a connection to have a message or for a poke(), whichever comes first.

    Waking a thread costs: on this project's 2-core machines each wake from a wait was 75-190 µs
    of CPU, so a thread that looked every 50 ms for work other threads might have left cost
    0.5 % of a core at rest. With a poke it sleeps until there is work. Its sockets exist
    between open() and close(), on the waiting thread's watch; a poke outside it is lost.
    """

    def __init__(self) -> None:
        self._pair: tuple[socket.socket, socket.socket] | None = None

    def open(self) -> None:
        """Make the socket pair (the waiting thread's first step)."""
        read, write = socket.socketpair()
        read.setblocking(False)
        write.setblocking(False)
        self._pair = read, write

    def close(self) -> None:
        """Close the socket pair (the waiting thread's last step)."""
        pair, self._pair = self._pair, None
        for end in pair or ():
            end.close()

    def poke(self) -> None:
        """End the wait under way, or the next one, at once; from any thread."""
        pair = self._pair
        # Refused when the buffer is full (a poke is waiting already) or once closed.
        with contextlib.suppress(OSError):
            if pair is not None:
                pair[1].send(b"\0")

    def wait(self, connection: Readable, timeout_s: float) -> bool:
        """Return True once the connection has a reply to read, False after `timeout_s` or a
        poke; a connection that fails raises, as its can_read does. What its parser or its TLS
        layer holds already is looked at first (a select sees only the socket)."""
        if connection.can_read(timeout=0):
            return True
        sock = getattr(connection, "_sock", None)
        if sock is None or self._pair is None:
            return connection.can_read(timeout=timeout_s)
        poked = self._pair[0]
        ready, _, _ = select.select([sock, poked], [], [], max(0.0, timeout_s))
        if poked in ready:
            with contextlib.suppress(OSError):
                while poked.recv(4096):
                    pass
        return sock in ready and connection.can_read(timeout=0)
