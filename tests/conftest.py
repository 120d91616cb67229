"""Shared fixtures: real redis-servers, one per session, flushed before each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server with the reference module loaded."""
    with RedisServer(tmp_path_factory.mktemp("redis-module")) as server:
        yield server


@pytest.fixture(scope="session")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server without the module, as a managed service would be."""
    with RedisServer(tmp_path_factory.mktemp("redis-plain"), module=None) as server:
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


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
