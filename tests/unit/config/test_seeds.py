"""A Cluster's seeds: several URLs from the flag repeated, the env var's commas or the file's
list; each one checked against the first; a host name read as every address it has."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sweeperd.config.coercers import Given, redis_urls
from sweeperd.server.connection import Connection, Topology
from sweeperd.server.topology import ClusterSlots, resolved
from tests.support.built_settings import build, refusal
from tests.support.invoke import sweeperd

FIRST = "redis://sweeperd:pw@10.0.0.1:6379/0"
SECOND = "redis://sweeperd:pw@10.0.0.2:6380/0"
WHERE = "--redis-url (SWEEPERD_REDIS_URL)"


@pytest.fixture(autouse=True)
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)


class TestGiven:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (FIRST, (FIRST,)),
            (f"{FIRST},{SECOND}", (FIRST, SECOND)),
            (f"{FIRST}, {SECOND} {FIRST}", (FIRST, SECOND)),
            ([FIRST, SECOND], (FIRST, SECOND)),
            (
                "redis://u:a,b@h:1/0,redis://u:a,b@g:2/0",
                ("redis://u:a,b@h:1/0", "redis://u:a,b@g:2/0"),
            ),
        ],
    )
    def test_split(self, value: object, expected: tuple[str, ...]) -> None:
        """Commas and spaces separate URLs only before a scheme: a comma in a password stays;
        the same URL given twice is one seed."""
        assert redis_urls(Given(value, WHERE, True)) == expected

    def test_the_file_list(self, tmp_path: Path) -> None:
        """redis_url as a TOML list: the first URL and the other seeds' addresses."""
        s = build(tmp_path, f'redis_url = ["{FIRST}", "{SECOND}"]\ncluster = true\n', queues=["q"])
        assert s.connection.url == FIRST
        assert s.connection.seeds == (("10.0.0.1", 6379), ("10.0.0.2", 6380))
        assert s.describe()["seeds"] == "10.0.0.1:6379, 10.0.0.2:6380"

    def test_the_flag_repeated(self) -> None:
        """--redis-url given twice is two seeds, not the last one (acl checks the settings)."""
        ran = sweeperd("acl", "--user", "u", "--cluster", "--redis-url", FIRST, "--redis-url", "x")
        assert (ran.code, ran.err) == (
            2,
            f"sweeperd: {WHERE}: the scheme must be redis://, rediss:// or unix://, in 'x'\n",
        )


class TestRefused:
    def test_without_cluster(self, tmp_path: Path) -> None:
        """Several URLs without --cluster: refused, naming the fix."""
        assert refusal(tmp_path, queues=["q"], redis_url=[FIRST, SECOND]) == (
            "several --redis-url are a Cluster's seeds: add --cluster, or give one URL"
        )

    @pytest.mark.parametrize(
        "other",
        [
            "redis://other:pw@10.0.0.2:6379/0",
            "rediss://sweeperd:pw@10.0.0.2:6379/0",
            "redis://sweeperd:pw@10.0.0.2:6379/1",
        ],
    )
    def test_another_user_scheme_or_db(self, tmp_path: Path, other: str) -> None:
        """A seed that differs in more than its host and port is refused, its password hidden."""
        message = refusal(tmp_path, queues=["q"], cluster=True, redis_url=[FIRST, other])
        assert message.startswith(f"{WHERE}: the seeds differ in more than their host and port")
        assert "pw" not in message

    def test_an_empty_one(self, tmp_path: Path) -> None:
        """--redis-url '' among others is refused as empty."""
        message = refusal(tmp_path, queues=["q"], cluster=True, redis_url=[FIRST, ""])
        assert message.startswith(f"{WHERE} is empty")


class TestResolved:
    def test_a_name_is_every_address(self) -> None:
        """A host name stands for every address it resolves to."""
        found = {a for *_, (a, *_rest) in socket.getaddrinfo("localhost", 7000)}
        assert set(resolved(("localhost", 7000))) == {(a, 7000) for a in found}

    @pytest.mark.parametrize(
        ("seed", "by_name"),
        [
            (("127.0.0.1", 7000), False),
            (("localhost", 7000), True),
            (("no-such.invalid", 1), False),
        ],
    )
    def test_itself(self, seed: tuple[str, int], by_name: bool) -> None:
        """An address, a TLS host name, a name that does not resolve: the seed itself."""
        assert resolved(seed, by_name=by_name) == [seed]

    def test_the_seeds_asked(self) -> None:
        """The seeds in order, the URL's first, each name as its addresses."""
        topology = Topology(cluster=True, seeds=(("localhost", 7001), ("10.0.0.9", 7002)))
        connection = Connection.checked("redis://127.0.0.1:7000/0", None, 1.0, topology=topology)
        asked = list(ClusterSlots(connection)._candidates())
        assert asked[0] == ("127.0.0.1", 7000) and asked[-1] == ("10.0.0.9", 7002)
        assert ("127.0.0.1", 7001) in asked
