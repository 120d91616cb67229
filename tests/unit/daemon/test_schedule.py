"""Batches and their APScheduler jobs: grouping by interval, sync, sweep_now, takeovers, overruns
and missed runs, with the schedule's clock passed in."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_SUBMITTED, JobSubmissionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from sweeperd.config.settings import QueueSettings
from sweeperd.daemon.schedule import (
    BATCH_SIZE,
    MAX_BATCHES,
    SWEEPS,
    TAKEOVER,
    Batch,
    OnGrid,
    RunOnce,
    Schedule,
    phases,
    plan_batches,
    utc_now,
)


def queue(name: str, interval: float = 1.0) -> QueueSettings:
    return QueueSettings(name, interval, 1, 100)


class TestPlanBatches:
    def test_queues_of_one_interval_share_a_batch(self) -> None:
        """Queues with the same interval land in one batch, sorted by name."""
        batches = plan_batches([queue("b"), queue("a"), queue("slow", 30.0)])
        assert {k: [q.name for q in v] for k, v in batches.items()} == {
            "sweep:1s:0": ["a", "b"],
            "sweep:30s:0": ["slow"],
        }

    def test_batches_are_cut_at_the_size(self) -> None:
        """Five queues at size two make three batches of one interval."""
        batches = plan_batches([queue(f"q{n}") for n in range(5)], size=2)
        assert [len(b) for b in batches.values()] == [2, 2, 1]
        assert list(batches) == ["sweep:1s:0", "sweep:1s:1", "sweep:1s:2"]

    def test_an_interval_of_many_queues_has_at_most_max_batches(self) -> None:
        """Up to BATCH_SIZE * MAX_BATCHES queues an interval is cut at BATCH_SIZE; above, into
        MAX_BATCHES batches, the last one shorter; another interval is cut on its own."""
        few = BATCH_SIZE * MAX_BATCHES
        many = few * 5 + 1
        cut = BATCH_SIZE * 5 + 1
        queues = [queue(f"q{n:06}") for n in range(many)] + [
            queue(f"s{n}", 30.0) for n in range(few)
        ]
        batches = plan_batches(queues)
        fast = [len(b) for k, b in batches.items() if k.startswith("sweep:1s:")]
        slow = [len(b) for k, b in batches.items() if k.startswith("sweep:30s:")]
        assert fast == [cut] * (MAX_BATCHES - 1) + [many - (MAX_BATCHES - 1) * cut]
        assert slow == [BATCH_SIZE] * MAX_BATCHES
        assert sorted(q.name for b in batches.values() for q in b) == sorted(q.name for q in queues)

    def test_no_queue_no_batch(self) -> None:
        """An empty queue list plans nothing."""
        assert plan_batches([]) == {}


class TestPhases:
    def test_an_intervals_batches_spread_over_it(self) -> None:
        """Five batches of one interval run a fifth of it apart; another interval's batches
        spread over theirs on their own."""
        queues = [queue(f"q{n:03}") for n in range(9)] + [queue(f"s{n}", 30.0) for n in range(4)]
        spread = phases(plan_batches(queues, size=2))
        assert spread == {
            "sweep:1s:0": 0.0,
            "sweep:1s:1": 0.2,
            "sweep:1s:2": 0.4,
            "sweep:1s:3": 0.6,
            "sweep:1s:4": 0.8,
            "sweep:30s:0": 0.0,
            "sweep:30s:1": 0.5,
        }

    def test_the_jobs_run_at_once_then_on_their_phase(self) -> None:
        """Every batch's first run is now; the next ones fall at its phase of the interval."""
        at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
        schedule, scheduler, _, _ = make(clock=lambda: at)
        schedule.sync([QueueSettings(f"q{n:04}", 10.0, 1, 100) for n in range(800)])
        jobs = sorted(scheduler.get_jobs(), key=lambda job: job.id)
        assert [job.next_run_time for job in jobs] == [at] * 4
        after = [job.trigger.get_next_fire_time(at, at) for job in jobs]
        assert after == [at + timedelta(seconds=s) for s in (10.0, 2.5, 5.0, 7.5)]


def next_run(trigger: OnGrid, previous: datetime, now: datetime) -> datetime:
    """The trigger's next run after `previous` (it has no end: there always is one)."""
    found = trigger.get_next_fire_time(previous, now)
    assert found is not None
    return found


class TestOnGrid:
    START = datetime(2026, 12, 1, 12, 0, 3, tzinfo=UTC)

    def grid(self, jitter: float | None = None) -> OnGrid:
        return OnGrid(seconds=10, start_date=self.START, jitter=jitter)

    def test_a_run_off_the_grid_goes_back_to_it(self) -> None:
        """After a run at once (before the start) or at a restart's odd time, the next run is
        the grid's next point, not an interval after it."""
        trigger = self.grid()
        assert trigger.get_next_fire_time(self.START - timedelta(seconds=2), self.START) == (
            self.START
        )
        odd = self.START + timedelta(seconds=14.5)
        assert trigger.get_next_fire_time(odd, odd) == self.START + timedelta(seconds=20)

    def test_the_jitter_moves_one_run_and_never_the_grid(self) -> None:
        """Each run falls within the jitter after its grid point, whatever the jitter moved the
        run before: runs do not drift later and later."""
        trigger, previous = self.grid(jitter=2.0), self.START
        for k in range(1, 50):
            previous = next_run(trigger, previous, previous)
            point = self.START + timedelta(seconds=10 * k)
            assert point <= previous <= point + timedelta(seconds=2)

    def test_each_run_is_later_than_the_one_before(self) -> None:
        """At an interval a microsecond cannot hold (0.3 s), each run is still one interval
        after the last: a run read back just short of its point counts as at it. Were the
        same time returned again, APScheduler's listing of the runs due would never end."""
        trigger = OnGrid(seconds=0.3, start_date=self.START)
        previous = self.START
        for k in range(1, 2000):
            previous = next_run(trigger, previous, previous)
            assert abs((previous - self.START).total_seconds() - 0.3 * k) < 1e-5, k

    def test_missed_runs_are_the_grids_points(self) -> None:
        """A scheduler that woke 35 s late lists the grid's points it slept through."""
        trigger, first = self.grid(), self.START
        woke = first + timedelta(seconds=35)
        missed, at = [], first
        while at <= woke:
            missed.append(at)
            at = next_run(trigger, at, woke)
        assert missed == [first + timedelta(seconds=s) for s in (0, 10, 20, 30)]


def make(
    sweep: Callable[[Batch], None] = lambda _batch: None,
    clock: Callable[[], datetime] = utc_now,
) -> tuple[Schedule, BackgroundScheduler, list[int], CollectorRegistry]:
    """A schedule on a scheduler not started, its overruns listed, its series registered."""
    scheduler = BackgroundScheduler(timezone=UTC)
    overruns: list[int] = []
    schedule = Schedule(
        scheduler, sweep, workers=2, jitter=0.0, on_overrun=lambda: overruns.append(1), clock=clock
    )
    registry = CollectorRegistry()
    for series in schedule.series:
        registry.register(series)
    return schedule, scheduler, overruns, registry


def wait_for(done: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll until `done`, failing after `seconds`."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        time.sleep(0.01)


class TestSchedule:
    def test_sync_adds_and_removes_jobs(self) -> None:
        """sync keeps exactly one job per planned batch, and keeps unchanged jobs' timers."""
        schedule, scheduler, _, _ = make()
        schedule.sync([queue("a"), queue("b", 2.0)])
        assert sorted(j.id for j in scheduler.get_jobs()) == ["sweep:1s:0", "sweep:2s:0"]
        due = scheduler.get_job("sweep:1s:0").next_run_time
        schedule.sync([queue("a"), queue("c")])
        assert [j.id for j in scheduler.get_jobs()] == ["sweep:1s:0"]
        assert scheduler.get_job("sweep:1s:0").next_run_time == due
        assert schedule.queue_names() == {"a", "c"}
        assert [q.name for q in schedule.batches()["sweep:1s:0"]] == ["a", "c"]

    def test_jobs_never_overlap_and_coalesce(self) -> None:
        """Each batch job runs at most one instance, on the pool that coalesces missed runs
        (APScheduler's coalesce would hide them from the submission event)."""
        schedule, scheduler, _, _ = make()
        schedule.sync([queue("a")])
        job = scheduler.get_job("sweep:1s:0")
        assert job.max_instances == 1
        assert (job.coalesce, job.executor) == (False, SWEEPS)
        assert job.misfire_grace_time is None

    def test_a_new_batch_is_due_at_the_schedules_clock(self) -> None:
        """A batch's first run is at the clock passed in: now, as the schedule reads it."""
        at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
        schedule, scheduler, _, _ = make(clock=lambda: at)
        schedule.sync([queue("a")])
        assert scheduler.get_job("sweep:1s:0").next_run_time == at

    def test_sweep_now_skips_a_running_batch(self) -> None:
        """sweep_now makes idle batches due now and leaves one that is sweeping alone."""
        running, release = threading.Event(), threading.Event()

        def sweep(batch: Batch) -> None:
            if batch[0].name == "b":
                running.set()
                release.wait(10)

        schedule, scheduler, _, _ = make(sweep)
        schedule.sync([queue("a", 60.0), queue("b", 120.0)])
        scheduler.start()
        try:
            assert running.wait(10)
            later = datetime.now(UTC) + timedelta(hours=1)
            for job in scheduler.get_jobs():
                job.modify(next_run_time=later)
            schedule.sweep_now()
            assert scheduler.get_job("sweep:60s:0").next_run_time <= datetime.now(UTC)
            assert scheduler.get_job("sweep:120s:0").next_run_time == later
        finally:
            release.set()
            scheduler.shutdown(wait=True)

    def test_a_batch_runs_its_queues_as_they_are_when_it_runs(self) -> None:
        """A batch whose queues changed after its job was added sweeps the queues it has now,
        and a batch still running when due again is an overrun."""
        swept: list[Batch] = []
        release, started = threading.Event(), threading.Event()

        def slow(batch: Batch) -> None:
            swept.append(batch)
            started.set()
            release.wait(10)

        schedule, scheduler, overruns, registry = make(slow)
        schedule.sync([queue("a", 0.1)])
        schedule.sync([queue("a", 0.1), queue("b", 0.1)])  # the same batch, one more queue
        scheduler.start()
        try:
            assert started.wait(10)
            wait_for(lambda: bool(overruns))
        finally:
            release.set()
            scheduler.shutdown(wait=True)
        assert [q.name for q in swept[0]] == ["a", "b"]
        assert registry.get_sample_value("sweeperd_schedule_overruns_total") == len(overruns)

    def test_sweep_once_sweeps_every_queue_beside_their_timers(self) -> None:
        """A takeover's one sweep of every queue now runs each batch once, and leaves the
        batches' own jobs as they were."""
        swept: list[list[str]] = []
        schedule, scheduler, _, _ = make(lambda batch: swept.append([q.name for q in batch]))
        schedule.sync([queue("a", 3600.0)])
        later = datetime.now(UTC) + timedelta(hours=1)
        scheduler.get_job("sweep:3600s:0").modify(next_run_time=later)
        scheduler.start()
        try:
            schedule.sweep_once([queue("a", 3600.0), queue("b", 5.0)])
            wait_for(lambda: len(swept) == 2)
            assert scheduler.get_job("sweep:3600s:0").next_run_time == later
        finally:
            scheduler.shutdown(wait=True)
        assert sorted(swept) == [["a"], ["b"]]

    def test_a_takeover_batch_runs_however_late_the_pool_takes_it(self) -> None:
        """A takeover batch the pool starts long after it was added (queued behind the other
        batches of a takeover of 33,000 queues) still sweeps: APScheduler's default grace of a
        second would drop it, and its queues would wait an interval for their grid turn."""
        swept: list[Batch] = []
        schedule, scheduler, _, _ = make(swept.append)
        scheduler.start(paused=True)  # the job gets its defaults; the test hands it to the pool
        executor = RunOnce(1)
        executor.start(scheduler, SWEEPS)
        try:
            schedule.sweep_once([queue("gained", 60.0)])
            [job] = scheduler.get_jobs()
            assert (job.name, job.executor) == (TAKEOVER, SWEEPS)
            executor.submit_job(job, [datetime.now(UTC) - timedelta(seconds=30)])
        finally:
            executor.shutdown(wait=True)  # the run handed to it is done
            scheduler.shutdown(wait=False)
        assert swept == [[queue("gained", 60.0)]]


def ten_runs_late() -> tuple[Schedule, CollectorRegistry, str, list[datetime]]:
    """A schedule of one batch every 0.1 s, its clock stopped at noon; the batch's job id, and
    the ten run times of the second before noon."""
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    schedule, scheduler, _, registry = make(clock=lambda: now)
    schedule.sync([QueueSettings("q", 0.1, 1, 100)])
    [job] = scheduler.get_jobs()
    times = [now - timedelta(seconds=1.0) + n * timedelta(seconds=0.1) for n in range(10)]
    return schedule, registry, job.id, times


class TestMissedRuns:
    def test_a_late_batch_counts_the_runs_it_missed(self) -> None:
        """A batch submitted for ten run times at once (the scheduler woke a second late): nine
        runs missed, and one lag observed, exactly the first run time's distance from now."""
        schedule, registry, job_id, times = ten_runs_late()
        schedule.submitted(JobSubmissionEvent(EVENT_JOB_SUBMITTED, job_id, "default", times))
        assert registry.get_sample_value("sweeperd_schedule_missed_runs_total") == 9
        assert registry.get_sample_value("sweeperd_schedule_lag_seconds_count") == 1
        assert registry.get_sample_value("sweeperd_schedule_lag_seconds_sum") == 1.0

    def test_a_late_batch_still_sweeping_counts_them_too(self) -> None:
        """A batch still sweeping when the scheduler wakes with ten run times (the process was
        stopped in the middle of its sweep): one overrun, and the nine before the last missed."""
        schedule, registry, job_id, times = ten_runs_late()
        schedule.overran(JobSubmissionEvent(EVENT_JOB_MAX_INSTANCES, job_id, "default", times))
        assert registry.get_sample_value("sweeperd_schedule_missed_runs_total") == 9
        assert registry.get_sample_value("sweeperd_schedule_overruns_total") == 1

    def test_a_late_batch_runs_once(self) -> None:
        """The batches' pool, handed ten run times, sweeps the batch once."""
        swept: list[Batch] = []
        ran = threading.Event()

        def sweep(batch: Batch) -> None:
            swept.append(batch)
            ran.set()

        schedule, scheduler, _, _ = make(sweep)
        schedule.sync([QueueSettings("q", 0.1, 1, 100)])
        [job] = scheduler.get_jobs()
        assert job.executor == SWEEPS
        now = datetime.now(UTC)
        times = [now - timedelta(seconds=1.0) + n * timedelta(seconds=0.1) for n in range(10)]
        executor = RunOnce(1)
        executor.start(scheduler, SWEEPS)
        try:
            executor.submit_job(job, times)
            assert ran.wait(5)
        finally:
            executor.shutdown(wait=True)
        assert swept == [[QueueSettings("q", 0.1, 1, 100)]]
