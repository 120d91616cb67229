"""The collector's settings for the daemon, tried in a process of their own (a frozen heap would
stay frozen in the test's)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from sweeperd.daemon.heap import YOUNG_THRESHOLD


def in_a_process(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


class TestHeap:
    def test_the_young_generation_is_collected_less_often(self) -> None:
        """The young threshold is raised; the older generations' stay CPython's."""
        out = in_a_process(
            """
            import gc
            from sweeperd.daemon.heap import tune_collector
            before = gc.get_threshold()
            tune_collector()
            print(*gc.get_threshold(), *before[1:])
            """
        )
        young, middle, old, middle_before, old_before = map(int, out)
        assert (young, middle, old) == (YOUNG_THRESHOLD, middle_before, old_before)

    def test_a_freeze_hides_what_lives_and_frees_what_was_dropped(self) -> None:
        """Objects alive at a freeze are out of the collector's sight; a cycle frozen, then
        dropped, is collected by the next freeze (it unfreezes first), not kept forever."""
        out = in_a_process(
            """
            import gc, weakref
            from sweeperd.daemon.heap import freeze_heap
            class Node:
                pass
            kept, dropped = Node(), Node()
            kept.me, dropped.me = kept, dropped
            gone = weakref.ref(dropped)
            freeze_heap()
            print(gc.get_freeze_count() > 0, any(o is kept for o in gc.get_objects()))
            del dropped
            gc.collect()
            print(gone() is not None)
            freeze_heap()
            print(gone() is None, any(o is kept for o in gc.get_objects()))
            """
        )
        assert out == ["True", "False", "True", "True", "False"]
