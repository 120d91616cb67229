"""The daemon in this process, its clock passed in: one replica's settings and a Daemon on them."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from sweeperd.config.settings import Settings, build_settings
from sweeperd.daemon.daemon import Daemon
from sweeperd.daemon.notify import Notifier
from sweeperd.metrics.registry import Metrics
from tests.support.clock import Clock


def settings_for(url: str, **overrides: object) -> Settings:
    """One replica on its own (sharing off: it owns every queue without a heartbeat)."""
    given: dict[str, object] = {
        "redis_url": url,
        "queues": ["fixed"],
        "interval": "5",
        "shard": "off",
    }
    return build_settings({**given, **overrides}, None, logs_to_tty=False)


def in_process(settings: Settings, reload: Callable[[], Settings], clock: Clock) -> Daemon:
    """A daemon running `settings` that reloads what `reload` returns: no systemd notifier,
    its metrics in a registry of its own, at the settings' --queue-metrics."""
    level = settings.daemon.queue_metrics
    return Daemon(
        settings,
        reload,
        notifier=Notifier(None, None),
        metrics=Metrics(CollectorRegistry(), version="test", level=level),
        clock=clock,
    )


def stopped(daemon: Daemon) -> None:
    """The fleet's threads ended and its primaries' connections closed (left to the garbage
    collector, an unclosed socket is a ResourceWarning in whichever test comes next)."""
    daemon.fleet.stop(1.0)
    for node in daemon.fleet.primaries():
        node.client.close()
