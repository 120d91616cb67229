"""Shared fixtures: real servers of each kind the run asks for (redis, valkey), one per session,
flushed before each test, each executor on its server, a Cluster and certificates per test module
that asks; the Hypothesis profile."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import settings

from sweeperd.verb.executors import NATIVE, SCRIPT
from tests.support.certs import Pki, make_pki
from tests.support.helpers import EXAMPLES
from tests.support.servers import RedisServer, selected_kinds
from tests.support.targets import Target
from tests.support.topologies import Cluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "only_on(kind, reason=...): a test meaningful on one server kind only, and why",
    )
    try:
        selected_kinds()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that reaches a server runs once per server kind (only_on narrows it)."""
    if "server_kind" not in metafunc.fixturenames:
        return
    kinds = selected_kinds()
    only = metafunc.definition.get_closest_marker("only_on")
    if only is not None:
        if not only.kwargs.get("reason"):
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: only_on needs a reason=")
        kinds = tuple(kind for kind in kinds if kind == only.args[0])
    metafunc.parametrize("server_kind", kinds, indirect=True, scope="session")


# Hypothesis examples a property (test_differential.py's main one; the binary-id one a tenth):
# the full count in CI, where .ci/run sets HYPOTHESIS_PROFILE=ci, a few hundred elsewhere.
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
settings.register_profile("ci", settings.get_profile("ci"), max_examples=2000)
settings.register_profile("dev", max_examples=300)
settings.load_profile(PROFILE)


@pytest.fixture(scope="session")
def server_kind(request: pytest.FixtureRequest) -> str:
    """The server this test runs on: `redis` (Debian's redis-server) or `valkey` (the wheel's)."""
    kind: str = request.param
    return kind


@pytest.fixture(scope="session")
def redis_server(
    server_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """A server with the reference module loaded."""
    workdir = tmp_path_factory.mktemp(f"{server_kind}-module")
    with RedisServer(workdir, kind=server_kind) as server:
        yield server


@pytest.fixture(scope="session")
def plain_server(
    server_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """A server without the module, as a managed service would be."""
    workdir = tmp_path_factory.mktemp(f"{server_kind}-plain")
    with RedisServer(workdir, kind=server_kind, module=None) as server:
        yield server


def _emptied(server: RedisServer) -> Iterator[redis.Redis]:
    with server.client() as client:
        client.flushall()
        client.script_flush()
        yield client


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client to the module server, its keyspace and script cache empty."""
    yield from _emptied(redis_server)


@pytest.fixture
def r_plain(plain_server: RedisServer) -> Iterator[redis.Redis]:
    """A client to the server without the module, its keyspace and script cache empty."""
    yield from _emptied(plain_server)


@pytest.fixture(params=["native", "script"])
def on(request: pytest.FixtureRequest, server_kind: str) -> Target:
    """The module server with the native executor, or the plain one with the Lua port, of
    each server kind."""
    if request.param == "native":
        return Target(request.getfixturevalue("redis_server"), request.getfixturevalue("r"), NATIVE)
    server, client = request.getfixturevalue("plain_server"), request.getfixturevalue("r_plain")
    return Target(server, client, SCRIPT)


@pytest.fixture(scope="module")
def cluster(
    server_kind: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """A Cluster (3 primaries, 3 replicas, the module on each) for one test module's tests."""
    module = request.module.__name__.rpartition(".")[2]
    with Cluster(tmp_path_factory.mktemp(f"{server_kind}-{module}"), kind=server_kind) as made:
        yield made


@pytest.fixture
def fresh(cluster: Cluster) -> Cluster:
    """The module's cluster whole (a node an earlier test left down is back), settled and
    empty."""
    cluster.heal()
    cluster.flush()
    return cluster


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client's, for one module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def pytest_report_header() -> str:
    return (
        f"hypothesis profile {PROFILE!r}: {settings().max_examples} examples (HYPOTHESIS_PROFILE)"
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The differential examples run, summed over every report (every xdist worker's too)."""
    examples = sum(
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "teardown"
        for name, value in getattr(report, "user_properties", ())
        if name == EXAMPLES
    )
    if examples:
        terminalreporter.write_line(
            f"differential: {examples} examples run (model = module = Lua), "
            f"hypothesis profile {PROFILE!r}"
        )
