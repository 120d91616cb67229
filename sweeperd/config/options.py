"""Every option of the commands in one table: flag, env var, TOML key, default, coercer."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sweeperd.config import coercers
from sweeperd.config.coercers import Given
from sweeperd.constants import (
    ACL,
    AUDIT,
    COMMANDS,
    DEFAULT_AUDIT_GRACE_S,
    DEFAULT_AUDIT_RATE,
    DEFAULT_CALL_TARGET_MS,
    DEFAULT_DRAIN_SHARE,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_JITTER_FRACTION,
    DEFAULT_LIMIT,
    DEFAULT_MAX_LEASE_S,
    DEFAULT_MAX_STALLED,
    DEFAULT_METRICS_ADDR,
    DEFAULT_PREFIX_ROOT,
    DEFAULT_REDIS_URL,
    DEFAULT_SOCKET_TIMEOUT_S,
    DEFAULT_TOP_RATE_WINDOW_S,
    INSPECT,
    ONCE,
    RUN,
    TOP,
    DeadlineSource,
    ExecutorChoice,
    LogFormat,
    QueueMetrics,
    Shard,
    SweepAt,
)

ENV_PREFIX = "SWEEPERD_"
# The commands that reach a server; acl takes the options that change what the others send.
ALL = COMMANDS
WITH_ACL = (*ALL, ACL)
# A given value to its typed one, or a ConfigError naming it.
Coercer = Callable[[Given], Any]


@dataclass(frozen=True)
class Option:
    """One option: its setting's name, what its value is, where it applies, what it means.

    `key` is the setting's name, from which the TOML key, the flag and the env var derive
    (`flag` and `env` name them when they differ); `metavar` is what --help shows of the value
    ("" for an on/off flag); `default` None is no default, or one found at run time, shown as
    `shown_default` says when not str(); `toml` False keeps it out of the config file; `setting`
    False is one command's own value (top's --rows), in no Settings; `parse` reads a setting's
    value (coercers.py), None for no setting."""

    key: str
    metavar: str
    commands: tuple[str, ...]
    help: str
    default: object = None
    shown_default: str | None = None
    toml: bool = True
    flag: str = ""
    short: str = ""
    env: str = ""
    setting: bool = True
    parse: Coercer | None = None

    @property
    def flag_name(self) -> str:
        return self.flag or "--" + self.key.replace("_", "-")

    @property
    def env_name(self) -> str:
        return self.env or ENV_PREFIX + self.key.upper()

    @property
    def empty_in_env(self) -> bool:
        """Tell whether its env var is set empty (click drops that, as if it were not set)."""
        return os.environ.get(self.env_name) == ""

    @property
    def is_switch(self) -> bool:
        """Given or not: no value follows the flag."""
        return not self.metavar

    @property
    def is_flag(self) -> bool:
        """Tell whether it is a command's own option (--json, --rows), not a setting (--cluster is a
        setting)."""
        return (self.is_switch and not self.toml) or not self.setting

    @property
    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None or self.default is False:
            return ""
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)

    @property
    def where(self) -> str:
        """Return how an error message names the option: the flag and its env var."""
        return f"{self.flag_name} ({self.env_name})"


OPTIONS: dict[str, Option] = {
    o.key: o
    for o in (
        Option(
            "config",
            "PATH",
            WITH_ACL,
            "The TOML file: the settings below, and [queue.<name>] tables for a queue's own "
            "interval, max_stalled and limit (once applies them too, below its flags).",
            toml=False,
        ),
        Option(
            "queues",
            "NAME",
            WITH_ACL,
            "A queue (repeat the flag, or separate names by commas or spaces); "
            "once and inspect take exactly one; top without it shows every queue it discovers "
            "(and acl grants top the SCAN that finds them).",
            flag="--queue",
            short="-q",
            parse=coercers.queue_list,
        ),
        Option(
            "redis_url",
            "URL",
            WITH_ACL,
            "The server: redis://, rediss:// or unix://; credentials are never shown. A Cluster: "
            "several nodes as seeds (repeat the flag, or separate URLs by commas or spaces), "
            "a host name standing for every address it resolves to.",
            DEFAULT_REDIS_URL,
            parse=coercers.redis_urls,
        ),
        Option(
            "redis_password_file",
            "PATH",
            ALL,
            "The password, read from this file.",
            shown_default="$CREDENTIALS_DIRECTORY/redis-password if present",
            parse=coercers.file_path,
        ),
        Option(
            "redis_ca_file",
            "PATH",
            ALL,
            "rediss://: the CA bundle (PEM) that signed the server's certificate; the system's "
            "when unset. The host name is checked unless the URL has ssl_check_hostname=false.",
            parse=coercers.file_path,
        ),
        Option(
            "redis_cert_file",
            "PATH",
            ALL,
            "rediss://: the client certificate (PEM) for a server with tls-auth-clients.",
            parse=coercers.file_path,
        ),
        Option(
            "redis_key_file",
            "PATH",
            ALL,
            "rediss://: the client certificate's private key (PEM), unless the cert file has it.",
            parse=coercers.file_path,
        ),
        Option(
            "cluster",
            "",
            WITH_ACL,
            "The URL names any node of a Redis/Valkey Cluster (several: seeds, asked in turn): "
            "each queue is swept on the primary that owns its slot, each primary watched for "
            "failovers.",
            False,
            parse=coercers.switch,
        ),
        Option(
            "sentinels",
            "HOST:PORT",
            WITH_ACL,
            "A Sentinel to ask for the primary at every tick (repeat the flag, or separate "
            "addresses by commas or spaces); the URL's host is then unused.",
            flag="--sentinel",
            parse=coercers.sentinels,
        ),
        Option(
            "sentinel_master",
            "NAME",
            WITH_ACL,
            "The name the Sentinels monitor the primary under.",
            parse=coercers.optional_name,
        ),
        Option(
            "sentinel_password_file",
            "PATH",
            ALL,
            "The Sentinels' own password, read from this file (the primary's is "
            "--redis-password-file).",
            parse=coercers.file_path,
        ),
        Option(
            "socket_timeout",
            "SECONDS",
            ALL,
            "Seconds a server call may take (connect and read), at most 3600.",
            DEFAULT_SOCKET_TIMEOUT_S,
            parse=coercers.timeout_seconds,
        ),
        Option(
            "prefix_root",
            "ROOT",
            WITH_ACL,
            "The key root: queue q lives under <root>:{q}:.",
            DEFAULT_PREFIX_ROOT,
            parse=coercers.key_root,
        ),
        Option(
            "max_stalled",
            "N",
            (RUN, ONCE, AUDIT),
            "The stall budget: a job whose stalled count reaches it is dead-lettered. "
            "run: a [queue.<name>] table's own value wins; once: this one does.",
            DEFAULT_MAX_STALLED,
            parse=coercers.positive_int,
        ),
        Option(
            "limit",
            "N",
            (RUN, ONCE, AUDIT),
            "Expired leases one call takes at the most. run: a [queue.<name>] table's own "
            "value wins; once: this one does.",
            DEFAULT_LIMIT,
            parse=coercers.positive_int,
        ),
        Option(
            "call_target_ms",
            "MS",
            (RUN, ONCE, AUDIT),
            "The server time one call stays under: calls are sized to take three quarters "
            "of it, never above --limit.",
            DEFAULT_CALL_TARGET_MS,
            parse=coercers.milliseconds,
        ),
        Option(
            "executor",
            "auto|native|script",
            (RUN, ONCE, AUDIT, ACL),
            "native: the module's verb; script: the Lua port; auto: native where loaded.",
            ExecutorChoice.AUTO.value,
            parse=coercers.choice_of(ExecutorChoice),
        ),
        Option(
            "interval",
            "SECONDS",
            (RUN,),
            "Seconds between two sweeps of a queue, at most 86400.",
            DEFAULT_INTERVAL_S,
            parse=coercers.seconds,
        ),
        Option(
            "jitter",
            "FRACTION",
            (RUN,),
            "Each run moves by up to this fraction of the interval (0 to 1).",
            DEFAULT_JITTER_FRACTION,
            parse=coercers.fraction,
        ),
        Option(
            "drain_share",
            "FRACTION",
            (RUN,),
            "The most of the server's time a backlog drain may take, in (0, 1]; "
            "1: calls back to back.",
            DEFAULT_DRAIN_SHARE,
            parse=coercers.share,
        ),
        Option(
            "discover",
            "SECONDS",
            (RUN, ACL),
            "Seconds between SCANs for <root>:{*}:active (new queues swept; one no scan found "
            "for an hour dropped); 0: off.",
            0.0,
            shown_default="0 (off)",
            parse=coercers.seconds_or_off,
        ),
        Option(
            "audit_every",
            "SECONDS",
            (RUN,),
            "Seconds between background audits of the queues this replica owns (every row "
            "against its sets, paced as `sweeperd audit`, exported as sweeperd_audit_findings); "
            "0: off. An audit reads every row: an hour (3600) suits most.",
            0.0,
            shown_default="0 (off)",
            parse=coercers.seconds_or_off,
        ),
        Option(
            "sweep_at",
            "deadline|interval",
            (RUN,),
            "deadline: each queue swept when its earliest lease falls due, and at its interval "
            "at the latest; interval: at its interval only.",
            SweepAt.DEADLINE.value,
            parse=coercers.choice_of(SweepAt),
        ),
        Option(
            "deadline_source",
            "tracking|off",
            (RUN, ACL),
            "tracking: the server says when a queue's leases change (CLIENT TRACKING), and a "
            "lease taken since its queue's last sweep is back at its deadline too; off: such a "
            "lease waits for the queue's next sweep (its interval at the latest).",
            DeadlineSource.TRACKING.value,
            parse=coercers.choice_of(DeadlineSource),
        ),
        Option(
            "shard",
            "on|off",
            (RUN, ACL),
            "on: replicas under one key root share the queues, each sweeping its share; "
            "off: this one sweeps every queue and joins no membership.",
            "on",
            parse=coercers.choice_of(Shard),
        ),
        Option(
            "heartbeat",
            "SECONDS",
            (RUN,),
            "A member's time to live, renewed three times within it: a replica silent this "
            "long loses its queues to the others; at least 0.5.",
            DEFAULT_HEARTBEAT_S,
            parse=coercers.heartbeat,
        ),
        Option(
            "instance_id",
            "ID",
            (RUN,),
            "This replica's member id, unique among replicas (a pod name); never read from "
            "the config file, which replicas share.",
            shown_default="hostname:pid",
            toml=False,
            parse=coercers.instance_id,
        ),
        Option(
            "metrics_addr",
            "HOST:PORT",
            (RUN,),
            "Where /metrics, /healthz, /readyz and / are served.",
            DEFAULT_METRICS_ADDR,
            parse=coercers.metrics_addr,
        ),
        Option(
            "web_config_file",
            "PATH",
            (RUN,),
            "A YAML web config for the HTTP side: tls_server_config (cert_file, key_file, "
            "client_ca_file) and basic_auth_users (bcrypt hashes); see docs/security.md.",
            parse=coercers.file_path,
        ),
        Option(
            "queue_metrics",
            "auto|sparse|basic|full",
            (RUN,),
            "Series per queue: basic, what an operator needs (6, and one per failure reason "
            "seen); sparse, basic's of the queues with something to say (leases taken or left "
            "expired, a failure, no success for 150 s) for 30 minutes after, none of an idle "
            "queue; auto, basic up to 10,000 queues known, sparse above; full adds set sizes, "
            "and sweeps, ghosts, durations and recovery delays per node the queue is swept on "
            "(32 on one node, 22 more per other node).",
            QueueMetrics.AUTO.value,
            parse=coercers.choice_of(QueueMetrics),
        ),
        Option(
            "log_format",
            "json|console|auto",
            (RUN,),
            "auto: console when stderr is a terminal, else json. NO_COLOR turns colours off.",
            LogFormat.AUTO.value,
            parse=coercers.choice_of(LogFormat),
        ),
        Option(
            "log_level",
            "LEVEL",
            (RUN,),
            "The least level logged: debug, info, warning, error or critical; APScheduler and "
            "redis-py log warnings and up whatever it is.",
            "info",
            parse=coercers.log_level,
        ),
        Option(
            "drain",
            "",
            (ONCE,),
            "Repeat calls until no lease due when it started remains.",
            False,
            toml=False,
        ),
        Option(
            "dry_run",
            "",
            (ONCE,),
            "Read only: the model's verdicts on what is due now. Writes nothing.",
            False,
            toml=False,
        ),
        Option(
            "yes",
            "",
            (ONCE, AUDIT),
            "Sweep at the default max_stalled without asking: on a terminal, once shows a dry "
            "run's counts and asks before it dead-letters a job at a budget nobody set; audit "
            "--repair asks before it repairs, and needs --yes off a terminal.",
            False,
            toml=False,
        ),
        Option(
            "grace",
            "SECONDS",
            (AUDIT,),
            "audit: a candidate is reported only if a second atomic read, this long after it "
            "was found, finds it so still (0 to 3600): a worker mid-claim is not a finding.",
            DEFAULT_AUDIT_GRACE_S,
            toml=False,
            setting=False,
        ),
        Option(
            "max_lease",
            "SECONDS",
            (AUDIT,),
            "audit: the longest lease a worker takes: one due further out is "
            "unreachable_deadline (a deadline in seconds or microseconds, +inf).",
            DEFAULT_MAX_LEASE_S,
            toml=False,
            setting=False,
        ),
        Option(
            "rate",
            "KEYS",
            (AUDIT,),
            "audit: keys read per second at the most, on each server (calls stay small "
            "whatever it is).",
            DEFAULT_AUDIT_RATE,
            shown_default="50000",
            toml=False,
            setting=False,
        ),
        Option(
            "repair",
            "",
            (AUDIT, ACL),
            "audit: put each stranded job back in active as an expired lease and sweep the "
            "queue with the counted verb (after a question on a terminal; --yes elsewhere); "
            "acl: grant what that needs.",
            False,
            toml=False,
        ),
        Option(
            "top_interval",
            "SECONDS",
            (TOP,),
            "top: seconds between two refreshes (each one pipelined round trip per primary), "
            "0.1 to 3600; with --once, between the two reads its rates come from.",
            1.0,
            toml=False,
            flag="--interval",
            setting=False,
        ),
        Option(
            "top_rate_window",
            "SECONDS",
            (TOP,),
            "top: recovered/s and dead/s are the growth over the reads of the last SECONDS "
            "(0.1 to 3600); a multiple of the daemon's --interval reads as a steady rate.",
            DEFAULT_TOP_RATE_WINDOW_S,
            toml=False,
            flag="--rate-window",
            setting=False,
        ),
        Option(
            "rows",
            "N",
            (TOP,),
            "top: show the N queues with the most expired leases; every queue's expired count "
            "is read (one ZCOUNT each) to rank them, the other counts for the N shown only.",
            shown_default="the terminal's height",
            toml=False,
            env="SWEEPERD_TOP_ROWS",
            setting=False,
        ),
        Option(
            "once",
            "",
            (TOP,),
            "top: print the view once (two reads --interval apart) and exit; also off a terminal.",
            False,
            toml=False,
        ),
        Option(
            "json",
            "",
            (ONCE, INSPECT, TOP, AUDIT),
            "Print one JSON object (with an `error` field on any failure).",
            False,
            toml=False,
        ),
        Option(
            "acl_user",
            "NAME",
            (ACL,),
            "acl: the name of the ACL user the line creates (needed).",
            toml=False,
            flag="--user",
            setting=False,
        ),
        Option(
            "acl_for",
            "COMMANDS",
            (ACL,),
            "acl: the commands the user runs, separated by commas or spaces (once includes its "
            "dry run).",
            ",".join(ALL),
            toml=False,
            flag="--for",
            setting=False,
        ),
    )
}
SETTING_KEYS = tuple(k for k, o in OPTIONS.items() if not o.is_flag and k != "config")
REMOVED_KEYS = {
    "drain_budget": "drain_budget was removed: a backlog is drained automatically "
    "(see call_target_ms and drain_share)",
}
