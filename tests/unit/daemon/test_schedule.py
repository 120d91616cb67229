"""Batches and their APScheduler jobs: grouping by interval, sync, sweep_now, overruns."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from sweeperd.config.settings import QueueSettings
from sweeperd.daemon.schedule import SWEEPS, Batch, Schedule, plan_batches


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

    def test_no_queue_no_batch(self) -> None:
        """An empty queue list plans nothing."""
        assert plan_batches([]) == {}


class TestSchedule:
    def make(self) -> tuple[Schedule, BackgroundScheduler, list[Batch], list[int]]:
        scheduler = BackgroundScheduler(timezone=UTC)
        swept: list[Batch] = []
        overruns: list[int] = []
        schedule = Schedule(
            scheduler,
            swept.append,
            workers=2,
            jitter=0.0,
            on_overrun=lambda: overruns.append(1),
        )
        return schedule, scheduler, swept, overruns

    def test_sync_adds_and_removes_jobs(self) -> None:
        """sync keeps exactly one job per planned batch, and keeps unchanged jobs' timers."""
        schedule, scheduler, _, _ = self.make()
        schedule.sync([queue("a"), queue("b", 2.0)])
        assert sorted(j.id for j in scheduler.get_jobs()) == ["sweep:1s:0", "sweep:2s:0"]
        due = scheduler.get_job("sweep:1s:0").next_run_time
        schedule.sync([queue("a"), queue("c")])
        assert [j.id for j in scheduler.get_jobs()] == ["sweep:1s:0"]
        assert scheduler.get_job("sweep:1s:0").next_run_time == due
        assert schedule.queue_names() == {"a", "c"}
        assert [q.name for q in schedule.batches["sweep:1s:0"]] == ["a", "c"]

    def test_jobs_never_overlap_and_coalesce(self) -> None:
        """Each batch job runs at most one instance, on the pool that coalesces missed runs
        (APScheduler's coalesce would hide them from the submission event)."""
        schedule, scheduler, _, _ = self.make()
        schedule.sync([queue("a")])
        job = scheduler.get_job("sweep:1s:0")
        assert job.max_instances == 1
        assert (job.coalesce, job.executor) == (False, SWEEPS)
        assert job.misfire_grace_time is None

    def test_sweep_now_skips_a_running_batch(self) -> None:
        """sweep_now makes idle batches due now and leaves a running one alone."""
        schedule, scheduler, _, _ = self.make()
        schedule.sync([queue("a"), queue("b", 2.0)])
        later = datetime.now(UTC) + timedelta(hours=1)
        for job in scheduler.get_jobs():
            job.modify(next_run_time=later)
        schedule.running.add("sweep:2s:0")
        schedule.sweep_now()
        assert scheduler.get_job("sweep:1s:0").next_run_time <= datetime.now(UTC)
        assert scheduler.get_job("sweep:2s:0").next_run_time == later

    def test_a_batch_runs_its_current_queues(self) -> None:
        """The scheduler runs the batch as it is now, and counts an overrun when it is busy."""
        schedule, scheduler, swept, overruns = self.make()
        release = threading.Event()
        started = threading.Event()

        def slow(batch: Batch) -> None:
            swept.append(batch)
            started.set()
            release.wait(5)

        schedule.sweep = slow
        schedule.sync([queue("a", 0.1)])
        scheduler.start()
        try:
            assert started.wait(5)
            deadline = datetime.now(UTC) + timedelta(seconds=5)
            while not overruns and datetime.now(UTC) < deadline:
                release.wait(0.05)
            assert overruns, "a batch still running when due again is an overrun"
        finally:
            release.set()
            scheduler.shutdown(wait=True)
        assert [q.name for q in swept[0]] == ["a"]
