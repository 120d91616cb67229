"""`sweeperd` as a process on a pseudo-terminal: what a person sees, and what they type."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from types import TracebackType

from tests.support.invoke import CLI_TIMEOUT_S, environment

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class OnTerminal:
    """One command whose stdin, stdout and stderr are one pseudo-terminal."""

    def __init__(self, *args: str, term: str = "dumb") -> None:
        """`sweeperd ARGS` on a terminal of the kind `term` names (a dumb one draws no bars)."""
        self.master, slave = os.openpty()
        self.received = b""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sweeperd", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environment({"TERM": term, "NO_COLOR": "1"}),
            start_new_session=True,
        )
        os.close(slave)

    @property
    def screen(self) -> str:
        """Everything the terminal received so far, without escape sequences."""
        return ANSI.sub("", self.received.decode(errors="replace")).replace("\r\n", "\n")

    def read(self, timeout_s: float = 0.2) -> bool:
        """What arrives within `timeout_s`; False once the terminal is closed."""
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the process exited: the terminal's other end is closed
            return False
        self.received += chunk
        return bool(chunk)

    def wait_for(self, text: str) -> str:
        """The screen once `text` shows on it; the test fails when it does not in time."""
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while text not in self.screen:
            if time.monotonic() > deadline or not self.read():
                raise AssertionError(f"{text!r} never showed; the screen:\n{self.screen}")
        return self.screen

    def keys(self, text: str) -> None:
        """What a person types."""
        os.write(self.master, text.encode())

    def finish(self) -> int:
        """The exit code, once everything it wrote is read."""
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while self.read() and time.monotonic() < deadline:
            pass
        return self.process.wait(timeout=CLI_TIMEOUT_S)

    def __enter__(self) -> OnTerminal:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)
