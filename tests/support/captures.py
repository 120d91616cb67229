"""Output as the README captured it and as a run prints it, compared on their stable fields:
what changes from run to run (run ids, ports, clocks, paths, measured rates) is masked alike
on both sides."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.support.doc_pages import README, blocks

# What differs between two runs of the same commands, each with the mask both sides get.
MASKS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"\b[0-9a-f]{40}\b"), "<run_id>"),
    (re.compile(r"\b[0-9a-f]{12}…"), "<run_id>…"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<time>"),  # a clock, an uptime
    (re.compile(r"\b(?:localhost|127\.0\.0\.1):\d+\b"), "<address>"),
    (re.compile(r"^(server|module): \S+$", re.M), r"\1: <path>"),  # the binary, the module
    # how long a lease has been overdue, or when one falls due: its digits kept (a minute and
    # an hour read alike on every run, and apart from each other)
    (re.compile(r"\b(\d+)\.\ds\b"), lambda m: f"<{len(m.group(1))}-digit seconds>s"),
    (re.compile(r"^(replicas: a) \S+$", re.M), r"\1 <member>"),  # hostname:pid
    (re.compile(r"\bkill \d+\b"), "kill <pid>"),
)
MEASURED = frozenset({"rate", "eta_s", "elapsed_s"})  # a log event's timings
CUT = ", ...}"  # how the README cuts a JSON log line short


def stable(text: str) -> str:
    """The text with every field that changes between runs masked."""
    for pattern, mask in MASKS:
        text = pattern.sub(mask, text)
    return text


def cut_event(line: str) -> dict[str, Any]:
    """A JSON log line as the README shows it, cut short with `...`: the fields it shows."""
    shown: dict[str, Any] = json.loads(line.replace(CUT, "}"))
    return shown


def cut_line(event: dict[str, Any], shown: dict[str, Any]) -> str:
    """An event logged, as the README cuts it: the fields `shown` has, in its order, those
    measured as `shown` has them."""
    kept = {key: shown[key] if key in MEASURED else event.get(key) for key in shown}
    return json.dumps(kept).removesuffix("}") + CUT


def lines_of(text: str) -> list[str]:
    """A capture's or a run's lines, stable fields only, without blank or trailing space."""
    return [line.rstrip() for line in stable(text).splitlines() if line.strip()]


def readme_capture(first_line: str) -> str:
    """The README's text block that holds a line starting with `first_line`."""
    (found,) = [
        block.text
        for block in blocks((README,))
        if block.lang == "text"
        and any(line.startswith(first_line) for line in block.text.splitlines())
    ]
    return found
