"""Every family sweeperd exports, in one table: its name, kind, labels and what it means. The
collectors take their names and help text from here, and docs/metrics.md lists the same."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"


@dataclass(frozen=True)
class Described:
    """One family as a scrape describes it (a counter's name without `_total`)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()

    def labelled(self) -> CounterMetricFamily | GaugeMetricFamily:
        """Return the library's counter or gauge family, its samples to be added by label."""
        made = CounterMetricFamily if self.kind == COUNTER else GaugeMetricFamily
        return made(self.name, self.help, labels=list(self.labels))

    def bare(self) -> Metric:
        """Return the family without samples: what a collector's describe() yields."""
        return Metric(self.name, self.help, self.kind)

    def value(self, value: float) -> Metric:
        """Return the library's family with one unlabelled sample."""
        made = CounterMetricFamily if self.kind == COUNTER else GaugeMetricFamily
        return made(self.name, self.help, value=value)


def _table(*families: Described) -> dict[str, Described]:
    return {f.name: f for f in families}


FAMILIES = _table(
    # What the sweeps did: the ledger counts every call (metrics/numbers.py).
    Described(
        "sweeperd_recovered",
        COUNTER,
        "Expired leases returned to pending by the sweep (exempt ones included).",
        ("queue",),
    ),
    Described(
        "sweeperd_dead",
        COUNTER,
        "Jobs moved to the dead-letter set because their stall budget ran out.",
        ("queue",),
    ),
    Described(
        "sweeperd_exempt",
        COUNTER,
        "Recovered leases not counted against the stall budget because they predate a server "
        "restart (a subset of sweeperd_recovered_total).",
        ("queue",),
    ),
    Described(
        "sweeperd_sweep_failures",
        COUNTER,
        "Sweep calls that failed, by reason (lane, wrongtype, counter, arguments, no_verb, "
        "connection, timeout, reply_lost, oom, noperm, moved, cluster_down, loading, topology, "
        "other).",
        ("queue", "reason"),
    ),
    Described(
        "sweeperd_last_success_timestamp_seconds",
        GAUGE,
        "Unix time of the queue's last successful call.",
        ("queue",),
    ),
    Described(
        "sweeperd_expired_leases",
        GAUGE,
        "Leases of the queue still expired after its last call (sweeps not keeping up).",
        ("queue",),
    ),
    Described(
        "sweeperd_oldest_expired_age_seconds",
        GAUGE,
        "How long the queue's oldest expired lease had been overdue at its last call: how late "
        "recovery runs (0 when nothing was expired).",
        ("queue",),
    ),
    # Per node, or per queue and node with --queue-metrics full: the labels here are basic's.
    Described(
        "sweeperd_sweeps",
        COUNTER,
        "EMQ.STALLED.CHECK calls sent (or their Lua port), failed ones included; per node, or "
        "per queue and node with --queue-metrics full.",
        ("node",),
    ),
    Described(
        "sweeperd_ghosts_removed",
        COUNTER,
        "Ids removed from the active set that had no job row (listed nowhere by the verb); per "
        "node, or per queue and node with --queue-metrics full.",
        ("node",),
    ),
    Described(
        "sweeperd_sweep_duration_seconds",
        HISTOGRAM,
        "Wall time of one scheduled tick of one queue (the drain's calls are not in it); per "
        "node, or per queue and node with --queue-metrics full.",
        ("node",),
    ),
    Described(
        "sweeperd_recovery_delay_seconds",
        HISTOGRAM,
        "How long after its deadline each call took its oldest lease, on the server's clock: "
        "how late expired leases come back; per node, or per queue and node with "
        "--queue-metrics full.",
        ("node",),
    ),
    # With --queue-metrics full only.
    Described(
        "sweeperd_queue_jobs",
        GAUGE,
        "Jobs in the queue's active, pending and dead sets, read at its last call "
        "(--queue-metrics full).",
        ("queue", "set"),
    ),
    Described(
        "sweeperd_queue_failed_jobs",
        GAUGE,
        "The queue's own count of jobs that died for any reason (its metrics:failed hash; "
        "--queue-metrics full).",
        ("queue",),
    ),
    # The background audit (--audit-every) and what the servers say of eviction (daemon/).
    Described(
        "sweeperd_audit_findings",
        GAUGE,
        "Jobs the last background audit found wrong, by class (docs/commands.md); a queue's "
        "class with none found has no series.",
        ("queue", "class"),
    ),
    Described(
        "sweeperd_audit_last_completed_timestamp_seconds",
        GAUGE,
        "When the last background audit of this replica's queues completed (absent until one has).",
    ),
    Described(
        "sweeperd_server_may_evict",
        GAUGE,
        "1 when the node's maxmemory-policy may evict a queue's keys (allkeys-*), else 0.",
        ("node", "policy"),
    ),
    Described(
        "sweeperd_server_evicted_keys",
        COUNTER,
        "Keys the node evicted (INFO stats evicted_keys, since the server started).",
        ("node",),
    ),
    # The daemon's state, read at scrape time (metrics/state.py).
    Described(
        "sweeperd_redis_up",
        GAUGE,
        "1 if the last call to the Redis/Valkey node succeeded, 0 if it failed.",
        ("node",),
    ),
    Described(
        "sweeperd_server_restarts",
        COUNTER,
        "Changes of the node's run_id seen: server restarts and failovers.",
        ("node",),
    ),
    Described(
        "sweeperd_server_info",
        GAUGE,
        "The node's current run_id (the lease epoch) and the executor sweeping it; always 1.",
        ("node", "run_id", "executor"),
    ),
    Described(
        "sweeperd_deadline_source",
        GAUGE,
        "1 while the node tells sweeperd of each new lease (CLIENT TRACKING), so that a lease "
        "taken since its queue's last sweep is back at its deadline; 0 while the interval alone "
        "finds it (--deadline-source off, refused by the server or its ACL, or reconnecting).",
        ("node",),
    ),
    Described(
        "sweeperd_deadline_reads",
        COUNTER,
        "A changed queue's earliest deadline read (ZRANGE) after the node said it changed: the "
        "cost of hearing new leases, beside sweeperd_sweeps_total.",
        ("node",),
    ),
    Described(
        "sweeperd_ready", GAUGE, "1 when every node answered within the readiness window, else 0."
    ),
    Described(
        "sweeperd_members",
        GAUGE,
        "Live members (replicas sharing the queues) this replica sees, itself included; 0 when "
        "it is not one (sharing off or refused, or its heartbeat expired).",
    ),
    Described(
        "sweeperd_owned_queues",
        GAUGE,
        "Queues this replica sweeps: its share, or every queue when sharing is off.",
    ),
    Described(
        "sweeperd_known_queues",
        GAUGE,
        "Queues this replica knows: configured, or found by a scan within the last hour; every "
        "one of them should have an owner among the replicas.",
    ),
    Described(
        "sweeperd_ownership_changes",
        COUNTER,
        "Times the set of queues this replica owns changed with the members it sees.",
    ),
    # The holds of a migrating slot (fleet/holds.py).
    Described(
        "sweeperd_sweeps_held",
        COUNTER,
        "Sweep calls a node held or sent elsewhere, unrun: reason migrating (the queue's slot "
        "is migrating: TRYAGAIN, ASK) or moved (MOVED, or a primary demoted: served elsewhere "
        "now).",
        ("node", "reason"),
    ),
    Described("sweeperd_held_queues", GAUGE, "Queues whose sweep a Cluster holds now."),
    Described(
        "sweeperd_oldest_hold_age_seconds",
        GAUGE,
        "How long the queue held the longest has been held (0: none is held).",
    ),
    # The schedule (daemon/schedule.py).
    Described(
        "sweeperd_schedule_lag_seconds",
        HISTOGRAM,
        "How late sweeps started against their schedule.",
    ),
    Described(
        "sweeperd_schedule_missed_runs",
        COUNTER,
        "Scheduled sweeps of a batch that never ran: the scheduler woke too late for them (the "
        "process stopped, a VM paused) and swept the batch once for all of them, or found it "
        "still sweeping (an overrun).",
    ),
    Described(
        "sweeperd_schedule_overruns",
        COUNTER,
        "Sweeps skipped because the batch's previous sweep was still running (the interval is "
        "shorter than a tick takes).",
    ),
    Described(
        "sweeperd_build_info",
        GAUGE,
        "sweeperd's version and the Python running it; always 1.",
        ("version", "python"),
    ),
)


def described(name: str) -> tuple[str, str]:
    """Return a family's name and help, as the library's Counter and Histogram take them."""
    family = FAMILIES[name]
    return family.name, family.help
