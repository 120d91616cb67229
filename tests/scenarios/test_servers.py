"""What differs between Redis 7.0 and Valkey 9.1 where sweeperd meets it, shown on both."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, reason_of_text, server_text
from sweeperd.server.connection import connect
from sweeperd.server.serverinfo import parse_info, read_server_info
from sweeperd.server.wire import no_retry
from sweeperd.verb.executors import NATIVE
from sweeperd.verb.replies import Call, SweepReply
from sweeperd.verb.rounds import sweep_round
from tests.support.helpers import lease
from tests.support.servers import RedisServer

A = QueueKeys("a")
LOADED_KEYS = 3_000  # loaded a millisecond each at the restart
TWO_TIMES = """
local before = redis.call('TIME')
for _ = 1, 3000000 do end
local after = redis.call('TIME')
return {before[1] * 1000000 + before[2], after[1] * 1000000 + after[2],
        rawget(_G, 'os') and 1 or 0}
"""


class TestScriptClock:
    def test_time_stands_still_inside_a_valkey_script(
        self, r: redis.Redis, server_kind: str
    ) -> None:
        """Two TIMEs around a busy loop in one script: apart on Redis 7.0, equal on Valkey 9
        (the script's start, every time); Valkey's scripts have os.clock, Redis 7.0's no os."""
        before, after, has_os = r.eval(TWO_TIMES, 0)
        assert (after > before, has_os) == {"redis": (True, 0), "valkey": (False, 1)}[server_kind]

    def test_the_sweep_measures_its_server_time_on_both(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A sweep that takes 300 leases reports a server time above 0 (on Valkey by os.clock):
        the drain sizes its calls by it."""
        for n in range(300):
            lease(r, A, b"j%03d" % n, attempts="1")
        with connect(redis_server.url, socket_timeout=10) as c:
            [result] = sweep_round(c, NATIVE, [Call(A, 1000, 300)])
        assert isinstance(result.reply, SweepReply), result.reply
        assert result.depths is not None and result.depths.server_us > 0


class TestErrorTexts:
    def test_a_script_calling_an_unknown_command(
        self, r_plain: redis.Redis, server_kind: str
    ) -> None:
        """A script calling the verb on a server without it: Redis 7.0 says 'Unknown Redis
        command called from script', Valkey 9 'Unknown command called from script'; both are
        reason no_verb."""
        with pytest.raises(redis.ResponseError) as refused:
            r_plain.eval("return redis.call('EMQ.STALLED.CHECK')", 0)
        text = server_text(refused.value)
        said = {"redis": "Unknown Redis command", "valkey": "Unknown command"}[server_kind]
        assert text.startswith(f"ERR {said} called from script"), text
        assert reason_of_text(text) is Reason.NO_VERB

    def test_a_loading_server_names_itself(self, server_kind: str, tmp_path: Path) -> None:
        """While it loads its dataset at start a server answers -LOADING naming itself ('Redis is
        loading…', 'Valkey is loading…'): redis-py raises BusyLoadingError for both, by the
        code, so sweeperd reads the code and never the name."""
        server = RedisServer(tmp_path, kind=server_kind)
        with server, server.client() as c:
            c.execute_command("DEBUG", "POPULATE", LOADED_KEYS)
            c.save()
        server.extra = {
            "key-load-delay": "1000",  # µs per key loaded: seconds of loading
            "loading-process-events-interval-bytes": "1024",  # clients answered meanwhile
        }
        server.process = subprocess.Popen(server.argv(), stdout=subprocess.DEVNULL)
        try:
            with server.client(retry=no_retry()) as c:  # redis-py would wait LOADING out
                seen = loading_reply(c)
        finally:
            server.stop()
        name = {"redis": "Redis", "valkey": "Valkey"}[server_kind]
        assert seen == f"{name} is loading the dataset in memory"


def loading_reply(client: redis.Redis) -> str:
    """The text of the first LOADING reply to a GET sent again and again (10 s at the most)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.get("k1")
        except redis.BusyLoadingError as exc:
            return str(exc)
        except redis.ConnectionError:
            pass  # not listening yet
        time.sleep(0.001)
    raise AssertionError("the server never answered LOADING")


class TestServerInfo:
    def test_the_version_read_is_the_servers_own(
        self, redis_server: RedisServer, server_kind: str
    ) -> None:
        """Valkey's INFO says server_name:valkey and valkey_version 9.1 beside redis_version
        7.2.4 (the Redis it stays compatible with); the version sweeperd reads is 9.1's there,
        7.0's on Redis."""
        with connect(redis_server.url, socket_timeout=10) as c:
            fields = parse_info(c.execute_command("INFO", "server"))
            version = read_server_info(c).version
        seen = (fields.get("server_name"), fields["redis_version"][:3], version[:3])
        assert (
            seen == {"redis": (None, "7.0", "7.0"), "valkey": ("valkey", "7.2", "9.1")}[server_kind]
        )
