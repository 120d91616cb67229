"""Queues on their intervals: batches that fall due together, each one APScheduler job."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from itertools import groupby
from math import floor

from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_SUBMITTED,
    JobSubmissionEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector

from sweeperd.config.settings import QueueSettings
from sweeperd.metrics.families import described

# A batch is BATCH_SIZE queues, swept in one pipelined round trip by the job JOB_PREFIX + its
# number; sweep_once's one-off jobs are named from TAKEOVER. An interval has at most MAX_BATCHES
# batches, larger ones above BATCH_SIZE * MAX_BATCHES queues: APScheduler's cost is per job (500
# jobs a minute were half a point of a core at 100,000 queues swept every minute).
BATCH_SIZE = 200
MAX_BATCHES = 100
JOB_PREFIX = "sweep:"
TAKEOVER = "takeover"
# How late a sweep started against its schedule.
LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# The batches run on the executor SWEEPS, a RunOnce pool; a run ON_THE_POINT_S or less before a
# grid point is at it.
SWEEPS = "sweeps"
ON_THE_POINT_S = 0.001

Batch = list[QueueSettings]


class RunOnce(ThreadPoolExecutor):  # type: ignore[misc]
    """A pool that runs a job once for all the run times it is handed: APScheduler's coalesce,
    done here, so that the submission event still lists every run time missed (coalesce=True
    would list only the last) and the missed runs can be counted."""

    def submit_job(self, job: Job, run_times: list[datetime]) -> None:
        super().submit_job(job, run_times[-1:])


def plan_batches(queues: Sequence[QueueSettings], size: int | None = None) -> dict[str, Batch]:
    """Group the queues by interval and cut them into batches (those of one interval fall due
    together) of `size` queues; by default BATCH_SIZE, or as many as MAX_BATCHES batches take."""
    by_interval = sorted(queues, key=lambda q: (q.interval, q.name))
    batches: dict[str, Batch] = {}
    for interval, group in groupby(by_interval, key=lambda q: q.interval):
        members = list(group)
        cut = size or max(BATCH_SIZE, -(-len(members) // MAX_BATCHES))
        for n in range(0, len(members), cut):
            batches[f"{JOB_PREFIX}{interval:g}s:{n // cut}"] = members[n : n + cut]
    return batches


def phases(batches: dict[str, Batch]) -> dict[str, float]:
    """Return where in its interval each batch runs, as a share of it: an interval's batches spread
    evenly over it, so that their sweeps come as a steady stream, not as one burst an interval (a
    burst of thousands of calls holds back every wake at a deadline that falls in it)."""
    counts: dict[float, int] = {}
    for batch in batches.values():
        counts[batch[0].interval] = counts.get(batch[0].interval, 0) + 1
    seen: dict[float, int] = {}
    spread = {}
    for job_id, batch in batches.items():
        interval = batch[0].interval
        n = seen[interval] = seen.get(interval, -1) + 1
        spread[job_id] = n / counts[interval]
    return spread


class OnGrid(IntervalTrigger):  # type: ignore[misc]
    """An interval trigger whose runs stay on their grid (start_date + k intervals), each one
    moved later by up to the jitter: a run off the grid (the first, at once; a restart's) or a
    jittered one does not shift the runs after it, so batches spread over an interval stay so."""

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        if previous_fire_time is None:
            first: datetime | None = super().get_next_fire_time(None, now)
            return first
        start, step = self.start_date.timestamp(), self.interval_length
        # A run at a grid point, read back to the microsecond, may fall just short of it: it
        # counts as at the point, so the next is always later (APScheduler lists a job's run
        # times up to now by asking again from the last one, and the same time never ends it).
        previous = previous_fire_time.timestamp() + ON_THE_POINT_S
        after = start + step * (floor((previous - start) / step) + 1)
        moved = random.uniform(0, self.jitter) if self.jitter else 0.0
        return datetime.fromtimestamp(after + moved, tz=self.timezone)


def utc_now() -> datetime:
    return datetime.now(UTC)


class Schedule:
    """Keeps one interval job per batch in step with the queue list; never two runs at once.
    Its clock (`clock`, UTC) is what it measures lag against and schedules from."""

    def __init__(
        self,
        scheduler: BaseScheduler,
        sweep: Callable[[Batch], None],
        *,
        workers: int,
        jitter: float,
        on_overrun: Callable[[], None],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._scheduler = scheduler
        self._sweep = sweep
        self._jitter = jitter
        self._on_overrun = on_overrun
        self._clock = clock
        self._batches: dict[str, Batch] = {}
        self._names: frozenset[str] = frozenset()
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._lag = Histogram(
            *described("sweeperd_schedule_lag_seconds"), buckets=LAG_BUCKETS_S, registry=None
        )
        self._missed = Counter(*described("sweeperd_schedule_missed_runs"), registry=None)
        self._overruns = Counter(*described("sweeperd_schedule_overruns"), registry=None)
        scheduler.add_executor(RunOnce(workers), SWEEPS)
        scheduler.add_listener(self.submitted, EVENT_JOB_SUBMITTED)
        # A batch still sweeping when it falls due again is skipped, not queued behind itself.
        scheduler.add_listener(self.overran, EVENT_JOB_MAX_INSTANCES)

    @property
    def series(self) -> tuple[Collector, ...]:
        """What the schedule counts, for the registry: its lag, missed runs and overruns."""
        return self._lag, self._missed, self._overruns

    def submitted(self, event: JobSubmissionEvent) -> None:
        """Count the run times a batch submitted for them all missed (the scheduler did not run
        in time: the process was stopped, the VM paused): the runs before the last are counted
        missed, and the lag is the first's."""
        times = event.scheduled_run_times
        if event.job_id.startswith(JOB_PREFIX) and times:
            self._lag.observe(max(0.0, (self._clock() - times[0]).total_seconds()))
            if len(times) > 1:
                self._missed.inc(len(times) - 1)

    def overran(self, event: JobSubmissionEvent) -> None:
        """Count a batch skipped because it was still sweeping when it fell due again (no other
        job counts), and, as `submitted` does, the run times before the last missed: a process
        stopped in the middle of a sweep finds that sweep still running when it goes on."""
        times = event.scheduled_run_times
        if event.job_id.startswith(JOB_PREFIX):
            self._overruns.inc()
            if len(times) > 1:
                self._missed.inc(len(times) - 1)
            self._on_overrun()

    def retune(self, jitter: float) -> None:
        """Apply SIGHUP's spread: the batches added from now on move by up to this fraction."""
        self._jitter = jitter

    def sync(self, queues: Sequence[QueueSettings], names: frozenset[str] | None = None) -> None:
        """Add the batches that are new, drop the vanished, let the rest keep their timers.
        `names`, the queues' names, is kept as queue_names() when given (one set, not two)."""
        planned = plan_batches(queues)
        spread = phases(planned)
        with self._lock:
            for job_id in self._batches.keys() - planned.keys():
                self._scheduler.remove_job(job_id)
            for job_id, batch in planned.items():
                if job_id not in self._batches:
                    self._add(job_id, batch[0].interval, spread[job_id])
            self._batches = planned
            self._names = (
                names
                if names is not None
                else frozenset(q.name for batch in planned.values() for q in batch)
            )

    def _add(self, job_id: str, interval: float, phase: float) -> None:
        """Add the batch's job: its first run at once, the next ones `phase` of an interval on."""
        now = self._clock()
        self._scheduler.add_job(
            self._run,
            OnGrid(
                seconds=interval,
                start_date=now + timedelta(seconds=phase * interval),
                jitter=self._jitter * interval or None,
            ),
            args=[job_id],
            id=job_id,
            name=job_id,
            # Never two sweeps of one queue at once; missed runs collapse into one in RunOnce,
            # listed in its event; a late run still runs.
            max_instances=1,
            coalesce=False,
            misfire_grace_time=None,
            executor=SWEEPS,
            next_run_time=now,
        )

    def _run(self, job_id: str) -> None:
        with self._lock:
            batch = self._batches.get(job_id)
            if not batch:
                return
            self._running.add(job_id)
        try:
            self._sweep(batch)
        finally:
            with self._lock:
                self._running.discard(job_id)

    def reset(self) -> None:
        """Forget every batch (their jobs were removed from the scheduler)."""
        with self._lock:
            self._batches, self._names = {}, frozenset()

    def sweep_now(self) -> None:
        """Run every batch not sweeping right now at once (after a server restart)."""
        now = self._clock()
        with self._lock:
            for job_id in self._batches.keys() - self._running:
                self._scheduler.modify_job(job_id, next_run_time=now)

    def sweep_soon(self, delay_s: float) -> None:
        """Run every batch again in `delay_s` (one sweeping now is done by then, or skipped)."""
        at = self._clock() + timedelta(seconds=delay_s)
        with self._lock:
            for job_id in self._batches:
                self._scheduler.modify_job(job_id, next_run_time=at)

    def sweep_once(self, queues: Sequence[QueueSettings]) -> None:
        """Sweep every queue once now, in batches, beside their timers (a takeover: queues
        that changed hands may have landed on later timers; this bounds each one's wait). A
        batch still runs however long it waited for the pool: a takeover of 33,000 queues is
        167 batches queued behind each other, and APScheduler's default drops a run that starts
        over a second late (the queues then waited for their grid turn, an interval)."""
        for batch in plan_batches(queues, BATCH_SIZE).values():
            self._scheduler.add_job(
                self._sweep,
                args=[batch],
                name=TAKEOVER,
                executor=SWEEPS,
                misfire_grace_time=None,
            )

    def batches(self) -> dict[str, Batch]:
        """The batches as planned now, by job id."""
        with self._lock:
            return dict(self._batches)

    def queue_names(self) -> frozenset[str]:
        """The queues planned now: the same set until the plan changes (readiness, read twice a
        second, routes it once per plan and layout)."""
        return self._names

    def shortest_interval(self) -> float | None:
        return min(self._intervals(), default=None)

    def longest_interval(self) -> float | None:
        return max(self._intervals(), default=None)

    def _intervals(self) -> list[float]:
        with self._lock:
            return [b[0].interval for b in self._batches.values()]
