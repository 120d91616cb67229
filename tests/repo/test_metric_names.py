"""docs/metrics.md's "What's exported" is what a daemon exports, family for family, with the
type it says: the names the rules, the dashboard and the other pages are checked against."""

from __future__ import annotations

import re
from pathlib import Path

import redis

from tests.support.daemon_process import DaemonProcess
from tests.support.servers import RedisServer
from tests.support.shipped import documented_metrics


def exported(text: str) -> dict[str, str]:
    """The sweeperd families of an exposition, by the name and type its TYPE lines give, but
    the `<name>_created` gauges prometheus_client writes beside its own counters and
    histograms (the schedule's), which the page says once."""
    found = dict(re.findall(r"^# TYPE (sweeperd_\w+) (\w+)$", text, re.M))
    created = {f"{name.removesuffix('_total')}_created" for name in found}
    return {name: kind for name, kind in found.items() if name not in created}


class TestWhatIsExported:
    def test_the_table_is_what_a_daemon_exports(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """A daemon at --queue-metrics full, one queue swept, exports exactly the families the
        table lists, each of the type it says (nothing exported goes undocumented, nothing
        documented is missing)."""
        args = ("--queue", "q", "--queue-metrics", "full", "--redis-url", redis_server.url)
        with DaemonProcess(tmp_path, *args) as daemon:
            daemon.wait_swept("q")
            text = daemon.metrics_text()
        documented = {name: row.kind for name, row in documented_metrics().items()}
        assert exported(text) == documented
