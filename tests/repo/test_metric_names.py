"""docs/metrics.md's "What's exported" is what a daemon exports, family for family, with the
type it says: the names the rules, the dashboard and the other pages are checked against."""

from __future__ import annotations

import re
from pathlib import Path

import redis

from tests.support.daemon_process import DaemonProcess
from tests.support.doc_pages import PAGES
from tests.support.paths import REPO
from tests.support.servers import RedisServer
from tests.support.shipped import documented_metrics, exported_names

# Where metric names are written besides the table: the pages, the alert rules, the manifests,
# the env example, the dashboard.
MENTIONING = (*PAGES, *REPO.glob("deploy/**/*.y*ml"), *REPO.glob("deploy/**/*.json"))
MENTIONING += tuple(REPO.glob("systemd/*"))
METRIC_NAME = re.compile(r"\bsweeperd_[a-z_]+[a-z]\b")


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

    def test_every_name_written_anywhere_is_in_the_table(self) -> None:
        """Each sweeperd_* metric name the pages, the rules, the manifests, the env example
        and the dashboard write is one the table lists (a histogram by its name or a series)."""
        documented = documented_metrics()
        known = exported_names(documented) | set(documented)
        written = {
            (path.relative_to(REPO).as_posix(), name)
            for path in MENTIONING
            for name in METRIC_NAME.findall(path.read_text())
        }
        assert len(written) > 50
        assert {(where, name) for where, name in written if name not in known} == set()
