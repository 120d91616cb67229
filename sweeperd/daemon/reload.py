"""What a SIGHUP changes in place and what waits for a restart: the restart-only settings, as
the options name them and the log may show them, and what a new file would change of them."""

from __future__ import annotations

from dataclasses import replace

import structlog

from sweeperd.config.settings import Settings

log = structlog.get_logger("sweeperd.daemon")


def in_effect(running: Settings, wanted: Settings) -> Settings:
    """Return what a SIGHUP puts in place: the file's settings, but the servers and their
    clients, the root of every key (the membership's and the queues' too) and the executor as
    they run; of the daemon's own, only the schedule's spread, discovery's and the audit's
    periods change (not the HTTP side, the replicas or the series exported). restart_only() names
    each kept one as the options do."""
    w = wanted.daemon
    daemon = replace(
        running.daemon, jitter=w.jitter, discover=w.discover, audit_every=w.audit_every
    )
    root = running.prefix_root
    return replace(
        wanted,
        connection=running.connection,
        prefix_root=root,
        queues=tuple(
            q if q.prefix_root == root else replace(q, prefix_root=root) for q in wanted.queues
        ),
        executor=running.executor,
        daemon=daemon,
    )


def restart_only(s: Settings) -> dict[str, tuple[object, object]]:
    """Return the restart-only settings as the options name them: each one's value, and how the
    log shows it (no credential, no password, a web config by its path)."""
    c, t, d = s.connection, s.connection.topology, s.daemon
    web, bound = d.web_config, d.metrics_host

    def same(value: object) -> tuple[object, object]:
        return value, value

    def secret(value: str | None) -> tuple[object, object]:
        return value, None if value is None else "<set>"

    return {
        "redis_url": ((c.url, t.seeds), c.shown_url if not t.seeds else c.shown_seeds),
        "redis_password": secret(c.password),
        "socket_timeout": same(c.socket_timeout),
        **{key: same(path) for key, path in c.tls.by_key().items()},
        "cluster": same(t.cluster),
        "sentinels": (t.sentinels, [f"{host}:{port}" for host, port in t.sentinels]),
        "sentinel_master": same(t.sentinel_master),
        "sentinel_password": secret(t.sentinel_password),
        "prefix_root": same(s.prefix_root),
        "executor": same(str(s.executor)),
        "metrics_addr": same(f"{f'[{bound}]' if ':' in bound else bound}:{d.metrics_port}"),
        "web_config_file": (web, str(web.path) if web else None),
        "sweep_at": same(str(d.sweep_at)),
        "deadline_source": same(str(d.deadline_source)),
        "shard": same(str(d.shard)),
        "heartbeat": same(d.heartbeat),
        "instance_id": same(d.instance_id),
        "queue_metrics": same(str(d.queue_metrics)),
    }


def restart_changes(running: Settings, wanted: Settings) -> dict[str, dict[str, object]]:
    """Return the restart-only settings the file changes: each with the value that runs and the
    one wanted, marked changed where both show alike (a password, a web config's content)."""
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


def log_notes(s: Settings) -> None:
    """Log the config file's notes, once per read: it works as written, but should be rewritten."""
    for note in s.notes:
        log.warning("config_deprecated", note=note)
