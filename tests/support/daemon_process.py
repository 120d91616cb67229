"""`sweeperd run` as a real subprocess: its metrics, its health endpoints and its logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import free_port

WAIT_S = 20.0


def wait_until(check: Callable[[], object], timeout_s: float = WAIT_S, what: str = "") -> object:
    """Poll `check` until it returns something truthy; fail the test after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = check()
        if seen:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or check}")
        time.sleep(0.05)


class DaemonProcess:
    """One daemon, its metrics served on a free loopback port, its logs as JSON lines."""

    def __init__(self, workdir: Path, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.log_path = workdir / f"sweeperd-{self.port}.log"
        self.argv = [
            sys.executable,
            "-m",
            "sweeperd",
            "run",
            "--metrics-addr",
            f"127.0.0.1:{self.port}",
            "--log-format",
            "json",
            *args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProcess:
        return self.spawn().started()

    def spawn(self) -> DaemonProcess:
        """The process started, not waited for (several daemons start side by side)."""
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        return self

    def started(self) -> DaemonProcess:
        """Once it serves /healthz; it must not have exited."""
        wait_until(lambda: self.get("/healthz")[0] == 200 or self.exited(), what="/healthz")
        assert not self.exited(), self.log_text()
        return self

    def exited(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def metrics_text(self, timeout_s: float = 5.0) -> str:
        status, body = self.get("/metrics", timeout_s)
        assert status == 200, status
        return body

    def value(self, name: str, **labels: str) -> float | None:
        """One sample of the live exposition, or None when that series is not there."""
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return sample.value
        return None

    def total(self, name: str) -> float:
        """The sum of every sample of `name`, whatever its labels."""
        return sum(
            sample.value
            for family in text_string_to_metric_families(self.metrics_text())
            for sample in family.samples
            if sample.name == name
        )

    def wait_value(self, name: str, expected: float, **labels: str) -> None:
        """Wait until the series reads `expected`; a timeout says the value last read (the
        value when the wait began says nothing of where it went: 599 of 800 at the start of a
        wait that failed said neither that it stopped there nor that it overshot)."""
        self._wait(name, labels, lambda seen: seen == expected, f"== {expected}")

    def wait_at_least(self, name: str, least: float, **labels: str) -> None:
        """Wait until the series reads `least` or more: a counter that keeps growing, which a
        poll on a loaded machine may step over."""
        self._wait(name, labels, lambda seen: seen is not None and seen >= least, f">= {least}")

    def _wait(
        self,
        name: str,
        labels: dict[str, str],
        good: Callable[[float | None], bool],
        wanted: str,
    ) -> None:
        seen: list[float | None] = [None]

        def reached() -> bool:
            seen[0] = self.value(name, **labels)
            return good(seen[0])

        try:
            wait_until(reached, what=f"{name}{labels} {wanted}")
        except AssertionError as exc:
            raise AssertionError(f"{exc} (last read {seen[0]})") from None

    def wait_swept(self, queue: str) -> None:
        """Wait for the queue's first successful sweep (a per-queue series at every level)."""
        wait_until(
            lambda: self.value("sweeperd_last_success_timestamp_seconds", queue=queue) is not None,
            what=f"a first sweep of {queue}",
        )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self, name: str, since: int = 0) -> list[dict[str, object]]:
        """The JSON log lines whose event is `name` (from character `since` of the log on)."""
        found = []
        for line in self.log_text()[since:].splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("event") == name:
                found.append(entry)
        return found

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int:
        """Signal the daemon and return its exit code; it must exit within `timeout_s`."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = 10.0) -> int:
        """The exit code of a daemon already signalled; it must exit within `timeout_s` (a
        second signal while it exits would find Python's handlers gone)."""
        assert self.process is not None
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"sweeperd did not exit within {timeout_s}s") from None

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
