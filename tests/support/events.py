"""The log events as the package logs them and as docs/operations.md names them."""

from __future__ import annotations

import ast
import re

from tests.support.paths import REPO

LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})


def logged() -> set[str]:
    """Every event name a `log.<level>("name", ...)` or `log.log(level, "name", ...)` call in
    the package gives."""
    events: set[str] = set()
    for path in (REPO / "sweeperd").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "log"):
                continue
            args = node.args[1:] if node.func.attr == "log" else node.args
            if node.func.attr in LEVELS | {"log"} and args and isinstance(args[0], ast.Constant):
                events.add(str(args[0].value))
    return events


def documented() -> set[str]:
    """The event names of docs/operations.md's "Events:" paragraph: what is backquoted outside
    the parentheses that say each event's fields."""
    text = (REPO / "docs" / "operations.md").read_text()
    paragraph = text.split("Events: ", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", paragraph)))
