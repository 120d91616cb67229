"""members_changed on a real server names the replicas that joined and left, not just counts."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import redis
from structlog.testing import capture_logs

from sweeperd.logs import ID_CAP
from tests.support.servers import RedisServer
from tests.support.sharing_rig import make_sharing


def changes(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "members_changed"]


class TestMembersNamed:
    def test_who_joined_and_who_left(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """r1 sees r2 and r3 join, then r2 leave: each change names them, with the counts."""
        one, two, three = (make_sharing(redis_server.url, f"r{n}") for n in (1, 2, 3))
        with capture_logs() as logs:
            one.refresh(0.0)
            two.refresh(0.0)
            three.refresh(0.0)
            one.refresh(1.0)
            two.leave()
            one.refresh(2.0)
        seen = [
            {k: e[k] for k in ("members", "joined", "left", "joined_ids", "left_ids")}
            for e in changes(logs)
            if e.get("member") == "r1"
        ]
        assert seen == [
            {"members": 1, "joined": 1, "left": 0, "joined_ids": ["r1"], "left_ids": []},
            {"members": 3, "joined": 2, "left": 0, "joined_ids": ["r2", "r3"], "left_ids": []},
            {"members": 2, "joined": 0, "left": 1, "joined_ids": [], "left_ids": ["r2"]},
        ]

    def test_long_lists_are_capped(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A crowd joining at once is named up to the cap, with how many more."""
        crowd = [make_sharing(redis_server.url, f"m{n:02}") for n in range(ID_CAP + 5)]
        for member in crowd:
            member.refresh(0.0)
        watcher = make_sharing(redis_server.url, "w")
        with capture_logs() as logs:
            watcher.refresh(0.0)
        [change] = changes(logs)
        assert change["joined"] == ID_CAP + 6
        assert change["joined_ids"] == [
            *(f"m{n:02}" for n in range(ID_CAP)),
            "…(+6 more)",
        ]
