"""`sweeperd demo`, the README's first command, as a user runs it: a real server, swept live."""

from __future__ import annotations

import re
import subprocess
import sys

from sweeperd.demo import BACKLOG, MAX_STALLED


class TestDemo:
    def test_the_demo_sweeps_its_queues_and_cleans_up(self) -> None:
        """The demo exits 0 and its summary shows the backlog drained, the dead, the exempt
        and the ghost, and the restart it caused."""
        done = subprocess.run(
            [sys.executable, "-m", "sweeperd", "demo", "--seconds", "6"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = done.stdout
        reports = re.search(r"reports\s+recovered\s+(\d+) \(exempt (\d+)\)\s+dead\s+(\d+)", out)
        assert reports is not None, out
        # stalled 0 or 1 before, 1 or 2 after: under the demo's budget of 3, none dies
        assert MAX_STALLED == 3
        assert tuple(map(int, reports.groups())) == (BACKLOG, 0, 0)
        assert re.search(r"reports .* now: active 0,", out), out
        emails = re.search(
            r"emails\s+recovered\s+\d+ \(exempt (\d+)\)\s+dead\s+\d+\s+ghosts (\d+)", out
        )
        assert emails is not None, out
        assert (int(emails.group(1)) >= 2, emails.group(2)) == (True, "1"), out
        assert "server restarts seen: 1" in out
