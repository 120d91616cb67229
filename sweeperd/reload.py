"""What a SIGHUP changes in place and what waits for a restart: the restart-only settings, as
the options name them and the log may show them, and what a new file would change of them."""

from __future__ import annotations

import structlog

from sweeperd.settings import Settings

log = structlog.get_logger("sweeperd.daemon")

# What a SIGHUP cannot change in place: the servers and their clients, what the HTTP side
# serves, the membership (its key lives under the root, as the slots of the queues it maps).
# restart_only() names each of them as the options do, for reload_needs_restart.
RESTART_SETTINGS = ("connection", "prefix_root", "executor", "metrics_host", "metrics_port",
                    "shard", "heartbeat", "instance_id", "web_config", "queue_metrics")  # fmt: skip


def restart_only(s: Settings) -> dict[str, tuple[object, object]]:
    """The restart-only settings as the options name them: each one's value, and how the log
    shows it (no credential, no password, a web config by its path)."""
    c, t, web, bound = s.connection, s.connection.topology, s.web_config, s.metrics_host

    def same(value: object) -> tuple[object, object]:
        return value, value

    def secret(value: str | None) -> tuple[object, object]:
        return value, None if value is None else "<set>"

    return {
        "redis_url": (c.url, c.shown_url),
        "redis_password": secret(c.password),
        "socket_timeout": same(c.socket_timeout),
        **{key: same(path) for key, path in c.tls.by_key().items()},
        "cluster": same(t.cluster),
        "sentinels": (t.sentinels, [f"{host}:{port}" for host, port in t.sentinels]),
        "sentinel_master": same(t.sentinel_master),
        "sentinel_password": secret(t.sentinel_password),
        "prefix_root": same(s.prefix_root),
        "executor": same(str(s.executor)),
        "metrics_addr": same(f"{f'[{bound}]' if ':' in bound else bound}:{s.metrics_port}"),
        "web_config_file": (web, str(web.path) if web else None),
        "shard": same(str(s.shard)),
        "heartbeat": same(s.heartbeat),
        "instance_id": same(s.instance_id),
        "queue_metrics": same(str(s.queue_metrics)),
    }


def restart_changes(running: Settings, wanted: Settings) -> dict[str, dict[str, object]]:
    """The restart-only settings the file changes: each with the value that runs and the one
    wanted, marked changed where both show alike (a password, a web config's content)."""
    before, after = restart_only(running), restart_only(wanted)
    changes: dict[str, dict[str, object]] = {}
    for key, (value, shown) in after.items():
        old, old_shown = before[key]
        if value != old:
            changes[key] = {
                "running": old_shown,
                "wanted": shown if shown != old_shown else f"{shown} (changed)",
            }
    return changes


def said(s: Settings) -> None:
    """The config file's notes, once per read: it works as written, but should be rewritten."""
    for note in s.notes:
        log.warning("config_deprecated", note=note)
