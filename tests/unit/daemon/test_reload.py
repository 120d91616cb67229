"""SIGHUP in-process: what a reload logs as reloaded is what runs; restart-only settings wait."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from sweeperd.config.settings import Settings
from sweeperd.daemon.daemon import Daemon
from sweeperd.daemon.reload import in_effect, restart_only
from sweeperd.daemon.schedule import JOB_PREFIX
from tests.support.clock import Clock
from tests.support.daemon_inprocess import in_process, settings_for
from tests.support.servers import RedisServer


def reloading(running: Settings, wanted: Settings) -> Daemon:
    """A daemon running `running` whose config file now says `wanted`."""
    return in_process(running, lambda: wanted, Clock(100.0))


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


class TestRestartOnly:
    def test_they_keep_their_running_values_and_are_named_with_both(
        self, redis_server: RedisServer
    ) -> None:
        """A reload changing the executor, the metrics address and the interval: the interval
        applies; the other two keep running and reload_needs_restart names each with the value
        that runs and the one wanted; `reloaded` shows what runs."""
        url = redis_server.url
        running = settings_for(url, executor="native", metrics_addr="127.0.0.1:9001")
        wanted = settings_for(url, executor="script", metrics_addr="127.0.0.1:9002", interval="2")
        daemon = reloading(running, wanted)
        with capture_logs() as logs:
            daemon.apply_reload()
        s = daemon.settings
        assert (s.executor, s.daemon.metrics_port, s.interval) == ("native", 9001, 2.0)
        [needs] = events(logs, "reload_needs_restart")
        assert needs["log_level"] == "warning"
        assert needs["settings"] == {
            "executor": {"running": "native", "wanted": "script"},
            "metrics_addr": {"running": "127.0.0.1:9001", "wanted": "127.0.0.1:9002"},
        }
        [reloaded] = events(logs, "reloaded")
        assert (reloaded["executor"], reloaded["metrics_port"]) == ("native", 9001)
        assert reloaded["interval"] == 2.0

    def test_the_server_and_its_password(self, redis_server: RedisServer, tmp_path: Path) -> None:
        """A new URL and a new password (same file, new content) keep the running server and
        password; the log shows the URLs without credentials and never a password."""
        secret = tmp_path / "password"
        secret.write_text("old-s3cret\n")
        running = settings_for(redis_server.url, redis_password_file=str(secret))
        secret.write_text("new-s3cret\n")
        other = "redis://u:hidden@127.0.0.1:1/0"
        wanted = settings_for(other, redis_password_file=str(secret))
        daemon = reloading(running, wanted)
        with capture_logs() as logs:
            daemon.apply_reload()
        assert daemon.settings.connection == running.connection
        [needs] = events(logs, "reload_needs_restart")
        assert needs["settings"] == {
            "redis_url": {"running": redis_server.url, "wanted": "redis://127.0.0.1:1/0"},
            "redis_password": {"running": "<set>", "wanted": "<set> (changed)"},
        }
        [reloaded] = events(logs, "reloaded")
        assert reloaded["redis_url"] == redis_server.url
        assert "s3cret" not in str(logs) and "hidden" not in str(logs)

    def test_a_reload_that_changes_none_of_them_says_nothing_of_a_restart(
        self, redis_server: RedisServer
    ) -> None:
        """Only in-place settings changed: no reload_needs_restart, and they apply."""
        running = settings_for(redis_server.url)
        daemon = reloading(running, settings_for(redis_server.url, jitter="0", limit="7"))
        with capture_logs() as logs:
            daemon.apply_reload()
        assert [e["event"] for e in logs] == ["reloaded"]
        s = daemon.settings
        assert (s.daemon.jitter, s.limit) == (0, 7)
        batches = [j for j in daemon.scheduler.get_jobs() if j.id.startswith(JOB_PREFIX)]
        assert batches and {j.trigger.jitter for j in batches} == {None}  # jobs anew, spread 0

    def test_the_key_root_waits_for_a_restart(self, redis_server: RedisServer) -> None:
        """prefix_root keeps its running value: the membership key and the slots are under it."""
        running = settings_for(redis_server.url, metrics_addr="[::1]:9001")
        daemon = reloading(running, settings_for(redis_server.url, prefix_root="jobs"))
        with capture_logs() as logs:
            daemon.apply_reload()
        assert daemon.settings.prefix_root == "emq"
        [needs] = events(logs, "reload_needs_restart")
        assert needs["settings"] == {
            "prefix_root": {"running": "emq", "wanted": "jobs"},
            "metrics_addr": {"running": "[::1]:9001", "wanted": "0.0.0.0:9787"},
        }


class TestInEffect:
    def test_restart_only_settings_run_on_and_the_others_change(self) -> None:
        """A file that changes every setting: after the SIGHUP each restart-only setting has its
        running value, every other one the file's (the daemon's jitter, discovery and audit
        period too)."""
        running = settings_for("redis://127.0.0.1:6379/0")
        wanted = settings_for(
            "redis://127.0.0.2:6380/1",
            prefix_root="jobs",
            executor="script",
            metrics_addr="127.0.0.1:9001",
            shard="on",
            sweep_at="interval",
            deadline_source="off",
            heartbeat="9",
            instance_id="pod-2",
            queue_metrics="full",
            socket_timeout="0.5",
            jitter="0.5",
            discover="7",
            audit_every="600",
            interval="2",
            max_stalled="4",
            limit="9",
            call_target_ms="3",
            drain_share="0.5",
            log_level="debug",
            queues=["other"],
        )
        fresh = in_effect(running, wanted)
        kept, file = restart_only(running), restart_only(wanted)
        assert {key for key in kept if kept[key] != file[key]} == {
            "redis_url",
            "socket_timeout",
            "prefix_root",
            "executor",
            "metrics_addr",
            "sweep_at",
            "deadline_source",
            "shard",
            "heartbeat",
            "instance_id",
            "queue_metrics",
        }
        assert restart_only(fresh) == kept
        assert (fresh.interval, fresh.max_stalled, fresh.limit, fresh.log_level) == (
            2,
            4,
            9,
            "debug",
        )
        assert (fresh.call_target_ms, fresh.drain_share) == (3, 0.5)
        assert [q.name for q in fresh.queues] == ["other"]
        assert [q.keys.active for q in fresh.queues] == [f"{running.prefix_root}:{{other}}:active"]
        assert (fresh.daemon.jitter, fresh.daemon.discover, fresh.daemon.audit_every) == (
            0.5,
            7,
            600,
        )
