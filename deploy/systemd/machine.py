"""A Debian bookworm booted by its own systemd as PID 1 in namespaces of its own; its journal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BOOT = HERE / "boot.sh"
# The environment of every command run in the machine: nothing of this one's leaks in.
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "SYSTEMD_COLORS": "0",
    "SYSTEMD_PAGER": "",
}
COMMAND_TIMEOUT_S = 120
BOOT_TIMEOUT_S = 60
POWEROFF_TIMEOUT_S = 60
# Namespaces a command joins: all of them, or all but the network (pip reaches the package index).
EVERY_NAMESPACE = ("--mount", "--pid", "--uts", "--ipc", "--net")
BUT_THE_NETWORK = ("--mount", "--pid", "--uts", "--ipc")


@dataclass(frozen=True)
class Entry:
    """One journal entry: who said what about which unit, and when."""

    index: int
    realtime_us: int
    monotonic_us: int  # CLOCK_MONOTONIC when journald took it: the clock MONOTONIC_USEC= is on
    pid: int
    unit: str  # the unit it is about: its own output, or PID 1's words about it
    ident: str  # SYSLOG_IDENTIFIER: a service's program name, "systemd" for PID 1
    message: str

    @property
    def from_systemd(self) -> bool:
        return self.pid == 1

    def event(self) -> dict[str, Any] | None:
        """The daemon's JSON log line as a dict, when it is one."""
        if self.from_systemd or not self.message.startswith("{"):
            return None
        try:
            parsed = json.loads(self.message)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None

    def shown(self) -> str:
        """As `journalctl -o short-precise` shows it (times in UTC)."""
        at = datetime.fromtimestamp(self.realtime_us / 1e6, UTC).strftime("%H:%M:%S.%f")
        who = "systemd" if self.from_systemd else self.unit.removesuffix(".service")
        return f"{at} {who}[{self.pid}]: {self.message}"


def entry_of(index: int, fields: Mapping[str, Any]) -> Entry:
    message = fields.get("MESSAGE", "")
    if isinstance(message, list):  # journalctl's JSON for a message that is not UTF-8
        message = bytes(message).decode(errors="replace")
    return Entry(
        index=index,
        realtime_us=int(fields["__REALTIME_TIMESTAMP"]),
        monotonic_us=int(fields["__MONOTONIC_TIMESTAMP"]),
        pid=int(fields.get("_PID", 0)),
        unit=str(fields.get("UNIT" if fields.get("_PID") == "1" else "_SYSTEMD_UNIT") or ""),
        ident=str(fields.get("SYSLOG_IDENTIFIER", "")),
        message=str(message),
    )


class Journal:
    """`journalctl --follow` of the whole boot, read as it comes: waits are on entries, not time."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV
        )
        self.entries: list[Entry] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self.read, name="journal", daemon=True)
        self.reader.start()

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            with self.changed:
                self.entries.append(entry_of(len(self.entries), fields))
                self.changed.notify_all()

    def position(self) -> int:
        """Where the journal is now: what a later wait or listing starts from."""
        with self.changed:
            return len(self.entries)

    def since(self, position: int, unit: str | None = None) -> list[Entry]:
        with self.changed:
            return [e for e in self.entries[position:] if unit is None or e.unit == unit]

    def wait_for(
        self, match: Callable[[Entry], bool], since: int, timeout_s: float, what: str
    ) -> Entry:
        """The first entry from `since` on that matches, waiting up to timeout_s for it."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                found = next((e for e in self.entries[since:] if match(e)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise AssertionError(f"the journal never showed {what} in {timeout_s:.0f}s")
                self.changed.wait(left)

    def close(self) -> None:
        """journalctl ended (nsenter's child, in the machine: nsenter itself stays outside and
        would leave it a zombie that a shutdown waits for), then read to its end."""
        if self.process.poll() is None:
            inside = child_of(self.process.pid)
            if inside:
                os.kill(inside, signal.SIGTERM)
            self.process.wait(10)
        self.reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


class Machine:
    """systemd booted over `root` (an unpacked root filesystem) by deploy/systemd/boot.sh."""

    def __init__(self, root: Path, console: Path) -> None:
        self.root = root
        self.console = console
        self.unshare: subprocess.Popen[bytes] | None = None
        self.pid = 0  # the host's PID of the machine's PID 1
        self.journal: Journal | None = None

    def boot(self) -> None:
        """systemd as PID 1 in new PID, mount, network, UTS and IPC namespaces, booted up to
        `systemctl is-system-running --wait`; then its journal followed."""
        with self.console.open("wb") as out:
            self.unshare = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--net", "--uts",
                 "--ipc", str(BOOT), str(self.root)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=ENV,
            )  # fmt: skip
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while not self.pid or not self.systemd_answers():
            if self.unshare.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"systemd did not boot:\n{self.console.read_text()[-3000:]}")
            self.pid = self.pid or child_of(self.unshare.pid)
            time.sleep(0.05)  # the boot has no event to wait on from outside the namespaces
        state = self.run("systemctl", "is-system-running", "--wait", check=False).stdout.strip()
        assert state == "running", f"the machine booted {state}: {self.failed_units()}"
        self.journal = Journal(self.argv(["journalctl", "--boot", "--follow", "--lines=all",
                                          "--output=json"]))  # fmt: skip

    def systemd_answers(self) -> bool:
        """PID 1 is systemd and its private socket is up."""
        try:
            if Path(f"/proc/{self.pid}/comm").read_text().strip() != "systemd":
                return False
        except OSError:
            return False
        return self.run("test", "-S", "/run/systemd/private", check=False).returncode == 0

    def failed_units(self) -> str:
        return self.run("systemctl", "--failed", "--no-legend", check=False).stdout

    def argv(
        self, command: Sequence[str], namespaces: Sequence[str] = EVERY_NAMESPACE
    ) -> list[str]:
        return ["nsenter", f"--target={self.pid}", *namespaces, "--root", "--wd", "--", *command]

    def run(
        self,
        *command: str,
        check: bool = True,
        namespaces: Sequence[str] = EVERY_NAMESPACE,
        env: Mapping[str, str] | None = None,
        timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """A command in the machine, as root there; its failure fails the test unless check is
        False."""
        result = subprocess.run(
            self.argv(command, namespaces), capture_output=True, text=True,
            env={**ENV, **(env or {})}, timeout=timeout_s, check=False,
        )  # fmt: skip
        if check:
            assert result.returncode == 0, (
                f"{' '.join(command)} exited {result.returncode}\n{result.stdout}{result.stderr}"
            )
        return result

    def start(self, *command: str) -> subprocess.Popen[str]:
        """A command in the machine that this one does not wait for."""
        return subprocess.Popen(
            self.argv(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=ENV,
        )  # fmt: skip

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        """`systemctl show -p …` of a unit, as a dict."""
        args = [f"--property={p}" for p in properties]
        out = self.run("systemctl", "show", *args, unit).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        """A file in the machine's root filesystem (seen inside at `path`)."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)

    def poweroff(self) -> None:
        """The journal's follower ended, then systemctl poweroff (systemd as a container's PID 1
        exits, and every process of the machine with it); killed if it hangs."""
        if self.journal is not None:
            self.journal.close()
        try:
            if self.unshare is not None and self.unshare.poll() is None and self.pid:
                self.run("systemctl", "poweroff", check=False)
                try:
                    self.unshare.wait(POWEROFF_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise AssertionError("the machine did not power off") from None
        finally:
            if self.unshare is not None and self.unshare.poll() is None:
                os.killpg(self.unshare.pid, signal.SIGKILL)
                self.unshare.wait()


def child_of(pid: int) -> int:
    """The first child of a process, 0 while it has none (unshare --fork's is PID 1 inside)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    return int(children[0]) if children else 0
