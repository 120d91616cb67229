"""Every key name, default and fixed vocabulary of sweeperd, in one place."""

from __future__ import annotations

from enum import StrEnum

VERB = "EMQ.STALLED.CHECK"

# The commands that reach a server, and the one that says what they may send (`acl`).
RUN, ONCE, INSPECT, TOP, AUDIT, ACL = "run", "once", "inspect", "top", "audit", "acl"
COMMANDS = (RUN, ONCE, INSPECT, TOP, AUDIT)

# Keyspace (docs/keyspace.md): every key of queue q lives under "<root>:{q}:".
DEFAULT_PREFIX_ROOT = "emq"
ACTIVE = "active"  # zset: job id -> lease deadline, ms since the epoch (server clock)
PENDING = "pending"  # zset: jobs waiting to be claimed
DEAD = "dead"  # zset: the dead-letter set
JOB = "job:"  # hash per job: "<prefix>job:<id>"
LEASE_EPOCH = "lease_epoch"  # field of a job's row: run_id of the server that granted the lease
METRICS_FAILED = "metrics:failed"  # hash, field "count": jobs that died, for any reason
METRICS_FAILED_FIELD = "count"
# Never written: the sweep declares it so that a Cluster refuses the sweep (TRYAGAIN, ASK) from
# CLUSTER SETSLOT ... MIGRATING on, while a reshard moves the slot's keys one batch at a time.
SWEEP_GUARD = "sweep-guard"

# Defaults of the sweep.
DEFAULT_REDIS_URL = "redis://localhost:6379/0"
DEFAULT_MAX_STALLED = 1
DEFAULT_LIMIT = 1000  # the most leases one call takes; calls are sized to the call target below it
DEFAULT_INTERVAL_S = 5.0
DEFAULT_CALL_TARGET_MS = 2.0  # server time one call stays under (sizing.AIM); never above the limit
DEFAULT_DRAIN_SHARE = 1.0  # most of the server's time a backlog drain may take; 1 = back to back
DEFAULT_SOCKET_TIMEOUT_S = 5.0
MAX_SOCKET_TIMEOUT_S = 3600.0  # beyond this a socket timeout is a mistake (1e12 overflows)
MAX_INTERVAL_S = 86400.0  # a day: the longest interval (and discovery period) taken
DEFAULT_METRICS_ADDR = "0.0.0.0:9787"
DEFAULT_JITTER_FRACTION = 0.1  # of the interval
DEFAULT_TOP_RATE_WINDOW_S = 15.0  # top's rates: a multiple of a 1, 3, 5 or 15 s sweep interval

# The audit (docs/commands.md#sweeperd-audit): every row read against the sets, paced.
DEFAULT_AUDIT_GRACE_S = 5.0  # a candidate is reported only if still so when read again after it
DEFAULT_MAX_LEASE_S = 86400.0  # a lease due further out is unreachable_deadline
DEFAULT_AUDIT_RATE = 50_000.0  # keys read per second, at the most
AUDIT_BATCH = 50  # ids one observing script reads: under a millisecond of server time
AUDIT_SCAN_COUNT = 500  # keys one SCAN (or ZSCAN) call looks at
AUDIT_SHOWN_IDS = 10  # the first ids of each class shown (--json lists every one)

# Several replicas: sweeperd's own keys live under "<root>:sweeperd:", never a queue's
# (docs/keyspace.md#sweeperds-own-keys). One sorted set, member id -> heartbeat deadline (ms,
# server clock); its hash tag is fixed, so in a cluster it lives on the slot of "members",
# whatever the queues are called.
MEMBERS_KEY = "sweeperd:{members}"  # under "<root>:"
DEFAULT_HEARTBEAT_S = 5.0  # a member's time to live: it heartbeats three times within it
MIN_HEARTBEAT_S = 0.5  # below this a round trip could outlive the heartbeat

LLONG_MAX = 2**63 - 1
LLONG_MIN = -(2**63)

# The words an on/off setting takes as text, in any case: a switch's env var, ?ssl_check_hostname=.
BOOLEAN_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}

# Exit codes of the command line.
EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


# The choices of the settings that take one of a few words (their coercer takes any case).
class ExecutorChoice(StrEnum):
    """--executor: how the verb is sent (docs/sweeping.md#executors-which-one-when)."""

    AUTO = "auto"  # native where the server knows the verb, the Lua port elsewhere
    NATIVE = "native"  # the module's EMQ.STALLED.CHECK
    SCRIPT = "script"  # the package's Lua port of it


class QueueMetrics(StrEnum):
    """--queue-metrics: how much is exported per queue: what an operator needs of the queues
    that have something to say, of every queue, or all; auto is basic up to SPARSE_ABOVE
    queues, sparse above."""

    AUTO = "auto"
    SPARSE = "sparse"
    BASIC = "basic"
    FULL = "full"


# --queue-metrics auto: basic's 6 series per queue (3.2 MiB a scrape at 10,000 queues) while a
# replica knows this many queues at most, sparse's above (docs/metrics.md#how-many-series).
SPARSE_ABOVE = 10_000


class LogFormat(StrEnum):
    """--log-format."""

    JSON = "json"
    CONSOLE = "console"
    AUTO = "auto"  # json off a TTY, console on one; resolved when the settings are built


class Shard(StrEnum):
    """--shard: whether this replica takes its share of the queues or sweeps them all."""

    ON = "on"  # replicas share the queues by rendezvous hashing over the live members
    OFF = "off"  # this replica sweeps every queue and joins no membership


class SweepAt(StrEnum):
    """--sweep-at: when a queue is swept: at its deadline (and its interval), or its interval."""

    DEADLINE = "deadline"  # when its earliest lease falls due, and at its interval at the latest
    INTERVAL = "interval"  # at its interval only


class DeadlineSource(StrEnum):
    """--deadline-source: how a lease taken since its queue's last sweep is learned."""

    TRACKING = "tracking"  # the server says when a queue changes (CLIENT TRACKING): read then
    OFF = "off"  # at the queue's next sweep (its interval at the latest)


class TopologyMode(StrEnum):
    """How the primaries are found: the URL's server, a Cluster's slot map, or Sentinel."""

    STANDALONE = "standalone"
    CLUSTER = "cluster"
    SENTINEL = "sentinel"
