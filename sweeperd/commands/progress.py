"""The progress bar of `once --drain` on a terminal: done, left, rate; gone when it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from sweeperd.commands.outcome import OnceResult, OnProgress


def done_of(result: OnceResult) -> int:
    """Leases taken from active so far: recovered, dead and ghosts."""
    return len(result.recovered) + len(result.dead) + result.ghosts


@contextmanager
def drain_bar(
    queue: str, console: Console, clock: Callable[[], float] = time.monotonic
) -> Iterator[OnProgress]:
    """Yield a bar on `console` (stderr) updated after each call; it disappears when done."""
    columns = (
        TextColumn(f"draining {queue}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f} done, {task.fields[left]:,} left"),
        TextColumn("{task.fields[rate]:,.0f}/s"),
        TimeElapsedColumn(),
    )
    started = clock()
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("drain", total=None, left=0, rate=0.0)

        def update(result: OnceResult) -> None:
            done = done_of(result)
            rate = done / max(clock() - started, 1e-9)
            bar.update(task, completed=done, total=done + result.left, left=result.left, rate=rate)

        yield update


@contextmanager
def drain_progress(queue: str, wanted: bool) -> Iterator[OnProgress | None]:
    """Yield a bar on stderr when it is a terminal and one is wanted; None otherwise."""
    if not (wanted and sys.stderr.isatty()):
        yield None
        return
    with drain_bar(queue, Console(stderr=True)) as update:
        yield update


@contextmanager
def audit_progress(
    wanted: bool, clock: Callable[[], float] = time.monotonic
) -> Iterator[Callable[[int], None] | None]:
    """On a terminal's stderr, when wanted: the keys an audit has read so far on the server it
    reads, and the rate; None otherwise. It disappears when done."""
    if not (wanted and sys.stderr.isatty()):
        yield None
        return
    columns = (
        TextColumn("auditing"),
        TextColumn("{task.completed:,.0f} keys read"),
        TextColumn("{task.fields[rate]:,.0f}/s"),
        TimeElapsedColumn(),
    )
    started = clock()
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("audit", total=None, rate=0.0)
        done = [0]

        def update(read: int) -> None:
            # The next server: its count starts again.
            if read < done[-1]:
                done.append(0)
            done[-1] = read
            total = sum(done)
            bar.update(task, completed=total, rate=total / max(clock() - started, 1e-9))

        yield update
