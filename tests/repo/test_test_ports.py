"""The tests' ports: a block per xdist worker however many there are, a range per run."""

from __future__ import annotations

import pytest

from tests.support.servers import PORTS_TO, port_range, worker_ports


class TestPortBlocks:
    @pytest.mark.parametrize("workers", [1, 2, 6, 8, 12])
    def test_every_worker_has_a_block_of_its_own(self, workers: int) -> None:
        """The blocks of `workers` workers do not overlap, and every port's bus port (+10000)
        is below the ephemeral range."""
        blocks = [set(worker_ports(f"gw{n}", workers, port_range(""))) for n in range(workers)]
        assert all(len(block) >= 1000 for block in blocks)
        assert sum(len(block) for block in blocks) == len(set().union(*blocks))
        assert max(max(block) for block in blocks) + 10_000 < 32_768

    def test_a_run_can_be_given_a_range_of_its_own(self) -> None:
        """SWEEPERD_TEST_PORTS=FROM-TO: every worker's block lies inside it."""
        given = port_range("15000-18999")
        assert (given.start, given.stop) == (15_000, 19_000)
        blocks = [worker_ports(f"gw{n}", 2, given) for n in range(2)]
        assert blocks == [range(15_000, 17_000), range(17_000, 19_000)]

    @pytest.mark.parametrize("value", ["15000", "x-y", "19000-15000", f"15000-{PORTS_TO + 1}"])
    def test_a_bad_range_is_refused(self, value: str) -> None:
        with pytest.raises(ValueError, match="SWEEPERD_TEST_PORTS"):
            port_range(value)
