"""A log line stays one JSON object whatever the queue count: journald splits a line longer
than its LineMax (48K by default), and the docs promise one object a line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.servers import RedisServer

LINE_MAX = 16 * 1024  # bytes a line stays under: a third of journald's default LineMax
QUEUES = 5_000


def test_the_started_line_counts_the_queues(redis_server: RedisServer, tmp_path: Path) -> None:
    """5,000 queues of 40-character names (once a 50 KB started line): the line stays under
    16 KiB, says how many queues, and names the first ten and how many more."""
    names = [f"tenant-{n:05d}-invoices-and-receipts-queue" for n in range(QUEUES)]
    config = tmp_path / "sweeperd.toml"
    config.write_text(f"queues = {json.dumps(names)}\ninterval = 60\n")
    with DaemonProcess(tmp_path, "--config", str(config), "--redis-url", redis_server.url) as d:
        wait_until(lambda: d.events("started"), what="the started line")
        [line] = [line for line in d.log_text().splitlines() if '"event": "started"' in line]
    started = json.loads(line)
    assert len(line.encode()) < LINE_MAX
    assert started["queues"] == QUEUES
    assert started["queue_names"] == [*names[:10], f"…(+{QUEUES - 10} more)"]
