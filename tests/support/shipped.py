"""The shipped Prometheus rules and Grafana dashboard, read as the tests read them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
PROMETHEUS_DIR = DEPLOY / "prometheus"
RULES = PROMETHEUS_DIR / "sweeperd-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "sweeperd-dashboard.json"

# Grafana's variables, replaced by values Prometheus accepts before parsing.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$queue": ".*"}
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


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))


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
