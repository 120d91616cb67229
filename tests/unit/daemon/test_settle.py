"""The daemon's objects settled once every queue was swept: the garbage of the moment collected,
what is left frozen out of the full collections to come, and the job that does it scheduled
two of the longest intervals after the jobs are added (at the start and after each SIGHUP); the
memory freed given back to the system every few seconds."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis
from apscheduler.triggers.date import DateTrigger

from sweeperd.daemon.settle import (
    MALLOC_TRIM,
    RELEASE_S,
    SETTLE_INTERVALS,
    YOUNG_THRESHOLD,
    release,
    settle,
)
from tests.support.clock import Clock
from tests.support.daemon_inprocess import in_process, settings_for, stopped
from tests.support.servers import RedisServer


class Loop:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's objects back in the collections afterwards."""
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_garbage_is_collected_and_the_rest_frozen() -> None:
    """A cycle nothing refers to is collected, not frozen (frozen, it would never be freed); an
    object still referred to is no longer among those the collections scan."""
    lost = Loop()
    gone = weakref.ref(lost)
    del lost
    kept = Loop()
    settle()
    assert gone() is None
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())


@pytest.mark.parametrize("longest", ["5", "60"])
def test_the_settling_is_scheduled_after_two_of_the_longest_intervals(
    r: redis.Redis, redis_server: RedisServer, longest: str
) -> None:
    """Once every queue has been swept twice: its calls, series and routes are made by then."""
    daemon = in_process(
        settings_for(redis_server.url, interval=longest), lambda: daemon.settings, Clock(0.0)
    )
    try:
        before = datetime.now(UTC)
        daemon.add_jobs()
        job = daemon.scheduler.get_job("settle")
        assert job is not None and job.func is settle and isinstance(job.trigger, DateTrigger)
        due_s = (job.trigger.run_date - before).total_seconds()
        assert SETTLE_INTERVALS * float(longest) <= due_s < SETTLE_INTERVALS * float(longest) + 5
    finally:
        stopped(daemon)


# Run in a process of its own: a heap that other tests used has holes the blocks would fill.
HOLES = """
import pathlib
from sweeperd.daemon.settle import release
def rss_mib():
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
kept, freed = [], []
for _ in range(512):
    freed.append(bytearray(64 * 1024))
    kept.append(bytearray(1024))  # from malloc too (pymalloc keeps blocks up to 512 B)
before = rss_mib()
freed.clear()
held = rss_mib()
release()
print(before, held, rss_mib(), len(kept))
"""


@pytest.mark.skipif(MALLOC_TRIM is None, reason="no malloc_trim in this C library")
def test_the_memory_freed_is_given_back() -> None:
    """Blocks freed between blocks kept stay with glibc (no free() can give back a hole below
    the top of the heap) until release() trims them: 32 MiB of 64 KiB holes given back."""
    said = subprocess.run(
        [sys.executable, "-c", HOLES], capture_output=True, text=True, check=True
    ).stdout
    before, held, after, kept = (float(n) for n in said.split())
    assert held > before - 8, "glibc gave the holes back by itself"
    assert after < held - 16
    assert kept == 512


def test_the_release_runs_every_few_seconds(r: redis.Redis, redis_server: RedisServer) -> None:
    """The release is one of the daemon's jobs, every RELEASE_S."""
    daemon = in_process(settings_for(redis_server.url), lambda: daemon.settings, Clock(0.0))
    try:
        daemon.add_jobs()
        job = daemon.scheduler.get_job("release")
        assert job is not None and job.func is release
        assert job.trigger.interval.total_seconds() == RELEASE_S
    finally:
        stopped(daemon)


def test_the_young_generation_is_collected_less_often() -> None:
    """The young threshold is raised, the older generations' stay CPython's (tried in a process
    of its own: the test's collector is left as it is)."""
    said = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gc; from sweeperd.daemon.settle import tune_collector; "
            "before = gc.get_threshold(); tune_collector(); print(*gc.get_threshold(), *before)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    young, middle, old, _, middle_before, old_before = map(int, said.stdout.split())
    assert (young, middle, old) == (YOUNG_THRESHOLD, middle_before, old_before)
