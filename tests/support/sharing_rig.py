"""A replica's queue sharing on a real server, built as the membership tests build it."""

from __future__ import annotations

from sweeperd.constants import ExecutorChoice
from sweeperd.daemon.membership import MembershipStore
from sweeperd.daemon.sharing import Sharing
from sweeperd.fleet.node import Node
from sweeperd.server.connection import connect
from sweeperd.verb.sizing import CallSizer

TTL_S = 3.0


def make_sharing(url: str, member: str, ttl_s: float = TTL_S) -> Sharing:
    node = Node("n:1", connect(url, socket_timeout=2.0), ExecutorChoice.AUTO, CallSizer(0.002))
    store = MembershipStore(node.client, "emq", member, ttl_s)
    return Sharing(node, member, ttl_s, store)
