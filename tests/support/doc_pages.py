"""The documentation as the tests read it: the pages, their fenced examples, their links and
headings, and the options table they must hold."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sweeperd.config.options import OPTIONS
from tests.support.paths import REPO

README = REPO / "README.md"
PAGES = (README, *sorted((REPO / "docs").glob("*.md")))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$", re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # its text may go on to the next line
CODE_SPAN = re.compile(r"`[^`\n]*`")
MARKDOWN_ESCAPES = {"|": "\\|", "<": "\\<", "*": "\\*"}  # in a table cell, shown as typed


@dataclass(frozen=True)
class Block:
    """One fenced example of a page: its language tag (the word after ```) and its text."""

    page: Path
    line: int  # the opening fence's line, from 1
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(pages: tuple[Path, ...] = PAGES) -> list[Block]:
    """Every fenced block of the pages, in order."""
    found = []
    for page in pages:
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page, line, match.group(1), match.group(2)))
    return found


def shown_files() -> dict[str, str]:
    """The config files the docs show: a toml block whose first line is `# <its path>`."""
    shown = {}
    for block in blocks():
        first = block.text.partition("\n")[0]
        if block.lang == "toml" and first.startswith("# "):
            shown[first[2:].strip()] = block.text
    return shown


def prose(text: str) -> str:
    """A page without its fenced blocks and code spans (each block left as its empty lines,
    so that line numbers still count)."""
    without = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub("``", without)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation dropped (but - and
    _), spaces made hyphens."""
    shown = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return "".join(c for c in shown.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated one as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(FENCE.sub("", page.read_text())):
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """The page's links outside code, with their line: [text](target)."""
    text = prose(page.read_text())
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]


def options_table() -> str:
    """The Markdown table of every option of run, once, inspect, top and acl, from OPTIONS."""
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
