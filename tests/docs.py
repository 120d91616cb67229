"""The documentation as the tests read it: the pages, and the options table they must hold."""

from __future__ import annotations

from pathlib import Path

from sweeperd.options import OPTIONS

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MARKDOWN_ESCAPES = {"|": "\\|", "<": "\\<", "*": "\\*"}  # in a table cell, shown as typed


def options_table() -> str:
    """The Markdown table of every option of run, once, inspect and top, from OPTIONS."""
    rows = [
        "| flag | env | TOML key | default | commands | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for o in OPTIONS.values():
        flag = f"`{o.flag_name}`" + (f", `{o.short}`" if o.short else "")
        toml = f"`{o.key}`" if o.toml else ""
        default = f"`{o.default_text}`" if o.default_text else ""
        meaning = "".join(MARKDOWN_ESCAPES.get(c, c) for c in o.help)
        commands = ", ".join(o.commands)
        rows.append(f"| {flag} | `{o.env_name}` | {toml} | {default} | {commands} | {meaning} |")
    return "\n".join(rows)
