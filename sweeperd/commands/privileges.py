"""`sweeperd acl`: the least-privilege ACL user for the commands named, with the settings they
run with (topology, executor, discovery, sharing, key root, db), as one ACL SETUSER line."""

from __future__ import annotations

from sweeperd.config.options import OPTIONS
from sweeperd.config.settings import Settings
from sweeperd.constants import COMMANDS, DeadlineSource, ExecutorChoice, Shard, TopologyMode
from sweeperd.verb import acl


def user_named(value: object) -> str:
    """Return the --user value: a name an ACL SETUSER line can carry (no space, printable)."""
    where = OPTIONS["acl_user"].where
    if value is None:
        raise ValueError(f"{where} is needed: the name of the ACL user the line creates")
    name = str(value)
    if not name or not name.isprintable() or any(c.isspace() for c in name):
        raise ValueError(f"{where} must be a user name without spaces, not {name!r}")
    return name


def commands_for(value: object) -> tuple[str, ...]:
    """Return the --for value: the sweeperd commands the user runs (every one when not given)."""
    if value is None:
        return COMMANDS
    return acl.commands_named(str(value), OPTIONS["acl_for"].where)


def uses_of(settings: Settings, commands: tuple[str, ...], repair: bool = False) -> acl.Uses:
    """Return what the commands send with these settings: see verb/acl.py."""
    connection = settings.connection
    executor = settings.executor
    return acl.Uses(
        commands=commands,
        executors=acl.EXECUTORS if executor is ExecutorChoice.AUTO else (executor.value,),
        cluster=connection.topology.mode is TopologyMode.CLUSTER,
        sharing=settings.daemon.shard is Shard.ON,
        tracking=settings.daemon.deadline_source is DeadlineSource.TRACKING,
        discover=settings.daemon.discover > 0,
        scans=not settings.queues,
        select=connection.db != 0,
        root=settings.prefix_root,
        repair=repair,
    )


def acl_line(user: str, settings: Settings, commands: tuple[str, ...], repair: bool = False) -> str:
    """Return the ACL SETUSER line, the word <password> standing for the password; `repair`: audit
    --repair's grants too."""
    return acl.setuser_line(user, uses_of(settings, commands, repair))
