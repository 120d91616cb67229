"""What went wrong talking to the server, as `once` and `inspect` say it: one line, an exit code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from redis.exceptions import InvalidResponse, NoPermissionError

from sweeperd.config.options import OPTIONS
from sweeperd.constants import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE
from sweeperd.reasons import (
    PIPELINE_ERROR,
    Reason,
    ReplyLost,
    SweepError,
    reason_of_text,
    server_text,
)
from sweeperd.server.connection import Connection
from sweeperd.server.denied import DEFAULT_USER, USERS_SAVED, denial
from sweeperd.server.tls import mismatch
from sweeperd.server.topology import NoPrimary, NoSeedAnswered, node_of

# Exit 3: the server cannot be reached, cannot serve now, or is not what the options say.
# (MOVED is a refusal, exit 1: the node answered, sending the queue elsewhere, nothing ran.)
UNREACHABLE_REASONS = (
    Reason.CONNECTION,
    Reason.TIMEOUT,
    Reason.REPLY_LOST,
    Reason.LOADING,
    Reason.CLUSTER_DOWN,
    Reason.TOPOLOGY,
)
# Replies that say the server is not where or how the call can run: their reason says it best.
NOT_SERVED = (
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
)
# In what ssl and redis-py say of a failed handshake; NOPERM's text once redis-py has dropped the
# code.
TLS_TEXTS = ("SSL", "TLS", "certificate")
PERMISSION_TEXT = "no permissions to run"


@dataclass(frozen=True)
class Failure:
    exit_code: int
    # A reasons.Reason, or usage, auth, protocol; the message is one line, credentials removed.
    reason: str
    message: str


def server_said(exc: redis.RedisError) -> str:
    """Return what the server said, without the command redis-py names a failed pipeline by."""
    text = str(exc)
    return text.partition(PIPELINE_ERROR)[2] or text


def _one_line(text: object) -> str:
    return " ".join(str(text).split()).rstrip(".")


def _auth(exc: redis.AuthenticationError, connection: Connection, node: str) -> Failure:
    """Return the failure of an authentication refused, on the node that refused it, with its
    fixes."""
    if not connection.has_password:
        password_file = OPTIONS["redis_password_file"].where
        return Failure(
            EXIT_REFUSED, "auth", f"{node}: the server needs a password ({password_file})"
        )
    return Failure(EXIT_REFUSED, "auth", f"{node}: {auth_refused(_one_line(exc), connection)}")


def auth_refused(text: str, connection: Connection) -> str:
    """Return what a node that refused the user's credentials means, and the two fixes."""
    user = connection.user
    missing = (
        f"the user {user} may be missing there: ACL users live on each node and are lost at "
        f"restart unless saved ({USERS_SAVED}); "
        if user != DEFAULT_USER
        else ""
    )
    return (
        f"authentication failed as {user} ({text}); {missing}check "
        f"{OPTIONS['redis_password_file'].where} and the URL's user"
    )


def _no_seed(exc: NoSeedAnswered, connection: Connection) -> Failure:
    """Say that no seed of the Cluster answered, each one with its error: a refused
    authentication is the user's to fix (exit 1), anything else a Cluster out of reach (exit 3)."""
    refused = exc.refused_auth
    if refused and connection.has_password:
        why = auth_refused("invalid username-password pair", connection)
        return Failure(EXIT_REFUSED, "auth", f"{', '.join(refused)}: {why}; {_one_line(exc)}")
    if refused:
        password_file = OPTIONS["redis_password_file"].where
        said = f"{', '.join(refused)}: the server needs a password ({password_file})"
        return Failure(EXIT_REFUSED, "auth", f"{said}; {_one_line(exc)}")
    return Failure(EXIT_UNREACHABLE, str(Reason.CONNECTION), _one_line(exc))


def loading(node: str, said: str, refusal: str = "") -> str:
    """Return a server still loading its dataset: which, what it said, what was refused, the fix."""
    refused = f": {refusal};" if refusal else ":"
    return f"{node} is loading its dataset ({said}){refused} run it again once it has loaded"


# A message that says how to grant the command already.
PERMISSION_ADVICE = "ACL SETUSER"


def _permission(text: str, connection: Connection, node: str) -> Failure:
    """Return the failure of a command or key the ACL user lacks: named, with the rule that
    grants it, on the node that refused it when that is not the URL's (ACL users live on each
    node)."""
    at = f"{node}: " if node != connection.node and not text.startswith(f"{node}: ") else ""
    # Named where it was refused: said once is enough.
    if PERMISSION_ADVICE in text:
        return Failure(EXIT_REFUSED, str(Reason.NOPERM), at + _one_line(text))
    said = _one_line(text).removeprefix("ERR ").removeprefix("NOPERM ")
    return Failure(EXIT_REFUSED, str(Reason.NOPERM), at + denial(said, connection.user))


def _unreachable(exc: redis.ConnectionError, connection: Connection, where: str) -> Failure:
    text = _one_line(exc)
    if isinstance(exc, ReplyLost):
        return Failure(
            EXIT_UNREACHABLE,
            str(Reason.REPLY_LOST),
            f"{connection.node}: the connection broke after the call was sent ({text}); it may "
            "have run: see `sweeperd inspect` before sending it again",
        )
    # Every seed's answer: no one node is the URL's.
    if isinstance(exc, NoSeedAnswered):
        return _no_seed(exc, connection)
    # The Sentinels' answers: the URL's host is not used.
    if isinstance(exc, NoPrimary):
        return Failure(EXIT_UNREACHABLE, str(Reason.CONNECTION), text)
    if connection.url.startswith("rediss://") and any(t in text for t in TLS_TEXTS):
        files = ", ".join(OPTIONS[k].flag_name for k in connection.tls.by_key())
        return Failure(
            EXIT_UNREACHABLE,
            str(Reason.CONNECTION),
            f"TLS with {connection.shown_url} failed: {text}; check {files} and the URL's host",
        )
    said = f"cannot reach {where}: {text}{_tls_hint(connection, exc)}"
    return Failure(EXIT_UNREACHABLE, str(Reason.CONNECTION), said)


def _tls_hint(connection: Connection, exc: BaseException) -> str:
    """ "; the server may not speak TLS ..." where the URL's TLS may be the server's mismatch."""
    hint = mismatch(connection.url.partition("://")[0], exc)
    return f"; {hint}" if hint else ""


def _response(exc: redis.ResponseError, connection: Connection, node: str) -> Failure:
    raw = str(exc)
    # A pipeline's error names the command; the server's own text does not.
    answer = server_text(exc)
    text = _one_line(raw if PIPELINE_ERROR in raw else answer)
    if isinstance(exc, NoPermissionError):
        return _permission(str(exc), connection, node)
    if "DB index is out of range" in text:
        return Failure(
            EXIT_USAGE,
            "usage",
            f"{OPTIONS['redis_url'].where}: the db is out of range for {connection.node} "
            f"({text}), in {connection.shown_url!r}",
        )
    return Failure(EXIT_REFUSED, str(reason_of_text(answer)), text)


class AtNode(redis.RedisError):
    """An error met on the primary that holds the queue: in a Cluster or behind Sentinel it is
    not the URL's server, and the line names it."""

    def __init__(self, node: str, error: redis.RedisError | SweepError) -> None:
        super().__init__(str(error))
        self.node = node
        self.error = error


@contextmanager
def at_node(client: redis.Redis) -> Iterator[None]:
    """Yield the errors of the block's calls on `client` said as that node's."""
    try:
        yield
    except (redis.RedisError, SweepError) as exc:
        raise AtNode(node_of(client), exc) from exc


def failure_of(exc: BaseException, connection: Connection) -> Failure:
    """Return the exit code, reason and message for an error from the server or the client."""
    node = connection.node
    if isinstance(exc, AtNode):
        node, exc = exc.node, exc.error
    # What the line names.
    where = connection.shown_url if node == connection.node else node
    # BusyLoadingError is a ConnectionError: tested first.
    if isinstance(exc, NOT_SERVED):
        exc = SweepError.of(exc)
    # A ConnectionError: tested first.
    if isinstance(exc, redis.AuthenticationError):
        return _auth(exc, connection, node)
    if isinstance(exc, redis.TimeoutError):
        return Failure(
            EXIT_UNREACHABLE,
            str(Reason.TIMEOUT),
            f"{where} did not answer within {connection.socket_timeout:g}s "
            f"({OPTIONS['socket_timeout'].where}){_tls_hint(connection, exc)}",
        )
    if isinstance(exc, redis.ConnectionError):
        return _unreachable(exc, connection, where)
    if isinstance(exc, InvalidResponse):
        return Failure(
            EXIT_UNREACHABLE,
            "protocol",
            f"{connection.node} does not answer as a Redis server ({_one_line(exc)}): "
            f"check the port of {OPTIONS['redis_url'].where}",
        )
    if isinstance(exc, redis.ResponseError):
        return _response(exc, connection, node)
    if isinstance(exc, SweepError):
        code = EXIT_UNREACHABLE if exc.reason in UNREACHABLE_REASONS else EXIT_REFUSED
        if PERMISSION_TEXT in exc.message or exc.reason is Reason.NOPERM:
            return _permission(exc.message, connection, node)
        if exc.reason is Reason.LOADING and exc.message.startswith("LOADING "):
            return Failure(code, str(exc.reason), loading(node, _one_line(exc.message)))
        return Failure(code, str(exc.reason), _one_line(exc.message))
    return Failure(EXIT_REFUSED, str(Reason.OTHER), _one_line(exc) or type(exc).__name__)
