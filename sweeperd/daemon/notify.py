"""systemd's notify protocol (READY, RELOADING, WATCHDOG, STOPPING, STATUS) without a dependency."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping

import structlog

log = structlog.get_logger("sweeperd.notify")


def _address(notify_socket: str) -> str | bytes:
    """Return the socket's address: a path, or an abstract name given as "@name"."""
    if notify_socket.startswith("@"):
        return b"\0" + notify_socket[1:].encode()
    return notify_socket


def _watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """Return half the watchdog timeout in seconds, if systemd set one for this process."""
    usec, pid = environ.get("WATCHDOG_USEC"), environ.get("WATCHDOG_PID")
    if not usec or (pid and pid.strip() != str(os.getpid())):
        return None
    try:
        timeout_us = int(usec)
    except ValueError:
        return None
    return timeout_us / 2 / 1e6 if timeout_us > 0 else None


class Notifier:
    """Datagrams to $NOTIFY_SOCKET; with no socket every call is a no-op, and none raises."""

    def __init__(self, address: str | bytes | None, watchdog_interval_s: float | None) -> None:
        self._address = address
        self.watchdog_interval_s = watchdog_interval_s
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        notify_socket = environ.get("NOTIFY_SOCKET")
        address = _address(notify_socket) if notify_socket else None
        return cls(address, _watchdog_interval(environ))

    def send(self, message: str) -> bool:
        """Send one notification; False (logged at debug) when there is no socket or it failed."""
        if self._address is None:
            return False
        try:
            with self._lock:
                if self._socket is None:
                    self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.sendto(message.encode(), self._address)
        except OSError as exc:
            log.debug("notify_failed", message=message, error=str(exc))
            return False
        return True

    def ready(self) -> bool:
        return self.send("READY=1")

    def reloading(self) -> bool:
        """Send RELOADING=1 with the CLOCK_MONOTONIC microseconds at which the reload began:
        systemd stays `reloading` until the READY=1 that ends it. 252 reads RELOADING=1 alone;
        from 253, Type=notify-reload takes only a reload whose MONOTONIC_USEC is after its
        signal."""
        now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(f"RELOADING=1\nMONOTONIC_USEC={now_us}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def status(self, text: str) -> bool:
        """Send STATUS=…, on one line as the protocol wants."""
        return self.send("STATUS=" + " ".join(text.splitlines()))

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None
