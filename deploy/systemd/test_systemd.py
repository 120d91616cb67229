"""sweeperd.service under a real systemd, PID 1 of a booted Debian bookworm: the start while
Redis is down, the credential, the sandboxing, the watchdog, reload, stop, the journal and the
exposure, each shown in systemd's own words. The tests run in order, on one machine."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from machine import BUT_THE_NETWORK, Entry, Journal, Machine

from sweeperd.config.options import OPTIONS
from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import wait_until
from tests.support.events import documented
from tests.support.helpers import FUTURE_OFFSET_MS, hash_of, lease, members, now_ms, run_id
from tests.support.shipped import unit_directives

pytestmark = pytest.mark.timeout(300)  # the first test boots the machine; the watchdog waits 30 s

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
OPERATIONS = REPO / "docs" / "operations.md"
UNIT, REDIS_UNIT = "sweeperd.service", "emq-redis.service"
ROOTFS_VARIABLE = "SWEEPERD_SYSTEMD_ROOTFS"  # deploy/systemd/rootfs.sh's tarball (the Makefile)
CHECKOUT = "/root/sweeperd"  # the files the documented commands name, as in a checkout
CONFIG = "/etc/sweeperd/sweeperd.toml"
SETTINGS = """\
# sweeperd's settings beside /etc/sweeperd/sweeperd.env, which sets none
redis_url = "redis://127.0.0.1:6379/0"
queues = ["orders", "mail"]
interval = 1
max_stalled = {max_stalled}
drain_share = 0.02  # a backlog drains slowly: the stop finds it being drained
"""
QUEUE = QueueKeys("orders")  # one of the two queues of SETTINGS
WAIT_S = 60  # for what the daemon does on its own: a sweep, a start, a reload
BULK = 50_000  # leases a stop finds being drained
# Debug lines of PID 1 (and of its child setting up a process's sandbox) that say nothing a
# reader of a step needs; every line stays in the journal, kept in full when a test fails.
CHATTER = re.compile(
    r"(Trying to enqueue|Installed new job|Enqueued job|Will spawn child|About to execute"
    r"|Forked |User lookup|Child \d+ belongs|Failed to send unit change signal|cgroup"
    r"|Got notification message from PID \d+ \((WATCHDOG=1|STATUS=)|Passing \d+ fds"
    r"|Collecting|Sent signal SIGCONT|Releasing resources|Control group is empty"
    r"|Main PID guessed|Adding to gc queue|Unit entered failed state"
    r"|Failed to parse system call|Mounting |Remounting |Moving mount|Bind-mounting"
    r"|Restricting namespace|Successfully forked|\(sd-mkdcreds\)|Applying namespace mount"
    r"|is duplicate|made redundant|Successfully mounted|Followed |Failed to umount"
    r"|mount_setattr|Failed at setting rlimit|nscd socket|PR_SET_MM_ARG_START"
    r"|Failed to mount /run/credentials/)"
)


def say(*lines: str) -> None:
    for line in lines:
        print(f"    {line}", flush=True)


def heading(text: str) -> None:
    print(f"\n  == {text}", flush=True)


def words(entries: list[Entry], unit: str = UNIT) -> None:
    """What systemd and the unit said, chatter aside, as the journal shows it."""
    for entry in entries:
        if entry.unit == unit and (entry.event() is not None or not CHATTER.search(entry.message)):
            say(entry.shown()[:220])


def shown(machine: Machine, *properties: str) -> dict[str, str]:
    values = machine.show(UNIT, *properties)
    say("systemctl show: " + " ".join(f"{k}={values[k]}" for k in properties))
    return values


def systemd_said(text: str, pid: int | None = None) -> Callable[[Entry], bool]:
    """An entry of PID 1 about sweeperd.service containing text (and naming `pid`)."""
    return lambda e: (
        e.from_systemd and e.unit == UNIT and text in e.message
        and (pid is None or f"PID {pid} " in e.message or f"process {pid} " in e.message)
    )  # fmt: skip


def daemon_logged(event: str, **fields: object) -> Callable[[Entry], bool]:
    """A JSON line of sweeperd with this event (and these field values)."""

    def match(entry: Entry) -> bool:
        parsed = entry.event()
        return (
            entry.unit == UNIT and parsed is not None and parsed.get("event") == event
            and all(parsed.get(k) == v for k, v in fields.items())
        )  # fmt: skip

    return match


def journal(machine: Machine) -> Journal:
    assert machine.journal is not None
    return machine.journal


def main_pid(machine: Machine) -> int:
    return int(machine.show(UNIT, "MainPID")["MainPID"])


START = "systemctl enable --now sweeperd"


def installing() -> str:
    """The commands of docs/operations.md's "Running under systemd", as written, but the last:
    `systemctl enable --now sweeperd`, the start, which a test runs itself."""
    text = OPERATIONS.read_text()
    section = text.split("## Running under systemd", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    install, start = block.split(START)
    assert start.strip() == "", "the documented commands end with the start"
    return install


@pytest.fixture(scope="module")
def password() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def machine(password: str, request: pytest.FixtureRequest) -> Iterator[Machine]:
    """The rootfs unpacked, sweeperd's wheel, the module and Redis's unit put in, systemd
    booted (PID 1 logging at debug: what it received by the notify socket, each state)."""
    tarball = os.environ.get(ROOTFS_VARIABLE, "")
    assert tarball and Path(tarball).is_file(), f"{ROOTFS_VARIABLE}: run `make systemd-test`"
    work = Path(tempfile.mkdtemp(prefix="sweeperd-systemd-", dir="/var/tmp"))
    root = work / "root"
    root.mkdir()
    machine = Machine(root, work / "console.log")
    try:
        started = time.monotonic()
        subprocess.run(["tar", "-C", str(root), "-xf", tarball], check=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
             str(root / "root" / "dist"), str(REPO)],
            check=True, capture_output=True,
        )  # fmt: skip
        shutil.copytree(REPO / "systemd", root / CHECKOUT.lstrip("/") / "systemd")
        shutil.copytree(REPO / "docs", root / CHECKOUT.lstrip("/") / "docs")
        modules = root / "usr/local/lib/redis/modules"  # where the module image has it
        modules.mkdir(parents=True)
        shutil.copy(REPO / "module" / "emq_stalled.so", modules / "emq_stalled.so")
        machine.write("/etc/systemd/system/emq-redis.service",
                      (HERE / "emq-redis.service").read_text())  # fmt: skip
        machine.write("/etc/redis/emq.conf", (HERE / "emq-redis.conf").read_text())
        machine.write("/etc/redis/emq-password.conf", f"requirepass {password}\n", 0o600)
        redis_ids = owner_of(root, "redis")
        os.chown(root / "etc/redis/emq-password.conf", *redis_ids)
        shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")  # for pip, below
        if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
            shutil.copy("/etc/ssl/certs/ca-certificates.crt", root / "root/host-ca.crt")
        machine.boot()
        heading(f"booted in {time.monotonic() - started:.1f}s (unpacked, wheel built, boot)")
        say(machine.run("systemctl", "--version").stdout.splitlines()[0])
        say("systemctl is-system-running: running")
        machine.run("systemctl", "log-level", "debug")
        say("systemctl log-level debug: PID 1 logs each notification and each state change")
        yield machine
    finally:
        if machine.journal is not None and request.session.testsfailed:  # chatter too
            kept = work.with_name(work.name + "-journal.log")
            kept.write_text("".join(e.shown() + "\n" for e in machine.journal.since(0)))
            print(f"\n  the machine's whole journal: {kept}", flush=True)
        began = time.monotonic()
        try:
            machine.poweroff()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"\n  powered off and removed in {time.monotonic() - began:.1f}s", flush=True)


def owner_of(root: Path, user: str) -> tuple[int, int]:
    """uid and gid of a user of the machine's /etc/passwd."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise AssertionError(f"no user {user} in the machine")


@pytest.fixture(scope="module")
def keyspace(machine: Machine, password: str) -> redis.Redis:
    """Redis of the machine through its Unix socket (its TCP port is in the machine's network)."""
    return redis.Redis(
        unix_socket_path=str(machine.root / "var/lib/redis/emq.sock"), password=password
    )


def pip_environment() -> dict[str, str]:
    """What pip in the machine needs of this one's settings to reach the same index."""
    env = {k: v for k, v in os.environ.items()
           if k in {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST",
                    "PIP_DEFAULT_TIMEOUT", "http_proxy", "https_proxy", "no_proxy",
                    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}}  # fmt: skip
    if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        env["PIP_CERT"] = "/root/host-ca.crt"
    return env


class TestInstall:
    def test_installed_as_the_docs_say(self, machine: Machine, password: str) -> None:
        """docs/operations.md's commands, run as written (the wheel built here for `pip install
        sweeperd`, a random password for 'the-password'), install the shipped unit unchanged,
        with no drop-in: nothing of it is lifted."""
        heading("install: docs/operations.md, 'Running under systemd'")
        install = installing()
        [wheel] = (machine.root / "root/dist").glob("sweeperd-*.whl")
        commands, pips = re.subn(
            r"pip install sweeperd .*$", f"pip install /root/dist/{wheel.name}", install,
            flags=re.M,
        )  # fmt: skip
        commands, passwords = re.subn("'the-password'", f"'{password}'", commands)
        assert (pips, passwords) == (1, 1), "the documented install names the wheel and password"
        say(*install.strip().splitlines())
        machine.run("sh", "-euc", f"cd {CHECKOUT}\n{commands}", namespaces=BUT_THE_NETWORK,
                    env=pip_environment(), timeout_s=600)  # fmt: skip
        installed = (machine.root / "etc/systemd/system/sweeperd.service").read_bytes()
        assert installed == (REPO / "systemd/sweeperd.service").read_bytes()
        for page in unit_directives(installed.decode())["Documentation"]:
            assert (machine.root / page.removeprefix("file:///")).is_file(), page
        unit = shown(machine, "FragmentPath", "DropInPaths", "UnitFileState", "LoadState")
        assert unit == {
            "FragmentPath": "/etc/systemd/system/sweeperd.service",
            "DropInPaths": "",
            "UnitFileState": "disabled",
            "LoadState": "loaded",
        }
        assert machine.run("sweeperd", "version").stdout.strip() == f"sweeperd {VERSION}"
        secret = machine.run("stat", "-c", "%a %U", "/etc/sweeperd/redis-password").stdout
        assert secret.strip() == "600 root"
        say(f"sweeperd {VERSION}; /etc/sweeperd/redis-password: mode 600, root's")
        # The next step of the docs: point SWEEPERD_CONFIG at a TOML file.
        env = machine.root / "etc/sweeperd/sweeperd.env"
        text, n = re.subn(r"^#(SWEEPERD_CONFIG=/etc/sweeperd/sweeperd.toml)$", r"\1",
                          env.read_text(), flags=re.M)  # fmt: skip
        assert n == 1
        env.write_text(text)
        write_config(machine, max_stalled=1)
        say(
            "sweeperd.env: SWEEPERD_CONFIG=/etc/sweeperd/sweeperd.toml uncommented",
            *(machine.root / CONFIG.lstrip("/")).read_text().splitlines(),
        )


def write_config(machine: Machine, max_stalled: int) -> None:
    machine.write(CONFIG, SETTINGS.format(max_stalled=max_stalled))


def stated_defaults() -> dict[str, str]:
    """The defaults systemd/sweeperd.env.example states, by setting: a commented line shows an
    option's default where it has one (an example where it has none). The log format and the
    metrics address are left out: the started line shows the format auto resolved, and the
    address as host and port."""
    by_env = {o.env_name: o for o in OPTIONS.values()}
    defaults = {}
    for line in (REPO / "systemd/sweeperd.env.example").read_text().splitlines():
        shown = re.match(r"#(SWEEPERD_\w+)=(.*)$", line)
        option = by_env.get(shown.group(1)) if shown else None
        if shown is None or option is None or option.key in ("log_format", "metrics_addr"):
            continue
        if option.default is not None and shown.group(2) == option.default_text:
            defaults[option.key] = shown.group(2)
    return defaults


class TestStart:
    def test_start_waits_for_redis_then_is_ready(
        self, machine: Machine, keyspace: redis.Redis
    ) -> None:
        """`systemctl enable --now` while Redis is stopped: activating, STATUS= says what it
        waits for; Redis started, READY=1 and active, and the leases seeded before Redis
        restarted come back uncounted (a counted one dies, max_stalled 1)."""
        heading("start while Redis is stopped")
        machine.run("systemctl", "start", REDIS_UNIT)
        earlier = run_id(keyspace).decode()
        for n in range(3):
            lease(keyspace, QUEUE, f"exempt-{n}".encode(), attempts="1", state="active",
                  lease_epoch=earlier)  # fmt: skip
        lease(keyspace, QUEUE, b"counted", attempts="1", state="active")
        future = now_ms() + FUTURE_OFFSET_MS
        lease(keyspace, QUEUE, b"future", deadline_ms=future, attempts="1", state="active",
              lease_epoch=earlier)  # fmt: skip
        say(f"seeded {QUEUE.active}: exempt-0..2 (lease_epoch {earlier[:12]}…), counted, future")
        at = journal(machine).position()
        machine.run("systemctl", "stop", REDIS_UNIT)
        saved = journal(machine).wait_for(
            lambda e: e.unit == REDIS_UNIT and "DB saved on disk" in e.message, at, WAIT_S,
            "Redis saving its dataset",
        )  # fmt: skip
        say("systemctl stop emq-redis: " + saved.message)

        at = journal(machine).position()
        enabling = machine.start(*START.split())
        say(f"$ {START}   (waits for READY=1)")
        journal(machine).wait_for(daemon_logged("redis_down"), at, WAIT_S, "redis_down")
        journal(machine).wait_for(  # the node named with its error: waiting for N (…) to answer
            systemd_said("(STATUS=waiting for 127.0.0.1:6379 ("), at, WAIT_S, "STATUS="
        )
        waiting = shown(machine, "ActiveState", "SubState", "StatusText")
        status = waiting.pop("StatusText")
        assert waiting == {"ActiveState": "activating", "SubState": "start"}
        assert status.startswith("waiting for 127.0.0.1:6379 (") and status.endswith(
            ") to answer"
        ), status
        assert enabling.poll() is None, "systemctl enable --now returned before READY=1"
        words(journal(machine).since(at))

        at = journal(machine).position()
        machine.run("systemctl", "start", REDIS_UNIT)
        say("$ systemctl start emq-redis")
        out, _ = enabling.communicate(timeout=WAIT_S)
        assert enabling.returncode == 0, out
        pid = main_pid(machine)
        ready = journal(machine).wait_for(
            systemd_said("(READY=1)", pid), at, WAIT_S, "READY=1 received"
        )
        started = journal(machine).wait_for(
            systemd_said("Started sweeperd.service"), at, WAIT_S, "Started"
        )
        assert ready.index < started.index
        running = shown(machine, "ActiveState", "SubState", "StatusText", "TimeoutStartUSec")
        assert running == {
            "ActiveState": "active",
            "SubState": "running",
            "StatusText": "sweeping 2 queues on 127.0.0.1:6379",
            "TimeoutStartUSec": "5min",
        }
        swept = journal(machine).wait_for(
            daemon_logged("sweep", queue="orders"), at, WAIT_S, "the sweep of orders"
        )
        words(journal(machine).since(at)[: max(swept.index, started.index) - at + 1])
        assert run_id(keyspace).decode() != earlier
        assert [members(keyspace, k) for k in (QUEUE.pending, QUEUE.dead, QUEUE.active)] == [
            [b"exempt-0", b"exempt-1", b"exempt-2"], [b"counted"], [b"future"],
        ]  # fmt: skip
        for n in range(3):
            assert hash_of(keyspace, QUEUE.job(f"exempt-{n}")) == {
                b"attempts": b"1", b"state": b"pending", b"lease_epoch": earlier.encode(),
            }  # fmt: skip
        assert hash_of(keyspace, QUEUE.job("counted")) == {
            b"attempts": b"1", b"state": b"dead", b"stalled": b"1", b"last_error": b"stalled",
        }  # fmt: skip
        assert keyspace.hget(QUEUE.metrics_failed, "count") == b"1"
        say("keyspace: exempt-0..2 pending, no stall counted; counted dead; future active")


class TestCredential:
    def test_the_password_reaches_the_daemon_only_as_a_credential(
        self, machine: Machine, password: str, keyspace: redis.Redis
    ) -> None:
        """Redis wants the password; the daemon, which answers, has it only through
        LoadCredential=: not in any property of the unit, its environment, its command line
        nor anything the journal holds, and it cannot read /etc/sweeperd/redis-password."""
        heading("the credential")
        refused = machine.run("redis-cli", "-h", "127.0.0.1", "ping", check=False).stdout
        assert refused.startswith("NOAUTH"), refused
        say(f"redis-cli ping without the password: {refused.strip()}")
        properties = machine.run("systemctl", "show", UNIT).stdout
        assert password not in properties
        [environment] = [p for p in properties.splitlines() if p.startswith("Environment=")]
        assert environment == (
            "Environment=SWEEPERD_REDIS_PASSWORD_FILE=/run/credentials/sweeperd.service/redis-password"
        )
        say("systemctl show: " + environment, "  (no property of the unit holds the password)")
        pid = main_pid(machine)
        cmdline = machine.run("cat", f"/proc/{pid}/cmdline").stdout.replace("\0", " ").strip()
        assert password not in cmdline
        say(f"/proc/{pid}/cmdline: {cmdline}")
        environ = machine.run("cat", f"/proc/{pid}/environ").stdout.split("\0")
        assert not [v for v in environ if password in v]
        assert "CREDENTIALS_DIRECTORY=/run/credentials/sweeperd.service" in environ
        say(f"/proc/{pid}/environ: " + " ".join(v for v in environ if "CREDENTIAL" in v or
                                                 "PASSWORD" in v))  # fmt: skip
        everything = machine.run("journalctl", "--boot", "--output=json", "--lines=all").stdout
        assert everything.count("\n") > 100 and password not in everything
        say(f"journalctl --boot -o json: {everything.count(chr(10))} entries, none with it")
        uid = status_of(machine, pid)["Uid"].split()[0]
        file = machine.run(
            "stat", "-c", "%a %u", "/run/credentials/sweeperd.service/redis-password"
        )
        assert file.stdout.split() == ["400", uid]
        assert 61184 <= int(uid) <= 65519  # systemd's range for DynamicUser=
        denied = machine.run("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                             "cat", "/etc/sweeperd/redis-password", check=False)  # fmt: skip
        assert denied.returncode == 1 and "Permission denied" in denied.stderr
        say(
            f"the daemon runs as uid {uid} (DynamicUser=); the credential is 0400 and its own;",
            f"uid {uid} reading /etc/sweeperd/redis-password: {denied.stderr.strip()}",
        )


def status_of(machine: Machine, pid: int) -> dict[str, str]:
    lines = machine.run("cat", f"/proc/{pid}/status").stdout.splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


class TestSandboxing:
    def test_every_hardening_line_holds_in_the_running_daemon(self, machine: Machine) -> None:
        """The sandboxing the unit asks for is what the daemon runs in: no privilege nor
        capability, the system-call filter, a read-only root, private /tmp and /dev, /home
        gone, other processes invisible."""
        heading("sandboxing in effect (nothing lifted)")
        pid = main_pid(machine)
        status = status_of(machine, pid)
        seen = {k: status[k] for k in ("NoNewPrivs", "Seccomp", "CapEff", "CapPrm", "CapBnd")}
        assert seen == {
            "NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000",
            "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
        }  # fmt: skip
        say(f"/proc/{pid}/status: " + " ".join(f"{k}:{v}" for k, v in seen.items()))
        mounts = {m[4]: m for m in (line.split() for line in machine.run(
            "cat", f"/proc/{pid}/mountinfo").stdout.splitlines())}  # fmt: skip
        options = {
            point: set(m[5].split(",")) | set(m[-1].split(",")) for point, m in mounts.items()
        }
        assert "ro" in options["/"]
        for private in ("/tmp", "/var/tmp", "/dev"):
            assert private in mounts, private
        assert "hidepid=invisible" in options["/proc"]
        assert "ro" in options["/proc/sys"] and "ro" in options["/sys/fs/cgroup"]
        assert "/home" in mounts and "/root" in mounts  # ProtectHome: made inaccessible
        say(
            "its mounts: / ro; /tmp, /var/tmp, /dev its own; /proc hidepid=invisible;",
            "/proc/sys, /sys/fs/cgroup ro; /home, /root over-mounted",
        )
        uid = status["Uid"].split()[0]
        visible = machine.run("nsenter", f"--target={pid}", "--mount", "--", "setpriv",
                              f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "ls",
                              "/proc").stdout.split()  # fmt: skip
        assert str(pid) in visible and "1" not in visible  # another user's: invisible
        say(f"its /proc, as uid {uid}: its own PID {pid}, no PID 1 (ProtectProc=invisible)")


class TestWatchdog:
    def test_a_stopped_daemon_is_killed_by_the_watchdog_and_restarted(
        self, machine: Machine, keyspace: redis.Redis
    ) -> None:
        """SIGSTOP: no WATCHDOG=1 for 30 s, systemd kills it (SIGABRT), Restart=on-failure
        starts it again 5 s later, NRestarts counts it, and the new process sweeps."""
        heading("the watchdog")
        before = shown(machine, "NRestarts", "MainPID", "WatchdogUSec")
        assert before["WatchdogUSec"] == "30s"
        old = int(before["MainPID"])
        at = journal(machine).position()
        machine.run("systemctl", "kill", "--signal=SIGSTOP", "--kill-who=main", UNIT)
        say("$ systemctl kill --signal=SIGSTOP --kill-who=main sweeperd")
        fired = journal(machine).wait_for(
            systemd_said("Watchdog timeout (limit 30s)!"), at, 45, "the watchdog firing"
        )
        # The watchdog counts from the last WATCHDOG=1, or from READY=1 when that came later.
        pets = (systemd_said("(WATCHDOG=1)", old), systemd_said("(READY=1)", old))
        petted = [e for e in journal(machine).since(0, UNIT)[: fired.index]
                  if any(pet(e) for pet in pets)]  # fmt: skip
        quiet_s = (fired.realtime_us - petted[-1].realtime_us) / 1e6
        assert 29.9 <= quiet_s <= 35.0, quiet_s
        journal(machine).wait_for(
            systemd_said(f"restart counter is at {int(before['NRestarts']) + 1}."), at, 30,
            "the restart",
        )  # fmt: skip
        started = journal(machine).wait_for(
            systemd_said("Started sweeperd.service"), fired.index, WAIT_S, "Started again"
        )
        words(journal(machine).since(at)[: started.index - at + 1])
        last = petted[-1].message.split("(")[1].rstrip(")")
        say(f"the timeout came {quiet_s:.2f}s after the last {last}")
        after = shown(machine, "NRestarts", "MainPID", "ActiveState", "Result")
        assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
        assert int(after["MainPID"]) != old and after["ActiveState"] == "active"
        lease(keyspace, QUEUE, b"after-watchdog", attempts="1", state="active")
        wait_until(lambda: keyspace.zscore(QUEUE.dead, b"after-watchdog") is not None,
                   what="the restarted daemon sweeping", timeout_s=WAIT_S)  # fmt: skip
        say("the restarted daemon swept: after-watchdog dead (max_stalled 1)")


class TestReload:
    def test_reload_applies_a_new_file_and_keeps_it_through_a_broken_one(
        self, machine: Machine, keyspace: redis.Redis
    ) -> None:
        """`systemctl reload`: systemd receives RELOADING=1 then READY=1, the unit passes
        through `reloading` and is active again, the same process; max_stalled 3 is what
        sweeps then; a broken file is logged, and 3 still sweeps."""
        pid = main_pid(machine)
        restarts = machine.show(UNIT, "NRestarts")["NRestarts"]
        heading("reload: max_stalled 1 -> 3")
        write_config(machine, max_stalled=3)
        reloaded = reload(machine, pid)
        assert reloaded.get("max_stalled") == 3
        recovered_with(keyspace, b"reloaded-1")

        heading("reload: a broken file")
        machine.write(CONFIG, "max_stalled = [\n")
        failed = reload(machine, pid, event="reload_failed")
        assert CONFIG in str(failed["error"])
        recovered_with(keyspace, b"reloaded-2")
        after = shown(machine, "ActiveState", "MainPID", "NRestarts")
        assert after == {"ActiveState": "active", "MainPID": str(pid), "NRestarts": restarts}
        write_config(machine, max_stalled=3)


def reload(machine: Machine, pid: int, event: str = "reloaded") -> dict[str, Any]:
    """systemctl reload, and what systemd and the daemon said of it; the daemon's line."""
    at = journal(machine).position()
    began = time.monotonic()
    reloaded = machine.run("systemctl", "reload", UNIT, check=False)
    if reloaded.returncode != 0:
        words(journal(machine).since(at))
    assert reloaded.returncode == 0, reloaded.stderr
    say(f"$ systemctl reload sweeperd   (returned 0 in {time.monotonic() - began:.2f}s)")
    logged = journal(machine).wait_for(daemon_logged(event), at, WAIT_S, event)
    reloading = journal(machine).wait_for(
        systemd_said("(RELOADING=1, MONOTONIC_USEC=", pid), at, WAIT_S, "RELOADING=1"
    )
    ready = journal(machine).wait_for(
        systemd_said("(READY=1)", pid), reloading.index, WAIT_S, "READY=1 after RELOADING=1"
    )
    back = journal(machine).wait_for(
        systemd_said("Changed reload -> running"), ready.index, WAIT_S, "reload -> running"
    )
    job = journal(machine).wait_for(
        systemd_said("Reloaded sweeperd.service"), at, WAIT_S, "the reload job's end"
    )
    entries = journal(machine).since(at)[: max(back.index, logged.index, job.index) - at + 1]
    words(entries)
    into = [e for e in entries if systemd_said("Changed running -> reload")(e)]
    assert into and into[0].index < reloading.index
    # MONOTONIC_USEC is on the clock systemd reads (what 253's Type=notify-reload compares):
    # after this daemon started, before PID 1's line about it reached the journal.
    stamp = int(reloading.message.split("MONOTONIC_USEC=")[1].rstrip(")"))
    start = [e for e in journal(machine).since(0, UNIT)[: reloading.index]
             if daemon_logged("started")(e)][-1]  # fmt: skip
    assert start.monotonic_us < stamp <= reloading.monotonic_us
    # 252 keeps the job running for READY=1 only when RELOADING=1 came before the control
    # process (the shell's kill) exited; when later, the unit passes through `reloading` anew.
    say(
        "the reload job ended "
        + ("after READY=1: systemctl reload returned with the file in effect"
           if job.index > ready.index else "before READY=1 (RELOADING=1 came after kill exited)")
    )  # fmt: skip
    assert machine.show(UNIT, "ActiveState")["ActiveState"] == "active"
    parsed = logged.event()
    assert parsed is not None
    return parsed


def recovered_with(keyspace: redis.Redis, job: bytes) -> None:
    """A lease at its second stall goes back to pending (stalled 2): max_stalled is 3."""
    lease(keyspace, QUEUE, job, attempts="1", state="active", stalled="1")
    wait_until(lambda: keyspace.hget(QUEUE.job(job), "state") == b"pending",
               what=f"{job!r} recovered", timeout_s=WAIT_S)  # fmt: skip
    assert hash_of(keyspace, QUEUE.job(job))[b"stalled"] == b"2"
    say(f"{job.decode()} (stalled 1) swept: pending, stalled 2 — max_stalled 3 in effect")


# KEYS[1] the active set; ARGV: first and last number, the deadline, the row prefix, the epoch.
SEED = """
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local id = 'bulk-' .. i
  redis.call('ZADD', KEYS[1], ARGV[3], id)
  redis.call('HSET', ARGV[4] .. id, 'state', 'active', 'attempts', '1', 'lease_epoch', ARGV[5])
end
"""
SEED_CHUNK = 5_000


class TestStop:
    def test_stop_mid_drain_exits_0_in_time_and_the_keyspace_is_exact(
        self, machine: Machine, keyspace: redis.Redis
    ) -> None:
        """50,000 expired leases being drained: `systemctl stop` goes deactivating then
        inactive within TimeoutStopSec, the daemon exits 0, and every lease is either still
        active, untouched, or pending with its stall counted: no call cut halfway."""
        heading(f"stop while {BULK:,} leases are being drained")
        failed_before = keyspace.hget(QUEUE.metrics_failed, "count")
        pid = main_pid(machine)
        at = journal(machine).position()
        epoch = run_id(keyspace).decode()
        for first in range(1, BULK, SEED_CHUNK):  # a script at a time: the server stays quick
            keyspace.eval(SEED, 1, QUEUE.active, first, first + SEED_CHUNK - 1, 1000,
                          QUEUE.job("").decode(), epoch)  # fmt: skip
        journal(machine).wait_for(daemon_logged("drain_started", queue="orders"), at, WAIT_S,
                                  "the drain of orders")  # fmt: skip
        began = time.monotonic()
        machine.run("systemctl", "stop", UNIT)
        took_s = time.monotonic() - began
        say(f"$ systemctl stop sweeperd   (returned 0 in {took_s:.2f}s)")
        stopped = journal(machine).wait_for(
            systemd_said("Stopped sweeperd.service"), at, WAIT_S, "Stopped"
        )
        entries = journal(machine).since(at)[: stopped.index - at + 1]
        words(entries)
        sequence = [e.message.split("Changed ")[1] for e in entries
                    if systemd_said("Changed ")(e)]  # fmt: skip
        assert sequence == ["running -> stop-sigterm", "stop-sigterm -> dead"], sequence
        say("running -> stop-sigterm -> dead: ActiveState deactivating, then inactive")
        assert any(systemd_said("(STOPPING=1)", pid)(e) for e in entries)
        stopping = next(e for e in entries if systemd_said("Stopping sweeperd.service")(e))
        within_s = (stopped.realtime_us - stopping.realtime_us) / 1e6
        assert within_s < 15 and took_s < 15
        values = shown(machine, "ActiveState", "Result", "ExecMainCode", "ExecMainStatus",
                       "TimeoutStopUSec")  # fmt: skip
        assert values == {"ActiveState": "inactive", "Result": "success", "ExecMainCode": "1",
                          "ExecMainStatus": "0", "TimeoutStopUSec": "15s"}  # fmt: skip
        assert [daemon_logged("stopped")(e) for e in entries].count(True) == 1
        say(f"stopped {within_s:.2f}s after 'Stopping' (TimeoutStopSec=15); exit status 0")
        active, pending = exact_bulk(keyspace)
        assert active and pending, "the drain was over before the stop: nothing was in flight"
        assert keyspace.hget(QUEUE.metrics_failed, "count") == failed_before
        say(
            f"keyspace: {pending:,} bulk leases pending (stalled 1), {active:,} still active"
            f" and untouched, none dead or lost: {active + pending:,} = {BULK:,}"
        )


def exact_bulk(keyspace: redis.Redis) -> tuple[int, int]:
    """Each bulk lease is active with its row as seeded, or pending with stalled 1: counted."""
    active = {m for m in members(keyspace, QUEUE.active) if m.startswith(b"bulk-")}
    pending = {m for m in members(keyspace, QUEUE.pending) if m.startswith(b"bulk-")}
    assert not active & pending
    assert active | pending == {f"bulk-{i}".encode() for i in range(1, BULK + 1)}
    pipe = keyspace.pipeline(transaction=False)
    ids = sorted(active | pending)
    for job in ids:
        pipe.hmget(QUEUE.job(job), "state", "stalled")
    for job, (state, stalled) in zip(ids, pipe.execute(), strict=True):
        assert (state, stalled) == ((b"active", None) if job in active else (b"pending", b"1"))
    assert not [m for m in members(keyspace, QUEUE.dead) if m.startswith(b"bulk-")]
    return len(active), len(pending)


# Fields the journal lines carry, each named in docs/operations.md's Events paragraph between
# the parentheses after its event.
DOCUMENTED_FIELDS = {
    "sweep": ("queue",),
    "sweep_failed": ("queue", "reason"),
    "drain_progress": ("queue", "done", "left", "rate", "eta_s", "elapsed_s"),
    "queues_moved": ("gained", "lost", "owned"),
    "members_changed": ("member", "members", "joined", "left", "joined_ids", "left_ids"),
}
SEEN = {"started", "redis_down", "redis_up", "executor_chosen", "ready", "sweep", "reloaded",
        "reload_failed", "drain_started", "stopping", "stopped", "members_changed",
        "queues_moved"}  # fmt: skip


class TestJournal:
    def test_the_daemon_wrote_json_lines_with_the_documented_fields(self, machine: Machine) -> None:
        """Off a terminal (the journal's stream), every line of the daemon is a JSON object
        with event, level, logger and timestamp; each event is one the docs name, with the
        fields they name."""
        heading("the journal")
        lines = [e for e in journal(machine).since(0, UNIT) if e.ident == "sweeperd"]
        events = [e.event() for e in lines]
        assert None not in events, [e.message for e, p in zip(lines, events, strict=True) if not p]
        parsed = [e for e in events if e is not None]
        for line in parsed:
            assert {"event", "level", "logger", "timestamp"} <= line.keys(), line
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", line["timestamp"])
        names = {line["event"] for line in parsed}
        assert names <= documented(), names - documented()
        assert names >= SEEN, SEEN - names
        paragraph = OPERATIONS.read_text().split("Events: ", 1)[1].split("\n\n", 1)[0]
        for event, fields in DOCUMENTED_FIELDS.items():
            said = re.search(rf"`{event}` \(([^)]*)\)", paragraph)
            assert said is not None and all(f in said.group(1) for f in fields), event
            for line in (p for p in parsed if p["event"] == event):
                assert set(fields) <= line.keys(), line
        started = next(p for p in parsed if p["event"] == "started")
        assert started["version"] == VERSION and started["redis_password"] == "<set>"
        set_in_toml = tomllib.loads(SETTINGS.format(max_stalled=1)).keys()
        for name, default in stated_defaults().items():
            if name in set_in_toml:
                continue
            assert str(started[name]) in {default, f"{default}.0"}, (name, started[name])
        say("the started line's settings are the defaults sweeperd.env.example states")
        say(f"{len(parsed)} JSON lines, events: {', '.join(sorted(names))}")
        for event in ("started", "sweep", "reload_failed", "stopped"):
            say(next(e.shown() for e in lines if daemon_logged(event)(e))[:220])


class TestSecurity:
    def test_exposure_is_at_most_the_documented_figure(self, machine: Machine) -> None:
        """`systemd-analyze security sweeperd.service` on the booted machine: its overall
        exposure is at most what docs/operations.md states."""
        heading("systemd-analyze security sweeperd.service")
        out = machine.run("systemd-analyze", "security", "--no-pager", UNIT).stdout
        for line in out.splitlines():
            if line.startswith(("✗", "→")):
                say(line.rstrip()[:150])
        measured = re.search(r"Overall exposure level for sweeperd.service: (\d+\.\d+) (\w+)", out)
        stated = re.search(r"rates the unit \*\*(\d+\.\d+) OK\*\*", OPERATIONS.read_text())
        assert measured is not None and stated is not None
        assert float(measured.group(1)) <= float(stated.group(1)), measured.group(0)
        say(f"measured {measured.group(1)} {measured.group(2)}; the docs state {stated.group(1)}")
