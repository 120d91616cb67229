"""Every key name, default and fixed vocabulary of sweeperd, in one place."""

from __future__ import annotations

from enum import StrEnum

VERB = "EMQ.STALLED.CHECK"

# The commands that reach a server, and the one that says what they may send (`acl`).
RUN, ONCE, INSPECT, TOP, AUDIT, ACL = "run", "once", "inspect", "top", "audit", "acl"
COMMANDS = (RUN, ONCE, INSPECT, TOP, AUDIT)

# Keyspace (docs/keyspace.md): every key of queue q lives under "<root>:{q}:". ACTIVE is a zset
# of job id -> lease deadline (ms since the epoch, server clock); PENDING the zset of jobs
# waiting to be claimed; DEAD the dead-letter zset; JOB heads each job's hash, "<prefix>job:<id>",
# whose LEASE_EPOCH field is the run_id of the server that granted the lease; METRICS_FAILED's
# "count" field counts the jobs that died, for any reason.
DEFAULT_PREFIX_ROOT = "emq"
ACTIVE = "active"
PENDING = "pending"
DEAD = "dead"
JOB = "job:"
LEASE_EPOCH = "lease_epoch"
METRICS_FAILED = "metrics:failed"
METRICS_FAILED_FIELD = "count"
# Never written: the sweep declares it so that a Cluster refuses the sweep (TRYAGAIN, ASK) from
# CLUSTER SETSLOT ... MIGRATING on, while a reshard moves the slot's keys one batch at a time.
SWEEP_GUARD = "sweep-guard"

# Defaults of the sweep (docs/configuration.md says what each flag means). The limit is the most
# leases one call takes, the call target the server time one call stays under (sizing.AIM), the
# drain share the most of the server's time a backlog drain may take (1 = back to back).
DEFAULT_REDIS_URL = "redis://localhost:6379/0"
DEFAULT_MAX_STALLED = 1
DEFAULT_LIMIT = 1000
DEFAULT_INTERVAL_S = 5.0
DEFAULT_CALL_TARGET_MS = 2.0
DEFAULT_DRAIN_SHARE = 1.0
DEFAULT_SOCKET_TIMEOUT_S = 5.0
DEFAULT_METRICS_ADDR = "0.0.0.0:9787"
DEFAULT_JITTER_FRACTION = 0.1
# top's rate window: a multiple of a 1, 3, 5 or 15 s sweep interval.
DEFAULT_TOP_RATE_WINDOW_S = 15.0
# The longest socket timeout taken (beyond it one is a mistake: 1e12 overflows), and the longest
# interval and discovery period (a day).
MAX_SOCKET_TIMEOUT_S = 3600.0
MAX_INTERVAL_S = 86400.0

# The audit (docs/commands.md#sweeperd-audit): every row read against the sets, paced. A
# candidate is reported only if still so when read again after the grace; a lease due beyond the
# max lease is unreachable_deadline; the rate is keys read per second at the most; one observing
# script reads a batch of ids (under a millisecond of server time); one SCAN or ZSCAN call looks
# at AUDIT_SCAN_COUNT keys; the report shows each class's first AUDIT_SHOWN_IDS ids (--json all).
DEFAULT_AUDIT_GRACE_S = 5.0
DEFAULT_MAX_LEASE_S = 86400.0
DEFAULT_AUDIT_RATE = 50_000.0
AUDIT_BATCH = 50
AUDIT_SCAN_COUNT = 500
AUDIT_SHOWN_IDS = 10

# Several replicas: sweeperd's own keys live under "<root>:sweeperd:", never a queue's
# (docs/keyspace.md#sweeperds-own-keys). One sorted set, member id -> heartbeat deadline (ms,
# server clock); its hash tag is fixed, so in a cluster it lives on the slot of "members",
# whatever the queues are called. The heartbeat is a member's time to live (it heartbeats three
# times within it); below the minimum a round trip could outlive it.
MEMBERS_KEY = "sweeperd:{members}"
DEFAULT_HEARTBEAT_S = 5.0
MIN_HEARTBEAT_S = 0.5

LLONG_MAX = 2**63 - 1
LLONG_MIN = -(2**63)

# The words an on/off setting takes as text, in any case: a switch's env var, ?ssl_check_hostname=.
BOOLEAN_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}

# Exit codes of the command line; 130 is Ctrl-C, as a shell reports SIGINT.
EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130


# The choices of the settings that take one of a few words (their coercer takes any case).
class ExecutorChoice(StrEnum):
    """--executor: how the verb is sent (docs/sweeping.md#executors-which-one-when): the
    module's EMQ.STALLED.CHECK (native), the package's Lua port of it (script), or native where
    the server knows the verb and the port elsewhere (auto)."""

    AUTO = "auto"
    NATIVE = "native"
    SCRIPT = "script"


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
    """--log-format: json, console, or auto (json off a TTY, console on one, resolved when
    the settings are built)."""

    JSON = "json"
    CONSOLE = "console"
    AUTO = "auto"


class Shard(StrEnum):
    """--shard: whether this replica takes its share of the queues (on: replicas share them by
    rendezvous hashing over the live members) or sweeps them all and joins no membership (off)."""

    ON = "on"
    OFF = "off"


class SweepAt(StrEnum):
    """--sweep-at: when a queue is swept: when its earliest lease falls due and at its interval
    at the latest (deadline), or at its interval only (interval)."""

    DEADLINE = "deadline"
    INTERVAL = "interval"


class DeadlineSource(StrEnum):
    """--deadline-source: how a lease taken since its queue's last sweep is learned: read when
    the server says the queue changed (tracking: CLIENT TRACKING), or at the queue's next sweep,
    its interval at the latest (off)."""

    TRACKING = "tracking"
    OFF = "off"


class TopologyMode(StrEnum):
    """How the primaries are found: the URL's server, a Cluster's slot map, or Sentinel."""

    STANDALONE = "standalone"
    CLUSTER = "cluster"
    SENTINEL = "sentinel"
