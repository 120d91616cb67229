"""The fixed vocabulary of failure reasons, and the mapping from an error to one."""

from __future__ import annotations

from enum import StrEnum

import redis


class Reason(StrEnum):
    LANE = "lane"  # a lane row among the expired leases: the verb refuses it
    WRONGTYPE = "wrongtype"  # a row or a queue key of the wrong type
    COUNTER = "counter"  # a stalled or count value HINCRBY would refuse
    ARGUMENTS = "arguments"  # max_stalled, limit or arity refused
    NO_VERB = "no_verb"  # the server does not know EMQ.STALLED.CHECK
    CONNECTION = "connection"  # the server cannot be reached
    AUTH = "auth"  # the server refused the user's credentials (the user missing on that node?)
    TIMEOUT = "timeout"  # the server did not answer in time
    REPLY_LOST = "reply_lost"  # the call was sent whole, the connection broke before its reply
    OOM = "oom"  # maxmemory reached: the verb (deny-oom) refused, nothing written
    NOPERM = "noperm"  # the ACL user may not run a command the sweep needs
    MOVED = "moved"  # a Cluster node serves the queue's slot elsewhere (MOVED): unrun
    MIGRATING = "migrating"  # the queue's slot is migrating (TRYAGAIN, ASK): held, unrun
    CLUSTER_DOWN = "cluster_down"  # the Cluster is down (a primary failed, none took over)
    LOADING = "loading"  # the server is loading its dataset: the call did not run
    TOPOLOGY = "topology"  # the server is not what the options say (a Cluster, a Sentinel)
    OTHER = "other"


REDIRECTS = (Reason.MOVED, Reason.MIGRATING)  # a Cluster sent the call elsewhere, unrun


COUNTER_TEXTS = ("hash value is not an integer", "increment or decrement would overflow")
ARGUMENT_TEXTS = ("must be a positive integer", "wrong number of arguments")
# A server without the verb: its reply to a client, and to a script (Redis 7.0, then Valkey).
NO_VERB_TEXTS = ("unknown command", "Unknown Redis command", "Unknown command called from script")
NOPERM_TEXTS = ("NOPERM", "no permissions to run", "can't run this command or subcommand")


CODES = {  # error codes that name their reason
    "EMQLANE": Reason.LANE,
    "OOM": Reason.OOM,
    "MOVED": Reason.MOVED,
    "ASK": Reason.MIGRATING,
    "TRYAGAIN": Reason.MIGRATING,
    "CLUSTERDOWN": Reason.CLUSTER_DOWN,
    "LOADING": Reason.LOADING,
}


def reason_of_text(text: str) -> Reason:
    """The reason for a server error reply, by its text."""
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


# redis-py drops the code of these error replies and names them by their class instead (its
# status_code, where the version has one, says it too).
STRIPPED_CODES: tuple[tuple[type[redis.RedisError], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.NoPermissionError, "NOPERM"),
    (redis.exceptions.MovedError, "MOVED"),  # an AskError: tested first
    (redis.exceptions.AskError, "ASK"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
)


PIPELINE_ERROR = " of pipeline caused error: "  # redis-py: "Command # 1 (ZCARD k) of pipeline …"


def server_text(exc: redis.RedisError) -> str:
    """The error reply as the server sent it: redis-py strips the `ERR ` code, put it back, and
    heads a pipeline's with the command's place in it, taken off."""
    text = str(exc)
    text = text.partition(PIPELINE_ERROR)[2] or text
    for kind, stripped in STRIPPED_CODES:
        if isinstance(exc, kind):
            return text if text.startswith(stripped) else f"{stripped} {text}"
    code = text.split(" ", 1)[0]
    return text if code.isupper() and code.isalpha() else f"ERR {text}"


def reason_of(exc: BaseException) -> Reason:
    """The reason for any failure of one call."""
    if isinstance(exc, SweepError):
        return exc.reason
    if isinstance(exc, redis.TimeoutError):
        return Reason.TIMEOUT
    if isinstance(exc, redis.exceptions.BusyLoadingError):  # a ConnectionError: the call never ran
        return Reason.LOADING
    if isinstance(exc, ReplyLost):
        return Reason.REPLY_LOST
    if isinstance(exc, redis.AuthenticationError):  # a ConnectionError: tested first
        return Reason.AUTH
    if isinstance(exc, redis.ConnectionError):
        return Reason.CONNECTION
    if isinstance(exc, redis.ResponseError):
        return reason_of_text(server_text(exc))
    return Reason.OTHER


class ReplyLost(redis.ConnectionError):
    """The call was written whole and the connection broke before its reply: it may have run.

    Never sent again by itself: a sweep that ran and is sent again would count its leases under
    the second call's reply, or find them gone and count nothing."""


class SweepError(Exception):
    """A call that failed, with its reason and the server's (or client's) text."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @classmethod
    def of(cls, exc: BaseException) -> SweepError:
        if isinstance(exc, SweepError):
            return exc
        if isinstance(exc, redis.ResponseError | redis.exceptions.BusyLoadingError):
            return cls(reason_of(exc), server_text(exc))
        return cls(reason_of(exc), str(exc) or type(exc).__name__)
