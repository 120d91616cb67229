"""Settings for many queues cost in proportion to the queues: counted in operations (name
comparisons, Python calls), never timed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from sweeperd.config.configfile import FileQueues, unlisted_tables
from sweeperd.config.settings import build_settings


class Name(str):
    """A queue name that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def names(n: int) -> list[str]:
    return [f"tenant-{i:06d}" for i in range(n)]


def comparisons(n: int) -> int:
    """Name comparisons unlisted_tables makes for a file listing n queues, each with a table."""
    listed = tuple(Name(name) for name in names(n))
    tables = FileQueues({Name(name): {} for name in names(n)}, listed)
    Name.compared = 0
    assert unlisted_tables(tables, [], Path("sweeperd.toml"), discover=False) == ()
    return Name.compared


def test_unlisted_tables_compares_each_table_once() -> None:
    """Each table is looked up in the list once, not compared against every listed name: the
    list test was quadratic (46 s to ready at 100,000 queues)."""
    assert comparisons(20_000) <= 20_000
    assert comparisons(40_000) <= 2 * comparisons(20_000) + 10


def calls(build: Callable[[], object]) -> int:
    """Python and C function calls made while `build` runs."""
    counted = 0

    def profile(_frame: FrameType, event: str, _arg: object) -> None:
        nonlocal counted
        if event in ("call", "c_call"):
            counted += 1

    sys.setprofile(profile)
    try:
        build()
    finally:
        sys.setprofile(None)
    return counted


def settings_calls(tmp_path: Path, n: int) -> int:
    """Calls building the settings of a file listing n queues, every tenth with a table."""
    path = tmp_path / f"q{n}.toml"
    tables = "".join(f'[queue."{name}"]\ninterval = 30\n' for name in names(n)[::10])
    path.write_text(f"queues = {names(n)!r}\n{tables}".replace("'", '"'))
    return calls(lambda: build_settings({}, path, logs_to_tty=False))


def test_settings_grow_linearly(tmp_path: Path) -> None:
    """Twice the queues, twice the calls (the file's parsing included), within a tenth."""
    once, twice = settings_calls(tmp_path, 20_000), settings_calls(tmp_path, 40_000)
    assert twice <= 2.2 * once
