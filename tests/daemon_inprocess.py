"""The daemon in this process, as its in-process tests build it: one replica's settings alone."""

from __future__ import annotations

from sweeperd.settings import Settings, build_settings


def settings_for(url: str, **overrides: object) -> Settings:
    """One replica on its own (sharing off: it owns every queue without a heartbeat)."""
    given: dict[str, object] = {
        "redis_url": url,
        "queues": ["fixed"],
        "interval": "5",
        "shard": "off",
    }
    return build_settings({**given, **overrides}, None, logs_to_tty=False)
