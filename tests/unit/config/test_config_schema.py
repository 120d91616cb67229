"""The config file's schema: a `queues` list beside `[queue.<name>]` tables; every example valid."""

from __future__ import annotations

import re
import signal
import tomllib
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from sweeperd.config.settings import ConfigError, QueueSettings, Settings, build_settings
from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.doc_pages import blocks
from tests.support.helpers import lease, run_id
from tests.support.invoke import sweeperd
from tests.support.paths import REPO
from tests.support.servers import RedisServer

CONFIGMAP = REPO / "deploy" / "kubernetes" / "configmap.yaml"
# A line only a sweeperd config file holds: a queue table, or a setting assigned.
CONFIG_LINE = re.compile(r"^\s*(\[queues?\.|(redis_url|interval|max_stalled|limit)\s*=)", re.M)


def toml_examples() -> list[tuple[str, str]]:
    """Every TOML example shipped: the docs' ```toml blocks and the ConfigMap's file."""
    found = [(block.where, block.text) for block in blocks() if block.lang == "toml"]
    [configmap] = [d for d in yaml.safe_load_all(CONFIGMAP.read_text()) if d["kind"] == "ConfigMap"]
    found.append((str(CONFIGMAP.relative_to(REPO)), configmap["data"]["sweeperd.toml"]))
    return found


def load(tmp_path: Path, toml: str, **overrides: object) -> Settings:
    path = tmp_path / "sweeperd.toml"
    path.write_text(toml)
    return build_settings(overrides, path, logs_to_tty=False)


def refusal(tmp_path: Path, toml: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, toml)
    return str(caught.value).replace(str(tmp_path / "sweeperd.toml"), "F")


class TestExamples:
    def test_there_are_examples(self) -> None:
        """The configuration page's example and the ConfigMap's are found (the search works)."""
        names = [name for name, _ in toml_examples()]
        assert any(name.startswith("docs/configuration.md") for name in names)
        assert names[-1] == "deploy/kubernetes/configmap.yaml"

    @pytest.mark.parametrize(("where", "toml"), toml_examples(), ids=lambda v: v.split("\n")[0])
    def test_every_example_is_valid_and_loads(self, where: str, toml: str, tmp_path: Path) -> None:
        """Each example parses as TOML and sweeperd's own loader builds it as written: its
        queue tables' values are the queues' settings, and it needs no note."""
        parsed: dict[str, Any] = tomllib.loads(toml)
        settings = load(tmp_path, toml)
        assert settings.notes == (), where
        for name, table in parsed.get("queue", {}).items():
            queue = settings.for_queue(name)
            assert {key: getattr(queue, key) for key in table} == table, where
        listed = [*parsed.get("queues", []), *parsed.get("queue", {})]
        assert [q.name for q in settings.queues] == list(dict.fromkeys(listed)), where

    def test_no_config_hides_in_another_block(self) -> None:
        """A block that looks like a sweeperd config file is tagged toml, so it is tested."""
        for block in blocks():
            if block.lang != "toml":
                assert not CONFIG_LINE.search(block.text), (block.where, block.text)


class TestQueueTables:
    def test_a_list_and_tables_together(self, tmp_path: Path) -> None:
        """`queues = [...]` names the queues; `[queue.<name>]` gives a listed one its own values
        (the documented example, which TOML refused when both were `queues`)."""
        toml = 'queues = ["emails", "reports"]\nlimit = 9\n[queue.reports]\nmax_stalled = 3\n'
        s = load(tmp_path, toml)
        assert s.queues == (
            QueueSettings("emails", 5.0, 1, 9),
            QueueSettings("reports", 5.0, 3, 9),
        )
        assert (s.notes, s.unlisted_tables) == ((), ())

    def test_a_listed_queue_may_have_a_table(self, tmp_path: Path) -> None:
        """A name both listed and given a table is one queue, in the list's place."""
        s = load(tmp_path, 'queues = ["a", "b", "c"]\n[queue.b]\nlimit = 3\n[queue.c]\n')
        assert s.queues == (
            QueueSettings("a", 5.0, 1, 1000),
            QueueSettings("b", 5.0, 1, 3),
            QueueSettings("c", 5.0, 1, 1000),
        )

    def test_tables_alone_name_the_queues(self, tmp_path: Path) -> None:
        """A file without a list names its queues by their tables, as it always did."""
        s = load(tmp_path, "[queue.orders]\n[queue.mail]\ninterval = 10\n", queues=["extra"])
        assert [q.name for q in s.queues] == ["orders", "mail", "extra"]
        assert s.unlisted_tables == ()

    def test_a_table_of_a_queue_the_list_lacks_is_a_typo(self, tmp_path: Path) -> None:
        """With a list, a table for a queue it does not list is refused with the nearest name:
        a typo that would otherwise add a queue and leave the listed one at the default
        budget."""
        toml = 'queues = ["emails"]\n[queue.emial]\nmax_stalled = 3\n'
        assert refusal(tmp_path, toml) == (
            "[queue.emial] in F is for a queue that queues = [...] does not list (did you mean "
            "emails?): fix the table's name, or list the queue (with --discover on, a table may "
            "be for a queue a scan finds)"
        )

    def test_a_flag_may_list_the_table_s_queue(self, tmp_path: Path) -> None:
        """A queue named by --queue may have its table in a file that lists others (once -q X
        with the daemon's file); one neither names is refused, naming both lists."""
        toml = 'queues = ["emails"]\n[queue.reports]\nmax_stalled = 3\n'
        s = load(tmp_path, toml, queues=["reports"])
        assert s.for_queue("reports") == QueueSettings("reports", 5.0, 3, 1000)
        with pytest.raises(ConfigError) as caught:
            load(tmp_path, toml, queues=["report"])
        assert str(caught.value).startswith(
            f"[queue.reports] in {tmp_path / 'sweeperd.toml'} is for a queue that neither "
            "queues = [...] nor --queue lists (did you mean report?): "
        )

    def test_with_discovery_an_unlisted_table_is_kept(self, tmp_path: Path) -> None:
        """With discovery on, a table may be for a queue a scan finds: kept and noted, for
        the daemon to warn about when no scan finds it."""
        toml = 'discover = 30\nqueues = ["emails"]\n[queue.found]\nlimit = 7\n'
        s = load(tmp_path, toml)
        assert s.unlisted_tables == ("found",)
        assert s.for_queue("found") == QueueSettings("found", 5.0, 1, 7)

    def test_old_tables_are_read_with_a_note(self, tmp_path: Path) -> None:
        """A file of `[queues.<name>]` tables (valid TOML, written before) still loads as it
        did, and one note says how to write it now."""
        s = load(tmp_path, "[queues.orders]\n[queues.mail]\ninterval = 10\n")
        assert s.queues == (
            QueueSettings("orders", 5.0, 1, 1000),
            QueueSettings("mail", 10.0, 1, 1000),
        )
        [note] = s.notes
        path = tmp_path / "sweeperd.toml"
        assert note == (
            f"config file {path}: [queues.<name>] tables are read as [queue.<name>]; rename "
            "them [queue.orders], [queue.mail] (queues = [...] is the list of names)"
        )
        assert "notes" not in s.describe()

    @pytest.mark.parametrize(
        ("toml", "expected"),
        [
            (
                "[queue.mail]\nexecutor = 'native'\n",
                "unknown key 'executor' in [queue.mail] in F; known keys: interval, "
                "max_stalled, limit",
            ),
            (
                "[queue.mail]\nlimit = 0\n",
                "limit of [queue.mail] in F must be a whole number "
                "from 1 to 9223372036854775807, not 0",
            ),
            (
                "[queues.mail]\nlimit = 0\n",
                "limit of [queues.mail] in F must be a whole number "
                "from 1 to 9223372036854775807, not 0",
            ),
            ("[queue]\nmail = 3\n", "queue.mail in F must be a table ([queue.mail])"),
            (
                'queue = ["mail"]\n',
                "queue in F must be [queue.<name>] tables; a list of names is queues = [...]",
            ),
            (
                'queues = "mail"\n',
                "queues in F must be a list of names; a queue's own values go in "
                "[queue.<name>] tables",
            ),
            (
                "[queue.mail]\n[queues.mail]\n",
                "queue mail has two tables in F, [queue.mail] and [queues.mail]: keep [queue.mail]",
            ),
            (
                "[queue.'a b']\n",
                "queue name 'a b' in queue in F must be non-empty, without {, } or whitespace",
            ),
        ],
    )
    def test_refused(self, tmp_path: Path, toml: str, expected: str) -> None:
        """A table of the wrong shape or with a bad value is refused, naming it as written."""
        assert refusal(tmp_path, toml) == expected


def old_note(config: Path, *names: str) -> str:
    renamed = ", ".join(f"[queue.{name}]" for name in names)
    return (
        f"config file {config}: [queues.<name>] tables are read as [queue.<name>]; rename them "
        f"{renamed} (queues = [...] is the list of names)"
    )


class TestOldTablesSaid:
    def test_once_applies_them_and_says_so_on_stderr(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """`once` with a [queues.mail] table spends its budget, and one stderr line says how to
        write the table now."""
        config = tmp_path / "sweeperd.toml"
        config.write_text(f'redis_url = "{redis_server.url}"\n[queues.mail]\nmax_stalled = 3\n')
        lease(r, QueueKeys("mail"), b"j", attempts=1, stalled=1, lease_epoch=run_id(r))
        ran = sweeperd("once", "-q", "mail", "--config", str(config), "--json")
        assert ran.code == 0
        assert (ran.json()["recovered"], ran.json()["max_stalled"]) == (["j"], 3)
        assert ran.err_lines == [f"sweeperd: {old_note(config, 'mail')}"]

    def test_run_logs_them_once_per_read_of_the_file(
        self, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """`run` logs config_deprecated once at start, not per tick, and once more per SIGHUP."""
        config = tmp_path / "sweeperd.toml"
        config.write_text("[queues.mail]\n[queues.orders]\n")
        args = ["--config", str(config), "--redis-url", redis_server.url, "--interval", "0.1"]
        with DaemonProcess(tmp_path, *args) as daemon:
            wait_until(lambda: daemon.total("sweeperd_sweeps_total") >= 5, what="five sweeps")
            assert [e["note"] for e in daemon.events("config_deprecated")] == [
                old_note(config, "mail", "orders")
            ]
            assert daemon.process is not None
            daemon.process.send_signal(signal.SIGHUP)
            wait_until(lambda: len(daemon.events("config_deprecated")) == 2, what="a second note")
            assert len(daemon.events("reloaded")) == 1
            assert daemon.events("config_deprecated")[0]["level"] == "warning"
            assert daemon.stop() == 0
