"""The daemon's objects settled once every queue was swept: the garbage of the moment collected,
what is left frozen out of the full collections to come, and the job that does it scheduled
two of the longest intervals after the jobs are added (at the start and after each SIGHUP)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis
from apscheduler.triggers.date import DateTrigger

from sweeperd.daemon.settle import SETTLE_INTERVALS, settle
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
