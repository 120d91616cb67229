"""What an ACL refusal (NOPERM) says: the command the user may not run, or the key it may not
touch, and the rule that grants it, in one line."""

from __future__ import annotations

import re

import redis

from sweeperd.reasons import Reason, SweepError
from sweeperd.server.scan import glob_escape

ACL_PAGE = "docs/security.md#the-acl-user"
USERS_PAGE = "docs/security.md#acl-users-live-on-each-node"
USERS_SAVED = f"ACL SAVE with an aclfile, or user lines in the config file: {USERS_PAGE}"
# The user a connection without a user name authenticates as.
DEFAULT_USER = "default"
# The command a refusal names: Redis 7.0 "this user has no permissions to run the 'zcount'
# command", Valkey "User u has no permissions to run the 'cluster|slots' command".
NAMED = re.compile(r"run the '([^']+)' command")
# redis-py names a pipelined command that failed: "Command # 2 (ZCARD emq:{q}:active) of ...".
PIPELINED = re.compile(r"Command # \d+ \((\S+) ?([^ )]*)[^)]*\) of pipeline caused error: ")


def user_of(client: redis.Redis) -> str:
    """Return the ACL user a client authenticates as: the URL's user, or the default user."""
    return str(client.connection_pool.connection_kwargs.get("username") or DEFAULT_USER)


def grant(user: str, command: str) -> str:
    """Return the rule that lets `user` run `command` (a subcommand as `container|sub`)."""
    return f"ACL SETUSER {user} +{command.lower()}"


def shown(command: str) -> str:
    """Return a command as an operator types it: CLUSTER SLOTS for cluster|slots."""
    return command.upper().replace("|", " ")


def may_not_run(user: str, command: str, said: str, *, why: str = "") -> str:
    """Return the line for a command the user lacks: which, what sent it (`why`), the rule to
    add."""
    return (
        f"the ACL user {user} may not run {shown(command)}{why} ({said}): grant it with "
        f"{grant(user, command)} ({ACL_PAGE})"
    )


def denial(text: str, user: str, *, where: str = "", why: str = "") -> str:
    """Return a NOPERM reply's text as its one line: the command refused and the rule that grants
    it, or the key refused and the key pattern to grant; `where` names the node that refused."""
    said = " ".join(text.split()).rstrip(".")
    head = f"{where}: " if where else ""
    pipelined = PIPELINED.search(said)
    command, key = (pipelined.group(1), pipelined.group(2)) if pipelined else ("", "")
    said = PIPELINED.sub("", said)
    named = NAMED.search(said)
    if named:
        return head + may_not_run(user, named.group(1), said, why=why)
    pattern = f"~{glob_escape(key.partition(':{')[0])}:*" if ":{" in key else "~<root>:*"
    which = f"the key {key}" if key else "a key"
    sent = f" by {shown(command)}" if command else ""
    return (
        f"{head}the ACL user {user} may not access {which}{sent}{why} ({said}): grant its root "
        f"with ACL SETUSER {user} {pattern} ({ACL_PAGE}; `sweeperd acl` prints the whole user)"
    )


def denied(exc: redis.exceptions.NoPermissionError, user: str, **context: str) -> SweepError:
    """Return the refusal as a failure of reason noperm, its message `denial`'s line."""
    return SweepError(Reason.NOPERM, denial(str(exc), user, **context))
