"""The settings object: precedence of defaults, file and flags/env, queue tables, every refusal."""

from __future__ import annotations

import os
import socket
from dataclasses import fields
from pathlib import Path

import pytest

from sweeperd.config.options import OPTIONS
from sweeperd.config.settings import ConfigError, DaemonSettings, QueueSettings, build_settings
from sweeperd.constants import (
    DEFAULT_LIMIT,
    DeadlineSource,
    ExecutorChoice,
    LogFormat,
    QueueMetrics,
    Shard,
    SweepAt,
)
from tests.support.built_settings import build, refusal

DAEMON_KEYS = {f.name for f in fields(DaemonSettings)}


@pytest.fixture(autouse=True)
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)


class TestPrecedence:
    def test_defaults(self, tmp_path: Path) -> None:
        """With a queue and nothing else, every setting has its default."""
        s = build(tmp_path, queues=["q"])
        assert s.connection.url == "redis://localhost:6379/0"
        assert s.connection.password is None
        assert s.prefix_root == "emq"
        assert (s.interval, s.max_stalled, s.limit) == (5.0, 1, DEFAULT_LIMIT)
        assert s.executor is ExecutorChoice.AUTO
        assert (s.daemon.metrics_host, s.daemon.metrics_port) == ("0.0.0.0", 9787)
        assert s.log_level == "info"
        d = s.daemon
        assert (s.connection.socket_timeout, d.jitter, d.discover) == (5.0, 0.1, 0.0)
        assert (s.call_target_ms, s.drain_share) == (2.0, 1.0)
        assert s.queues == (QueueSettings("q", 5.0, 1, DEFAULT_LIMIT),)
        assert s.daemon.queue_metrics is QueueMetrics.AUTO
        assert s.config_path is None

    def test_file_beats_defaults(self, tmp_path: Path) -> None:
        """A key in the file replaces the default."""
        s = build(tmp_path, 'queues = ["q"]\ninterval = 2\nlimit = 7\nexecutor = "script"\n')
        assert (s.interval, s.limit, s.executor) == (2.0, 7, ExecutorChoice.SCRIPT)
        assert s.config_path == tmp_path / "sweeperd.toml"

    def test_overrides_beat_file(self, tmp_path: Path) -> None:
        """A flag or env var replaces the file's value; None means not given."""
        s = build(tmp_path, 'queues = ["q"]\ninterval = 2\nlimit = 7\n', interval=3.5, limit=None)
        assert (s.interval, s.limit) == (3.5, 7)

    def test_overrides_as_text(self, tmp_path: Path) -> None:
        """Env vars that arrive as text are read as numbers."""
        s = build(tmp_path, queues="q", interval="0.5", max_stalled="3", jitter="0", discover="30")
        assert (s.interval, s.max_stalled, s.daemon.jitter, s.daemon.discover) == (0.5, 3, 0, 30)
        full = build(tmp_path, queues="q", queue_metrics="FULL")
        assert full.daemon.queue_metrics is QueueMetrics.FULL

    def test_every_key(self, tmp_path: Path) -> None:
        """Every top-level key of the file is read."""
        s = build(
            tmp_path,
            'redis_url = "rediss://h:6380/1"\nprefix_root = "jobs"\ninterval = 1.5\n'
            'max_stalled = 2\nlimit = 50\nexecutor = "native"\nmetrics_addr = "127.0.0.1:9000"\n'
            'log_format = "console"\nlog_level = "DEBUG"\ncall_target_ms = 0.5\n'
            "drain_share = 0.25\nsocket_timeout = 0.25\njitter = 0.5\ndiscover = 60\n"
            'queue_metrics = "full"\n',
        )
        assert s.connection.url == "rediss://h:6380/1"
        assert s.prefix_root == "jobs"
        assert (s.interval, s.max_stalled, s.limit) == (1.5, 2, 50)
        assert s.executor is ExecutorChoice.NATIVE
        assert (s.daemon.metrics_host, s.daemon.metrics_port) == ("127.0.0.1", 9000)
        assert s.log_format is LogFormat.CONSOLE
        assert s.log_level == "debug"
        assert (s.call_target_ms, s.drain_share) == (0.5, 0.25)
        d = s.daemon
        assert (s.connection.socket_timeout, d.jitter, d.discover) == (0.25, 0.5, 60.0)
        assert s.daemon.queue_metrics is QueueMetrics.FULL
        assert s.queues == ()

    def test_a_queues_keys_are_under_the_root(self, tmp_path: Path) -> None:
        """A queue's keys are built with its settings, under the root: a listed queue's, a
        table's and a discovered one's."""
        s = build(tmp_path, 'prefix_root = "jobs"\n[queue.billing]\nlimit = 5\n', queues="a")
        found = s.for_queue("found")
        assert [q.keys.active for q in (*s.queues, found)] == [
            "jobs:{billing}:active",
            "jobs:{a}:active",
            "jobs:{found}:active",
        ]


class TestDefaultsTable:
    def test_one_table(self, tmp_path: Path) -> None:
        """Every setting's default is the options table's: the settings read no other."""
        s = build(tmp_path, queues=["q"])
        for key, option in OPTIONS.items():
            if key in ("redis_url", "socket_timeout"):
                assert getattr(s.connection, key.removeprefix("redis_")) == option.default
            elif key in s.connection.tls.by_key():
                assert s.connection.tls.by_key()[key] == option.default, key
            elif key in ("executor", "log_format", "log_level") or option.is_flag:
                continue
            elif key in ("cluster", "sentinels", "sentinel_master", "sentinel_password_file"):
                assert s.connection.topology.mode == "standalone"
            elif key not in (
                "config",
                "queues",
                "redis_password_file",
                "metrics_addr",
                "instance_id",
                "web_config_file",
            ):
                holder = s.daemon if key in DAEMON_KEYS else s
                assert getattr(holder, key) == option.default, key

    def test_removed_drain_budget(self, tmp_path: Path) -> None:
        """drain_budget in the file is refused, saying it was removed and why."""
        assert refusal(tmp_path, 'queues = ["q"]\ndrain_budget = 10\n') == (
            "drain_budget was removed: a backlog is drained automatically (see call_target_ms "
            f"and drain_share); remove it from config file {tmp_path / 'sweeperd.toml'}"
        )


class TestDeadlineSource:
    def test_tracking_by_default(self, tmp_path: Path) -> None:
        """A new lease is heard of unless told otherwise; the file or a flag says off."""
        assert build(tmp_path, queues="q").daemon.deadline_source is DeadlineSource.TRACKING
        assert build(tmp_path, 'deadline_source = "off"\n', queues="q").daemon.deadline_source is (
            DeadlineSource.OFF
        )
        assert build(tmp_path, queues="q", deadline_source="OFF").daemon.deadline_source is (
            DeadlineSource.OFF
        )

    def test_another_word_is_refused(self, tmp_path: Path) -> None:
        """Any word but the two is refused, naming them."""
        assert refusal(tmp_path, queues="q", deadline_source="keyspace").endswith(
            "one of tracking, off, not 'keyspace'"
        )


class TestSweepAt:
    def test_at_the_deadline_by_default(self, tmp_path: Path) -> None:
        """Queues are swept at their deadlines unless told otherwise; the file, a flag or an env
        var says interval (in any case)."""
        assert build(tmp_path, queues=["q"]).daemon.sweep_at is SweepAt.DEADLINE
        assert build(tmp_path, 'sweep_at = "interval"\n', queues="q").daemon.sweep_at is (
            SweepAt.INTERVAL
        )
        assert build(tmp_path, queues="q", sweep_at="Interval").daemon.sweep_at is SweepAt.INTERVAL

    def test_another_word_is_refused(self, tmp_path: Path) -> None:
        """Any word but the two is refused, naming them."""
        assert refusal(tmp_path, queues="q", sweep_at="poll").endswith(
            "one of deadline, interval, not 'poll'"
        )


class TestSharingSettings:
    def test_defaults(self, tmp_path: Path) -> None:
        """Sharing is on, the heartbeat lives 5 s, the member id is hostname:pid."""
        s = build(tmp_path, queues=["q"])
        assert (s.daemon.shard, s.daemon.heartbeat) == (Shard.ON, 5.0)
        assert s.daemon.instance_id == f"{socket.gethostname()}:{os.getpid()}"

    def test_given(self, tmp_path: Path) -> None:
        """Flags and env vars set all three; the file may set shard and heartbeat."""
        s = build(tmp_path, 'shard = "off"\nheartbeat = 2.5\n', queues="q", instance_id="pod-7")
        d = s.daemon
        assert (d.shard, d.heartbeat, d.instance_id) == (Shard.OFF, 2.5, "pod-7")
        assert build(tmp_path, queues="q", shard="ON", heartbeat="0.5").daemon.heartbeat == 0.5

    def test_the_instance_id_is_not_read_from_the_shared_file(self, tmp_path: Path) -> None:
        """Replicas share the config file: an instance_id in it is refused, saying it is a flag
        and env setting only and why."""
        message = refusal(tmp_path, 'queues = ["q"]\ninstance_id = "r1"\n')
        assert message == (
            "instance_id is not read from a config file (each replica has its own, and the "
            "replicas share the file): give --instance-id (SWEEPERD_INSTANCE_ID) to each "
            f"replica, and remove it from config file {tmp_path / 'sweeperd.toml'}"
        )

    def test_a_flag_in_the_file_is_said_to_be_one(self, tmp_path: Path) -> None:
        """A command's own flag written in the file is named as the flag it is."""
        message = refusal(tmp_path, 'queues = ["q"]\ndry_run = true\n')
        assert message == (
            "dry_run is not read from a config file: give --dry-run (SWEEPERD_DRY_RUN), and "
            f"remove it from config file {tmp_path / 'sweeperd.toml'}"
        )

    @pytest.mark.parametrize(
        ("key", "value", "expected"),
        [
            ("heartbeat", 0.1, "a number of seconds from 0.5 to 86400, not 0.1"),
            ("heartbeat", "x", "a number of seconds from 0.5 to 86400, not 'x'"),
            ("shard", "maybe", "one of on, off, not 'maybe'"),
            (
                "instance_id",
                "a\tb",
                "1 to 200 printable characters without spaces (e.g. the pod name), not 'a\\tb'",
            ),
            (
                "instance_id",
                "a b",
                "1 to 200 printable characters without spaces (e.g. the pod name), not 'a b'",
            ),
        ],
    )
    def test_refused(self, tmp_path: Path, key: str, value: object, expected: str) -> None:
        """A bad value is refused with one line naming the flag and its env var."""
        where = f"--{key.replace('_', '-')} (SWEEPERD_{key.upper()})"
        with pytest.raises(ConfigError) as caught:
            build_settings({"queues": "q", key: value}, None, logs_to_tty=False)
        assert str(caught.value) == f"{where} must be {expected}"


class TestLogFormat:
    @pytest.mark.parametrize(
        ("tty", "expected"), [(False, LogFormat.JSON), (True, LogFormat.CONSOLE)]
    )
    def test_auto(self, tmp_path: Path, tty: bool, expected: LogFormat) -> None:
        """auto is json off a TTY and console on one."""
        assert build(tmp_path, tty=tty, queues=["q"]).log_format is expected

    def test_explicit(self, tmp_path: Path) -> None:
        """An explicit format is kept whatever stdout is."""
        assert (
            build(tmp_path, tty=True, queues=["q"], log_format="json").log_format is LogFormat.JSON
        )


class TestQueues:
    def test_comma_separated(self, tmp_path: Path) -> None:
        """Each --queue entry may hold several names separated by commas."""
        s = build(tmp_path, queues=["a,b", "c", "a"])
        assert [q.name for q in s.queues] == ["a", "b", "c"]

    def test_commas_and_spaces(self, tmp_path: Path) -> None:
        """SWEEPERD_QUEUES="emails, reports" (split on spaces by click) names two queues."""
        s = build(tmp_path, queues=["emails,", "reports", "a,,b c"])
        assert [q.name for q in s.queues] == ["emails", "reports", "a", "b", "c"]

    def test_tables_inherit_globals(self, tmp_path: Path) -> None:
        """A queue table's own values win; what it leaves out comes from the globals."""
        toml = "interval = 2\nmax_stalled = 4\n[queue.orders]\n[queue.mail]\ninterval = 10\n"
        s = build(tmp_path, toml + "limit = 9\n")
        assert s.queues == (
            QueueSettings("orders", 2.0, 4, DEFAULT_LIMIT),
            QueueSettings("mail", 10.0, 4, 9),
        )

    def test_table_wins_over_global_flag(self, tmp_path: Path) -> None:
        """A global flag reaches a table's unset keys, not the ones the table sets."""
        s = build(tmp_path, "[queue.mail]\ninterval = 10\n", interval=1, max_stalled=2)
        assert s.queues == (QueueSettings("mail", 10.0, 2, DEFAULT_LIMIT),)

    def test_flag_names_added_to_file(self, tmp_path: Path) -> None:
        """Names given by flags are added to the file's; a name in both keeps its table."""
        s = build(tmp_path, "[queue.mail]\nlimit = 3\n", queues=["extra,mail"])
        assert s.queues == (
            QueueSettings("mail", 5.0, 1, 3),
            QueueSettings("extra", 5.0, 1, DEFAULT_LIMIT),
        )

    def test_list_in_file(self, tmp_path: Path) -> None:
        """queues = [...] in the file names queues with the global settings."""
        s = build(tmp_path, 'queues = ["a", "b"]\nlimit = 5\n')
        assert s.queues == (QueueSettings("a", 5.0, 1, 5), QueueSettings("b", 5.0, 1, 5))

    def test_for_queue(self, tmp_path: Path) -> None:
        """for_queue gives a configured queue's settings, or the globals for a discovered one."""
        s = build(tmp_path, "discover = 30\nmax_stalled = 2\n[queue.mail]\ninterval = 10\n")
        assert s.for_queue("mail") == QueueSettings("mail", 10.0, 2, DEFAULT_LIMIT)
        assert s.for_queue("found") == QueueSettings("found", 5.0, 2, DEFAULT_LIMIT)

    def test_discover_without_queues(self, tmp_path: Path) -> None:
        """Discovery alone is enough to start."""
        assert build(tmp_path, discover=30).queues == ()


class TestPassword:
    def test_password_file_flag(self, tmp_path: Path) -> None:
        """The password file named by the flag is read, its line end stripped."""
        (tmp_path / "pw").write_text("s3cret\n")
        s = build(tmp_path, queues=["q"], redis_password_file=str(tmp_path / "pw"))
        assert s.connection.password == "s3cret"
        assert "s3cret" not in repr(s)

    def test_a_path_with_a_nul_is_refused(self, tmp_path: Path) -> None:
        """A path holding a NUL (which no file's can) is refused in one line."""
        message = refusal(tmp_path, 'queues = ["q"]\nredis_password_file = "a\\u0000b"\n')
        assert message == (
            f"redis_password_file in {tmp_path / 'sweeperd.toml'} holds a NUL character: give "
            "the file's path"
        )

    def test_password_file_relative_to_config(self, tmp_path: Path) -> None:
        """A relative password file in the config file is found beside the file."""
        (tmp_path / "pw").write_text("s3cret")
        s = build(tmp_path, 'queues = ["q"]\nredis_password_file = "pw"\n')
        assert s.connection.password == "s3cret"

    def test_systemd_credential(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a password file, systemd's credential redis-password is read."""
        (tmp_path / "redis-password").write_text("fromcred\n")
        monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
        assert build(tmp_path, queues=["q"]).connection.password == "fromcred"

    def test_unreadable_password_file(self, tmp_path: Path) -> None:
        """A password file that cannot be read is refused, naming the flag and the env var."""
        message = refusal(tmp_path, queues=["q"], redis_password_file=str(tmp_path / "nope"))
        assert message == (
            f"cannot read the Redis password file {tmp_path / 'nope'}: No such file or directory; "
            "check --redis-password-file (SWEEPERD_REDIS_PASSWORD_FILE)"
        )

    def test_unreadable_credential(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A systemd credential that cannot be read is refused, saying how to fix it."""
        (tmp_path / "redis-password").write_bytes(b"\xff\xfe")
        monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
        assert refusal(tmp_path, queues=["q"]) == (
            f"cannot read the Redis password file {tmp_path / 'redis-password'}: "
            "not UTF-8 text; fix the unit's LoadCredential= or set "
            "--redis-password-file (SWEEPERD_REDIS_PASSWORD_FILE)"
        )

    def test_password_file_is_a_directory(self, tmp_path: Path) -> None:
        """A password file that is a directory is refused."""
        message = refusal(tmp_path, queues=["q"], redis_password_file=str(tmp_path))
        assert message == (
            f"cannot read the Redis password file {tmp_path}: Is a directory; "
            "check --redis-password-file (SWEEPERD_REDIS_PASSWORD_FILE)"
        )

    def test_describe_redacts_query_password(self, tmp_path: Path) -> None:
        """A ?password= in the URL is not in describe() (run's `started` line) nor in repr."""
        s = build(tmp_path, queues=["q"], redis_url="redis://h:6379/0?password=hunter2")
        assert s.describe()["redis_url"] == "redis://h:6379/0?password=<redacted>"
        assert "hunter2" not in repr(s)

    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("redis://user:pw@h:6379/0", "<set>"),
            ("redis://:pw@h:6379/0", "<set>"),
            ("redis://h:6379/0?password=pw", "<set>"),
            ("redis://user@h:6379/0", None),
            ("redis://h:6379/0", None),
        ],
    )
    def test_describe_says_a_password_in_the_url_is_set(
        self, tmp_path: Path, url: str, shown: str | None
    ) -> None:
        """A password given in the URL shows as redis_password "<set>", as one from a file does;
        none given shows null."""
        assert build(tmp_path, queues=["q"], redis_url=url).describe()["redis_password"] == shown

    def test_repr_redacts_url(self, tmp_path: Path) -> None:
        """The settings' repr and describe() show no credentials."""
        s = build(tmp_path, queues=["q"], redis_url="redis://user:pw@h:6379/0")
        assert s.connection.url == "redis://user:pw@h:6379/0"
        assert "pw" not in repr(s)
        assert s.describe()["redis_url"] == "redis://h:6379/0"


class TestMetricsAddr:
    @pytest.mark.parametrize(
        ("addr", "host", "port"),
        [
            ("0.0.0.0:9787", "0.0.0.0", 9787),
            (":9787", "", 9787),
            ("[::1]:9787", "::1", 9787),
            ("[::]:1", "::", 1),
            ("localhost:65535", "localhost", 65535),
        ],
    )
    def test_accepted(self, tmp_path: Path, addr: str, host: str, port: int) -> None:
        """HOST:PORT, :PORT for every interface and [IPv6]:PORT are accepted."""
        s = build(tmp_path, queues=["q"], metrics_addr=addr)
        assert (s.daemon.metrics_host, s.daemon.metrics_port) == (host, port)

    @pytest.mark.parametrize(
        "addr", ["9787", "host:0", "host:65536", "host:x", "::1:9787", "[::1]9787", "a b:1"]
    )
    def test_refused(self, tmp_path: Path, addr: str) -> None:
        """Anything but HOST:PORT with a port from 1 to 65535 is refused."""
        message = refusal(tmp_path, queues=["q"], metrics_addr=addr)
        assert message == (
            "--metrics-addr (SWEEPERD_METRICS_ADDR) must be HOST:PORT with a port from 1 to "
            f"65535 (e.g. 0.0.0.0:9787, :9787, [::1]:9787), not {addr!r}"
        )


SECONDS = "must be a positive number of seconds"
WHOLE = "must be a whole number from 1 to 9223372036854775807"


class TestFileErrors:
    def test_missing_file(self, tmp_path: Path) -> None:
        """A config file that does not exist is refused, naming --config."""
        with pytest.raises(ConfigError) as caught:
            build_settings({"queues": ["q"]}, tmp_path / "none.toml", logs_to_tty=False)
        assert str(caught.value) == (
            f"cannot read the config file {tmp_path / 'none.toml'} (--config (SWEEPERD_CONFIG)): "
            "No such file or directory"
        )

    def test_syntax_error(self, tmp_path: Path) -> None:
        """A TOML syntax error is refused with its line."""
        message = refusal(tmp_path, 'queues = ["q"]\ninterval 5\n')
        assert message.startswith(f"config file {tmp_path / 'sweeperd.toml'} is not valid TOML: ")
        assert "line 2" in message

    def test_unknown_key(self, tmp_path: Path) -> None:
        """An unknown key is named, with the nearest known one and the list of known keys."""
        message = refusal(tmp_path, 'queues = ["q"]\nintervall = 5\n')
        assert message.startswith(
            f"unknown key 'intervall' in config file {tmp_path / 'sweeperd.toml'} "
            "(did you mean interval?); known keys: redis_url, redis_password_file, "
        )
        assert message.endswith("log_format, log_level, queues, queue")

    @pytest.mark.parametrize(
        ("toml", "expected"),
        [
            (
                "[queues.mail]\nexecutor = 'native'\n",
                "unknown key 'executor' in [queues.mail] in {path}; "
                "known keys: interval, max_stalled, limit",
            ),
            ("[queues]\nmail = 3\n", "queues.mail in {path} must be a table ([queues.mail])"),
            (
                'queues = "mail"\n',
                "queues in {path} must be a list of names; a queue's own values go in "
                "[queue.<name>] tables",
            ),
            (
                'queues = ["q"]\ninterval = "5"\n',
                "interval in {path} must be a positive number of seconds up to 86400, not '5'",
            ),
            ("[queues.mail]\nlimit = 0\n", "limit of [queues.mail] in {path} " + WHOLE + ", not 0"),
            ('queues = ["q"]\nmax_stalled = 1.5\n', "max_stalled in {path} " + WHOLE + ", not 1.5"),
            (
                'queues = ["q"]\ninterval = true\n',
                "interval in {path} must be a positive number of seconds up to 86400, not true",
            ),
            ("[queue.q]\nlimit = false\n", "limit of [queue.q] in {path} " + WHOLE + ", not false"),
            (
                'queues = ["a b"]\n',
                "queue name 'a b' in queues in {path} must be non-empty, "
                "without {{, }} or whitespace",
            ),
        ],
    )
    def test_refused(self, tmp_path: Path, toml: str, expected: str) -> None:
        """A bad value in the file names its key (and table) and the file; text is not parsed."""
        message = refusal(tmp_path, toml)
        assert message == expected.format(path=tmp_path / "sweeperd.toml")


class TestValueErrors:
    @pytest.mark.parametrize(
        ("key", "value", "expected"),
        [
            ("interval", 0, f"{SECONDS} up to 86400, not 0"),
            ("interval", "x", f"{SECONDS} up to 86400, not 'x'"),
            ("interval", "nan", f"{SECONDS} up to 86400, not 'nan'"),
            ("interval", True, f"{SECONDS} up to 86400, not true"),
            ("interval", 10**400, f"{SECONDS} up to 86400, not {10**400!r}"),
            ("socket_timeout", -1.0, f"{SECONDS} up to 3600, not -1"),
            ("max_stalled", 0, f"{WHOLE}, not 0"),
            ("limit", -3, f"{WHOLE}, not -3"),
            ("limit", 2**63, f"{WHOLE}, not 9223372036854775808"),
            ("discover", -1, "must be 0 (off) or a positive number of seconds up to 86400, not -1"),
            ("interval", 1e12, f"{SECONDS} up to 86400, not 1e+12"),
            ("socket_timeout", "1e12", f"{SECONDS} up to 3600, not 1e+12"),
            ("socket_timeout", "inf", f"{SECONDS} up to 3600, not 'inf'"),
            ("call_target_ms", 0, "must be a positive number of milliseconds, not 0"),
            ("call_target_ms", "nan", "must be a positive number of milliseconds, not 'nan'"),
            ("drain_share", 0, "must be a fraction above 0 and at most 1, not 0"),
            ("drain_share", "1.5", "must be a fraction above 0 and at most 1, not 1.5"),
            ("jitter", 1.5, "must be a fraction between 0 and 1, not 1.5"),
            ("jitter", -0.1, "must be a fraction between 0 and 1, not -0.1"),
            ("executor", "lua", "must be one of auto, native, script, not 'lua'"),
            ("queue_metrics", "all", "must be one of auto, sparse, basic, full, not 'all'"),
            ("log_format", "xml", "must be one of json, console, auto, not 'xml'"),
            (
                "log_level",
                "loud",
                "must be one of debug, info, warning, error, critical, not 'loud'",
            ),
            ("log_level", 3, "must be a string, not 3"),
            (
                "prefix_root",
                "a{b}",
                "must be a non-empty key root without {, } or whitespace, not 'a{b}'",
            ),
        ],
    )
    def test_refused(self, tmp_path: Path, key: str, value: object, expected: str) -> None:
        """Each bad value is refused with one line naming the flag and its env var."""
        where = f"--{key.replace('_', '-')} (SWEEPERD_{key.upper()})"
        with pytest.raises(ConfigError) as caught:
            build_settings({"queues": ["q"], key: value}, None, logs_to_tty=False)
        assert str(caught.value) == f"{where} {expected}"

    @pytest.mark.parametrize("name", ["", "a{b", "b}", " ", ","])
    def test_bad_queue_name(self, tmp_path: Path, name: str) -> None:
        """Empty names and names with braces or whitespace are refused."""
        message = refusal(tmp_path, queues=[name])
        assert message.startswith("queue name ")
        assert message.endswith(
            "in --queue (SWEEPERD_QUEUES) must be non-empty, without {, } or whitespace"
        )

    def test_no_queue(self, tmp_path: Path) -> None:
        """Neither a queue nor discovery: nothing to sweep, and the message says how to fix it."""
        assert refusal(tmp_path) == (
            "no queue to sweep: give --queue NAME, queues in the config file, or --discover SECONDS"
        )

    def test_unknown_override_is_a_bug(self, tmp_path: Path) -> None:
        """An override key that is not a setting is a programming error, not a ConfigError."""
        with pytest.raises(ValueError, match="unknown override keys"):
            build_settings({"queues": ["q"], "colour": "red"}, None, logs_to_tty=False)


class TestRedisUrl:
    @pytest.mark.parametrize(
        "url", ["redis://h:6379/0", "rediss://[::1]:6380", "unix:///run/redis.sock"]
    )
    def test_accepted(self, tmp_path: Path, url: str) -> None:
        """redis://, rediss:// and unix:// URLs are accepted."""
        assert build(tmp_path, queues=["q"], redis_url=url).connection.url == url

    def test_wrong_scheme(self, tmp_path: Path) -> None:
        """Another scheme is refused, the credentials removed from the message."""
        message = refusal(tmp_path, queues=["q"], redis_url="http://user:pw@h:1/")
        assert message == (
            "--redis-url (SWEEPERD_REDIS_URL): the scheme must be redis://, rediss:// or unix://, "
            "in 'http://h:1/'"
        )

    @pytest.mark.parametrize("url", ["localhost:6379", "REDIS://h", "valkey://h"])
    def test_no_scheme(self, tmp_path: Path, url: str) -> None:
        """A bare host, or a scheme redis-py does not know, is refused."""
        message = refusal(tmp_path, queues=["q"], redis_url=url)
        assert message.endswith(f"the scheme must be redis://, rediss:// or unix://, in {url!r}")

    @pytest.mark.parametrize("url", ["redis://[::1", "redis://[zz]:6379/0"])
    def test_a_bad_ipv6_host(self, tmp_path: Path, url: str) -> None:
        """A bracketed host left open or not IPv6 is refused in one line, not a traceback."""
        message = refusal(tmp_path, queues=["q"], redis_url=url)
        assert message == (
            "--redis-url (SWEEPERD_REDIS_URL): the host is not a name, an IPv4 address or an "
            f"[IPv6] one, in {url!r}"
        )

    def test_unparsable(self, tmp_path: Path) -> None:
        """A URL redis-py cannot parse is refused with its reason and no credentials."""
        message = refusal(tmp_path, queues=["q"], redis_url="redis://u:pw@h:port/0")
        assert message == (
            "--redis-url (SWEEPERD_REDIS_URL): the port must be a number from 1 to 65535, "
            "not 'port', in 'redis://h:port/0'"
        )

    def test_bad_db(self, tmp_path: Path) -> None:
        """A db that is not a number is refused, naming the file key."""
        message = refusal(tmp_path, 'queues = ["q"]\nredis_url = "redis://h/0?db=x"\n')
        assert message.startswith(f"redis_url in {tmp_path / 'sweeperd.toml'}: the db (?db=) must ")
