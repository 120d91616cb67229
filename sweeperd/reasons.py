"""The fixed vocabulary of failure reasons, and the table that maps an error to one."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

import redis


class Reason(StrEnum):
    """Why one call failed, as its `reason` label and log field say:

    lane          a lane row among the expired leases: the verb refuses it
    wrongtype     a row or a queue key of the wrong type
    counter       a stalled or count value HINCRBY would refuse
    arguments     max_stalled, limit or arity refused
    no_verb       the server does not know EMQ.STALLED.CHECK
    connection    the server cannot be reached
    auth          the server refused the user's credentials (the user missing on that node?)
    timeout       the server did not answer in time
    reply_lost    the call was sent whole, the connection broke before its reply
    oom           maxmemory reached: the verb (deny-oom) refused, nothing written
    noperm        the ACL user may not run a command the sweep needs
    moved         a Cluster node serves the queue's slot elsewhere (MOVED): unrun
    migrating     the queue's slot is migrating (TRYAGAIN, ASK): held, unrun
    cluster_down  the Cluster is down (a primary failed, none took over)
    loading       the server is loading its dataset: the call did not run
    topology      the server is not what the options say (a Cluster, a Sentinel)
    other         anything else
    """

    LANE = "lane"
    WRONGTYPE = "wrongtype"
    COUNTER = "counter"
    ARGUMENTS = "arguments"
    NO_VERB = "no_verb"
    CONNECTION = "connection"
    AUTH = "auth"
    TIMEOUT = "timeout"
    REPLY_LOST = "reply_lost"
    OOM = "oom"
    NOPERM = "noperm"
    MOVED = "moved"
    MIGRATING = "migrating"
    CLUSTER_DOWN = "cluster_down"
    LOADING = "loading"
    TOPOLOGY = "topology"
    OTHER = "other"


REDIRECTS = (Reason.MOVED, Reason.MIGRATING)
"""The reasons of a call a Cluster sent elsewhere, unrun."""

COUNTER_TEXTS = ("hash value is not an integer", "increment or decrement would overflow")
ARGUMENT_TEXTS = ("must be a positive integer", "wrong number of arguments")
NO_VERB_TEXTS = ("unknown command", "Unknown Redis command", "Unknown command called from script")
"""A server without the verb: its reply to a client, and to a script (Redis 7.0, then Valkey)."""
NOPERM_TEXTS = ("NOPERM", "no permissions to run", "can't run this command or subcommand")


CODES = {
    "EMQLANE": Reason.LANE,
    "OOM": Reason.OOM,
    "MOVED": Reason.MOVED,
    "ASK": Reason.MIGRATING,
    "TRYAGAIN": Reason.MIGRATING,
    "CLUSTERDOWN": Reason.CLUSTER_DOWN,
    "LOADING": Reason.LOADING,
}
"""The error codes that name their reason, as the server's reply starts."""


def reason_of_text(text: str) -> Reason:
    """Return the reason for a server's error reply, read from its text."""
    coded = CODES.get(text.split(" ", 1)[0])
    if coded is not None:
        return coded
    if any(t in text for t in NOPERM_TEXTS):
        return Reason.NOPERM
    if text.startswith("WRONGTYPE"):
        return Reason.WRONGTYPE
    if any(t in text for t in COUNTER_TEXTS):
        return Reason.COUNTER
    if any(t in text for t in ARGUMENT_TEXTS):
        return Reason.ARGUMENTS
    if any(t in text for t in NO_VERB_TEXTS):
        return Reason.NO_VERB
    return Reason.OTHER


PIPELINE_ERROR = " of pipeline caused error: "
"""How redis-py heads a pipeline's error: "Command # 1 (ZCARD k) of pipeline caused error: "."""


def server_text(exc: redis.RedisError) -> str:
    """Return the error reply as the server sent it: the code redis-py strips (`ERR `, or the
    one its class names) put back, and a pipeline's heading taken off."""
    text = str(exc)
    text = text.partition(PIPELINE_ERROR)[2] or text
    stripped = next((row.code for row in BY_CLASS if row.code and isinstance(exc, row.kind)), None)
    if stripped is not None:
        return text if text.startswith(stripped) else f"{stripped} {text}"
    code = text.split(" ", 1)[0]
    return text if code.isupper() and code.isalpha() else f"ERR {text}"


def reason_of(exc: BaseException) -> Reason:
    """Return the reason for any failure of one call: a SweepError's own, its class's in
    BY_CLASS, or for any other error reply the one its text names."""
    if isinstance(exc, SweepError):
        return exc.reason
    row = next((row for row in BY_CLASS if isinstance(exc, row.kind)), None)
    if row is not None:
        return row.reason
    if isinstance(exc, redis.ResponseError):
        return reason_of_text(server_text(exc))
    return Reason.OTHER


class ReplyLost(redis.ConnectionError):
    """The call was written whole and the connection broke before its reply: it may have run.

    Never sent again by itself: a sweep that ran and is sent again would count its leases under
    the second call's reply, or find them gone and count nothing."""


class ByClass(NamedTuple):
    """An error class redis-py raises, the reason it means and the reply code it strips."""

    kind: type[BaseException]
    reason: Reason
    code: str = ""


BY_CLASS = (
    ByClass(redis.TimeoutError, Reason.TIMEOUT),
    ByClass(redis.exceptions.OutOfMemoryError, Reason.OOM, "OOM"),
    ByClass(redis.exceptions.NoPermissionError, Reason.NOPERM, "NOPERM"),
    ByClass(redis.exceptions.MovedError, Reason.MOVED, "MOVED"),
    ByClass(redis.exceptions.AskError, Reason.MIGRATING, "ASK"),
    ByClass(redis.exceptions.TryAgainError, Reason.MIGRATING, "TRYAGAIN"),
    ByClass(redis.exceptions.ClusterDownError, Reason.CLUSTER_DOWN, "CLUSTERDOWN"),
    ByClass(redis.exceptions.BusyLoadingError, Reason.LOADING, "LOADING"),
    ByClass(ReplyLost, Reason.REPLY_LOST),
    ByClass(redis.AuthenticationError, Reason.AUTH),
    ByClass(redis.ConnectionError, Reason.CONNECTION),
)
"""Each error class redis-py raises for a reason, a subclass before its base (MovedError is an
AskError; BusyLoadingError, ReplyLost and AuthenticationError are ConnectionErrors): the first
row an error is an instance of names its reason."""


class SweepError(Exception):
    """A call that failed, with its reason and the server's (or client's) text."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @classmethod
    def of(cls, exc: BaseException) -> SweepError:
        """Return the SweepError for any failure of one call, with the server's reply as its
        message when the server refused it."""
        if isinstance(exc, SweepError):
            return exc
        if isinstance(exc, redis.ResponseError | redis.exceptions.BusyLoadingError):
            return cls(reason_of(exc), server_text(exc))
        return cls(reason_of(exc), str(exc) or type(exc).__name__)
