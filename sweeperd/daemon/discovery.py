"""Finding queues: every `<root>:{<queue>}:active` key on each primary, by SCAN (server/scan.py),
what each primary's last scan found kept while another one's fails."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import redis
import structlog

from sweeperd.fleet.primary import Primary
from sweeperd.server.connection import UNREACHABLE
from sweeperd.server.denied import denial, user_of
from sweeperd.server.scan import find_queues

log = structlog.get_logger("sweeperd.daemon")


class Discovery:
    """Every primary scanned; one whose scan failed keeps its last list."""

    def __init__(
        self,
        nodes: Callable[[], Sequence[Primary]],
        root: str,
        *,
        refresh_layout: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nodes = nodes
        self._root = root
        self._refresh_layout = refresh_layout
        self._clock = clock
        self._found_on: dict[str, set[str]] = {}

    def scan(self) -> set[str]:
        """Return the queues every primary holds, as far as their last scans tell."""
        nodes = self._nodes()
        for node in nodes:
            self.scan_on(node)
        names = {node.name for node in nodes}
        self._found_on = {name: found for name, found in self._found_on.items() if name in names}
        return set().union(*self._found_on.values())

    def scan_on(self, node: Primary) -> None:
        try:
            self._found_on[node.name] = find_queues(node.client, self._root)
        except UNREACHABLE as exc:
            node.unreachable(exc)
            self._refresh_layout()
            return
        except redis.exceptions.NoPermissionError as exc:
            log.warning(
                "discovery_failed", node=node.name, error=denial(str(exc), user_of(node.client))
            )
            return
        except redis.RedisError as exc:
            log.warning("discovery_failed", node=node.name, error=str(exc))
            return
        node.answered(self._clock())
