"""A TCP proxy in front of a server that can lose one reply: the call goes through, its answer
does not, and the client's connection is closed."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

CHUNK = 65536


class LosingProxy:
    """Forwards every connection to the server; the first request holding `marker` (once armed)
    is forwarded whole, its reply is read from the server and dropped, and the client's side
    is closed, so the call ran and its reply was lost."""

    def __init__(self, server_port: int, marker: bytes = b"EVALSHA") -> None:
        self.server_port = server_port
        self.marker = marker
        self.armed = threading.Event()
        self.lost = threading.Event()  # set once a reply was dropped
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.closing = threading.Event()
        self.threads: list[threading.Thread] = []
        self.losing: socket.socket | None = None  # the upstream whose next reply is dropped

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LosingProxy:
        self._spawn(self._accept)
        return self

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self.threads.append(thread)

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.server_port))
            self._spawn(self._requests, client, upstream)
            self._spawn(self._replies, upstream, client)

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Client to server; the marked request is the one whose reply is lost."""
        try:
            while data := client.recv(CHUNK):
                losing = self.armed.is_set() and self.marker in data
                if losing:
                    self.armed.clear()
                    self.losing = upstream
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket) -> None:
        """Server to client; after the marked request the reply is read, dropped, and the
        client's side closed."""
        try:
            while data := upstream.recv(CHUNK):
                if self.losing is upstream:
                    self.losing = None
                    self.lost.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)

    def close(self) -> None:
        self.closing.set()
        _close(self.listener)

    def __enter__(self) -> LosingProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
