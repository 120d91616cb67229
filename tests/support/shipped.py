"""The shipped Prometheus rules, Grafana dashboard and systemd files, read as the tests read
them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
PROMETHEUS_DIR = DEPLOY / "prometheus"
RULES = PROMETHEUS_DIR / "sweeperd-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "sweeperd-dashboard.json"
METRICS_PAGE = REPO / "docs" / "metrics.md"

# Grafana's variables, replaced by values Prometheus accepts before parsing.
GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__range": "1h",
    "$job": ".*",
    "$instance": ".*",
    "$queue": ".*",
}
FLEET_MATCHERS = ('job=~"$job"', 'instance=~"$instance"')  # every selector of every panel
PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"and", "or", "unless", "bool", "offset", "inf", "nan"}
)
LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_:][\w:]*)\b(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: no functions, labels or keywords."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    expr = re.sub(r"\$\{?\w+\}?", "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = LABEL_LIST.sub("", expr)
    return {name for name in IDENTIFIER.findall(expr) if name.lower() not in PROMQL_WORDS}


@dataclass(frozen=True)
class Documented:
    """A row of docs/metrics.md's "What's exported": a metric's type and level."""

    kind: str  # counter, gauge or histogram
    level: str  # basic, full, or both (per node at basic, per queue and node at full)


def documented_metrics() -> dict[str, Documented]:
    """The metrics docs/metrics.md's "What's exported" table lists."""
    table = METRICS_PAGE.read_text().partition("## What's exported")[2].partition("\n## ")[0]
    rows = re.findall(r"^\| `(sweeperd_\w+)` \| (\w+) \|[^|]*\| (\w+) \|", table, re.M)
    return {name: Documented(kind, level) for name, kind, level in rows}


def exported_names(documented: dict[str, Documented]) -> frozenset[str]:
    """The sample names the documented metrics are scraped as: a histogram's three series."""
    return frozenset(
        sample
        for name, row in documented.items()
        for sample in (
            [f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count")]
            if row.kind == "histogram"
            else [name]
        )
    )


def rules() -> list[dict[str, Any]]:
    """Every alert rule of the rules file, in order."""
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))


def selectors(expr: str) -> list[tuple[str, str]]:
    """Each metric an expression selects, with its matchers ("" where it has none)."""
    names = metric_names(expr)
    found = re.findall(r"(?<![\w.])([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?(?!\s*\()", expr)
    return [(name, matchers) for name, matchers in found if name in names]


def dashboard_exprs() -> list[str]:
    return [
        target["expr"]
        for panel in dashboard_panels(dashboard()["panels"])
        for target in panel.get("targets", [])
    ]


def with_grafana_values(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


UNIT_SECONDS = {"s": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60}
UNIT_SECONDS |= {"minutes": 60, "h": 3600, "hour": 3600, "hours": 3600}
DURATION = re.compile(r"(\d+(?:\.\d+)?) ?(seconds?|s|minutes?|min|m|hours?|h)\b")
# What a seconds quantity must pass: `… age_seconds > 300`, a seconds histogram's quantile `> 1`.
SECONDS_THRESHOLD = re.compile(r"_seconds(?:_bucket)?\b.*>\s*(\d+(?:\.\d+)?)\s*$")


def durations(text: str) -> set[float]:
    """The lengths of time a text names (`300 s`, `5 minutes`, `[10m]`), in seconds."""
    return {float(n) * UNIT_SECONDS[unit] for n, unit in DURATION.findall(text)}


@dataclass(frozen=True)
class Timing:
    """When an alert fires: its expression's range windows and seconds threshold, its `for`."""

    windows: frozenset[float]
    threshold_s: float | None  # what a seconds quantity must pass (an age, a time since)
    for_s: float

    @classmethod
    def of(cls, rule: dict[str, Any]) -> Timing:
        expr = rule["expr"]
        threshold = SECONDS_THRESHOLD.search(expr)
        return cls(
            frozenset(durations(" ".join(re.findall(r"\[[^\]]+\]", expr)))),
            float(threshold.group(1)) if threshold else None,
            max(durations(rule.get("for", "0s"))),
        )

    @property
    def fires_after_s(self) -> float:
        """How long the condition holds before the alert fires: threshold and `for` together."""
        return (self.threshold_s or 0.0) + self.for_s

    @property
    def lengths(self) -> set[float]:
        """Every length of time a text may truthfully name about the alert."""
        named = {*self.windows, self.for_s, self.fires_after_s}
        return named | ({self.threshold_s} if self.threshold_s is not None else set())

    def said_of_firing(self, said: set[float]) -> bool:
        """Whether the times a sentence says the alert fires at are its own: the whole wait,
        or the threshold and `for` both, where it has a threshold."""
        whole = self.threshold_s is None or self.fires_after_s in said
        parts = self.threshold_s is not None and {self.threshold_s, self.for_s} <= said
        return said <= self.lengths and (whole or parts)


def unit_directives(text: str) -> dict[str, list[str]]:
    """A unit file's directives, each key with every value it was given, in order."""
    directives: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        directives.setdefault(key.strip(), []).append(value.strip())
    return directives


def environment_file(text: str) -> dict[str, str]:
    """The variables a unit's EnvironmentFile= sets from `text`, as systemd reads it: a line
    starting with # or ; is a comment, blank lines are skipped, VALUE in quotes loses them."""
    variables = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        variables[key.strip()] = value
    return variables
