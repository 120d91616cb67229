"""`sweeperd top`'s live view as a process on a pseudo-terminal of a given size: what the
terminal received, raw and as text, and the signals a person or a supervisor sends it."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence

ANSI = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[()][A-Z0-9]|[=>])")
LIVE_TIMEOUT_S = 20.0
ALT_SCREEN_ON, ALT_SCREEN_OFF = b"\x1b[?1049h", b"\x1b[?1049l"
CURSOR_HIDDEN, CURSOR_SHOWN = b"\x1b[?25l", b"\x1b[?25h"


class LiveView:
    """`sweeperd top ARGS` on a terminal of `lines` x `columns`, its stderr to a pipe of its
    own (a traceback would show there), stopped at the end of the with block if still running."""

    def __init__(self, args: Sequence[str], lines: int = 30, columns: int = 110) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPERD_")}
        env.update(TERM="xterm-256color", COLUMNS=str(columns), LINES=str(lines))
        env.pop("NO_COLOR", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sweeperd", "top", *args],
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        self.received = b""

    @property
    def text(self) -> str:
        """What the terminal received so far, its control sequences taken out."""
        return ANSI.sub("", self.received.decode(errors="replace"))

    def read_until(self, wanted: Sequence[str]) -> str:
        """The text received, read until every wanted text shows; the test fails where the
        process ends or the time is up first."""
        deadline = time.monotonic() + LIVE_TIMEOUT_S
        while not all(w in self.text for w in wanted):
            ended = not self._read(0.2) and self.process.poll() is not None
            if ended or time.monotonic() > deadline:
                missing = [w for w in wanted if w not in self.text]
                raise AssertionError(f"the view never showed {missing}: {self.text[-2000:]!r}")
        return self.text

    def read_for(self, seconds: float) -> None:
        """Read what the terminal receives for `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read(max(0.0, deadline - time.monotonic()))

    def stop(self, signum: int) -> tuple[int, str]:
        """Send `signum`; the exit code and stderr once the process has ended, everything it
        wrote to the terminal read."""
        self.process.send_signal(signum)
        deadline = time.monotonic() + LIVE_TIMEOUT_S
        while self.process.poll() is None and time.monotonic() < deadline:
            self._read(0.1)  # read on: a terminal left full would hold its last writes
        while self._read(0.1):
            pass
        code = self.process.wait(timeout=LIVE_TIMEOUT_S)
        assert self.process.stderr is not None
        return code, self.process.stderr.read().decode(errors="replace")

    def hang_up(self) -> tuple[int, str]:
        """Close the terminal under the view, then SIGHUP it as the kernel does the session of a
        terminal that hangs up; its exit code and stderr."""
        os.close(self.master)
        self.master = -1
        self.process.send_signal(signal.SIGHUP)
        code = self.process.wait(timeout=LIVE_TIMEOUT_S)
        assert self.process.stderr is not None
        return code, self.process.stderr.read().decode(errors="replace")

    def _read(self, timeout_s: float) -> bool:
        """Whatever the terminal holds within `timeout_s`; False when there was nothing."""
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the process closed its side
            return False
        self.received += chunk
        return bool(chunk)

    def __enter__(self) -> LiveView:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        if self.master != -1:
            os.close(self.master)


def restored(received: bytes) -> bool:
    """The terminal was given back after the view's last start: the main screen and the cursor."""
    after = received.rpartition(ALT_SCREEN_ON)[2]
    return ALT_SCREEN_OFF in after and CURSOR_SHOWN in after.rpartition(CURSOR_HIDDEN)[2]
