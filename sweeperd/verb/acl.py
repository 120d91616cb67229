"""The least privileges each sweeperd command needs, on each topology, as one ACL SETUSER line;
and the command a refusal inside the sweep script names."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sweeperd.constants import AUDIT, COMMANDS, DEFAULT_PREFIX_ROOT, INSPECT, ONCE, RUN, TOP, VERB
from sweeperd.server.scan import glob_escape

# The commands that write: the others' keys are read-only (%R~).
SWEEPS = (RUN, ONCE)
EXECUTORS = ("native", "script")

# What every command sends: the run_id, the role, whether the server is a Cluster node or is
# loading (INFO).
EPOCH = ("info",)
# Whether the verb is loaded (COMMAND INFO): auto's and native's choice; inspect and top show it.
VERB_KNOWN = ("command|info",)
# The sweep script, loaded and sent (and the replicas' heartbeat script).
SCRIPTS = ("script|load", "evalsha")
# The reads of sweep.lua, the accounting around the verb (zrangebyscore: the ids the verb will
# take first, to name its ghosts), and of `once` around it. Left out on purpose: %R~* with
# sort_ro and object|encoding, which let the sweep read a call's lease epochs in one SORT_RO
# instead of one HGET per recovered id (sweep.lua says when); the result is the same.
ACCOUNTING = ("time", "zcard", "zcount", "zrange", "zrangebyscore", "hget")
# The verb itself, called from the sweep script.
NATIVE = (VERB.lower(),)
# The Lua port's reads and writes (stalled_check.lua).
PORT = ("type", "zrangebyscore", "hmget", "exists", "zremrangebyrank", "hset", "zadd", "hincrby")
# Replicas sharing the queues (run --shard on, the default): the heartbeat script on
# <root>:sweeperd:{members}, and leaving it on SIGTERM.
SHARING = ("time", "zremrangebyscore", "zadd", "zrange", "pexpireat", "zrem")
# run --deadline-source tracking (the default): the listener's own id, its subscription to the
# invalidation channel (granted with INVALIDATION_CHANNEL) and the other connections' tracking
# redirected to it (the sweeps' on request: client|caching); its reads of a changed queue's
# earliest lease are zrange.
TRACKING = ("client|id", "subscribe", "client|tracking", "client|caching", "zrange")
INVALIDATION_CHANNEL = "__redis__:invalidate"
# run --discover, and top without a queue: SCAN for <root>:{*}:<set>.
DISCOVER = ("scan",)
# once --dry-run reads what the verb would, after an EXISTS that a migrating slot refuses
DRY_RUN = ("exists", "type", "zrangebyscore", "hgetall")
# A queue's counts, as inspect and top read them; top's read of the replicas' live members;
# inspect's of the first lease not yet due.
COUNTS = ("zcount", "zcard", "zrange", "hget")
MEMBERS = ("zrangebyscore",)
NEXT_DUE = ("zrangebyscore",)
# audit: the SCAN of a queue's keys, the ZSCAN of its sets, the leases due too far out, and the
# observing script (loaded, sent) with what it reads of each id; --cluster, where a migrating
# slot goes (CLUSTER NODES).
AUDIT_READS = (
    *("scan", "zscan", "zrangebyscore", "time", "script|load", "evalsha_ro"),
    *("type", "hget", "zscore"),
)
# audit --repair: the repair script (EVALSHA) and its ZADD, then the queue swept as once does.
AUDIT_REPAIR = ("evalsha", "zadd")
# --cluster: the slot map (CLUSTER SLOTS: primaries and replicas), for every command.
CLUSTER_MAP = ("cluster|slots",)
# --cluster, run, once and inspect: the failed primaries of a Cluster down, and (run, once)
# where a migrating slot goes (CLUSTER NODES).
CLUSTER_NODES = ("cluster|nodes",)
# --cluster, top: READONLY before its reads on a replica of a primary that cannot be read (a
# Cluster replica redirects every read without it).
REPLICA_READS = ("readonly",)
# once --cluster: the leases still due where a migrating slot's key is now.
ASKING = ("asking",)
# A URL's db other than 0: every connection selects it.
SELECT = ("select",)

SCRIPT_LINE = re.compile(r"@user_script:(\d+)")
# A refused command named in the error: Redis >= 7.2's text, and sweep.lua's.
NAMED = re.compile(r"run the '([^']+)' command|\(([A-Za-z.|]+)\)$")
# A command a script calls: redis.call('HGET', ... or call('INFO'.
COMMAND_LITERAL = re.compile(r"""\(\s*'([A-Za-z.]+)'""")


@dataclass(frozen=True)
class Uses:
    """What a user will run: the commands, and the options that change what they send.

    `executors` is both for --executor auto (as each server has the verb); `sharing` is run
    --shard on, `tracking` run --deadline-source tracking, `discover` run --discover; `scans` is
    top without a queue named (it finds them by SCAN); `select` a URL's db other than 0;
    `repair` audit --repair (it writes, and sweeps as once does)."""

    commands: tuple[str, ...] = COMMANDS
    executors: tuple[str, ...] = EXECUTORS
    cluster: bool = False
    sharing: bool = True
    tracking: bool = True
    discover: bool = False
    scans: bool = True
    select: bool = False
    root: str = DEFAULT_PREFIX_ROOT
    repair: bool = False

    @property
    def writes(self) -> bool:
        repairs = self.repair and AUDIT in self.commands
        return repairs or any(command in SWEEPS for command in self.commands)


def _sweep_sent(uses: Uses) -> list[str]:
    """Return what a sweep sends (run's, once's, audit --repair's): the verb, its script and its
    accounting."""
    native, port = "native" in uses.executors, "script" in uses.executors
    sent = [*(VERB_KNOWN if native else ()), *SCRIPTS, *ACCOUNTING]
    sent += [*(NATIVE if native else ()), *(PORT if port else ())]
    return sent + list(CLUSTER_NODES if uses.cluster else ())


def _sent_by(command: str, uses: Uses) -> list[str]:
    """Return the commands one sweeperd command sends, beyond INFO and the topology's own."""
    if command == AUDIT:
        sent = [*AUDIT_READS, *(CLUSTER_NODES if uses.cluster else ())]
        return sent + ([*AUDIT_REPAIR, *_sweep_sent(uses)] if uses.repair else [])
    sent = _sweep_sent(uses) if command in SWEEPS else [*VERB_KNOWN, *COUNTS]
    if command == RUN:
        sent += [*(SHARING if uses.sharing else ()), *(DISCOVER if uses.discover else ())]
        sent += TRACKING if uses.tracking else ()
    if command == ONCE:
        sent += [*DRY_RUN, *(ASKING if uses.cluster else ())]
    if command == INSPECT:
        sent += [*NEXT_DUE, *(CLUSTER_NODES if uses.cluster else ())]
    if command == TOP:
        sent += [
            *MEMBERS,
            *(DISCOVER if uses.scans else ()),
            *(REPLICA_READS if uses.cluster else ()),
        ]
    return sent


def commands_for(uses: Uses) -> list[str]:
    """Return every command `uses.commands` send with those options, each once, in a fixed order."""
    wanted = [*EPOCH, *(SELECT if uses.select else ()), *(CLUSTER_MAP if uses.cluster else ())]
    for command in COMMANDS:
        if command in uses.commands:
            wanted += _sent_by(command, uses)
    return list(dict.fromkeys(wanted))


def keys_for(uses: Uses) -> str:
    """Return the key pattern: every key under the root, read-only for a user that never sweeps; and
    the invalidation channel, for `run` hearing its queues change."""
    keys = f"{'' if uses.writes else '%R'}~{glob_escape(uses.root)}:*"
    return f"{keys} &{INVALIDATION_CHANNEL}" if _hears(uses) else keys


def _hears(uses: Uses) -> bool:
    return uses.tracking and RUN in uses.commands


def setuser_line(user: str, uses: Uses, password: str = "<password>") -> str:
    """Return the one ACL SETUSER line that makes `user` able to do exactly what `uses` says."""
    grants = " ".join(f"+{command}" for command in commands_for(uses))
    return f"ACL SETUSER {user} reset on >{password} {keys_for(uses)} {grants}"


def commands_named(text: str, where: str) -> tuple[str, ...]:
    """Return the sweeperd commands a --for value names (commas or spaces between), each known."""
    names = [name for name in re.split(r"[\s,]+", text) if name]
    unknown = [name for name in names if name not in COMMANDS]
    if unknown or not names:
        raise ValueError(
            f"{where} takes {', '.join(COMMANDS)} (commas or spaces between), not {text!r}"
        )
    return tuple(dict.fromkeys(names))


def refused_command(text: str, script_source: str, *, pcall_refusal: str = VERB) -> str:
    """Return the command an ACL refusal inside the sweep script was about.

    Redis 7.2 names it; 7.0 says "can't run this command" and, for a redis.call, the script's
    line, whose command literal names it. A refusal without a line came from a redis.pcall whose
    error the script returned: the verb's, `pcall_refusal`."""
    named = NAMED.search(text)
    if named:
        return (named.group(1) or named.group(2)).upper()
    line = SCRIPT_LINE.search(text)
    if line:
        lines = script_source.splitlines()
        number = int(line.group(1))
        found = COMMAND_LITERAL.search(lines[number - 1]) if 0 < number <= len(lines) else None
        if found:
            return found.group(1).upper()
        return "a command of the sweep script"
    return pcall_refusal
