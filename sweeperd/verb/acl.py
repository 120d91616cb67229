"""The least privileges sweeperd needs, as ACL SETUSER lines, and the command a refusal names."""

from __future__ import annotations

import re

from sweeperd.constants import VERB

# What sweeperd sends itself: the epoch (INFO), whether the verb is loaded (COMMAND INFO, for
# auto and inspect), the sweep script loaded and sent.
CALLER = ("info", "command|info", "script|load", "evalsha")
# The reads of sweep.lua, the accounting around the verb (zrangebyscore: the ids the verb will
# take first, to name its ghosts), and of `inspect`. Left out on purpose:
# %R~* with sort_ro and object|encoding, which let the sweep read a call's lease epochs in one
# SORT_RO instead of one HGET per recovered id (sweep.lua says when); the result is the same.
ACCOUNTING = ("time", "zcard", "zcount", "zrange", "zrangebyscore", "hget")
NATIVE = (VERB.lower(),)  # the verb itself, called from the sweep script
# The Lua port's reads and writes (stalled_check.lua).
PORT = ("type", "zrangebyscore", "hmget", "exists", "zremrangebyrank", "hset", "zadd", "hincrby")
# Replicas sharing the queues (--shard on, the default): the heartbeat script on
# <root>:sweeperd:{members}, and leaving it on SIGTERM.
SHARING = ("time", "zremrangebyscore", "zadd", "zrange", "pexpireat", "zrem")
DISCOVER = ("scan",)  # --discover: SCAN for <root>:{*}:active
# once --dry-run reads what the verb would, after an EXISTS that a migrating slot refuses
DRY_RUN = ("exists", "type", "zrangebyscore", "hgetall")

SCRIPT_LINE = re.compile(r"@user_script:(\d+)")
NAMED = re.compile(r"run the '([^']+)' command|\(([A-Za-z.|]+)\)$")  # Redis >= 7.2, sweep.lua
COMMAND_LITERAL = re.compile(r"""\(\s*'([A-Za-z.]+)'""")  # redis.call('HGET', ... / call('INFO'


def commands_for(
    executor: str, *, sharing: bool = True, discover: bool = False, dry_run: bool = False
) -> list[str]:
    """Every command `run`, `once` and `inspect` send with `executor` (native or script)."""
    wanted = [*CALLER, *ACCOUNTING, *(NATIVE if executor == "native" else PORT)]
    wanted += SHARING if sharing else ()
    wanted += [*(DISCOVER if discover else ()), *(DRY_RUN if dry_run else ())]
    return list(dict.fromkeys(wanted))


def refused_command(text: str, script_source: str, *, pcall_refusal: str = VERB) -> str:
    """The command an ACL refusal inside the sweep script was about.

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
