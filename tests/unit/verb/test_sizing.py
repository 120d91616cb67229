"""The call sizer: calls grow towards their aim under the target time, shrink above it, never
pass the limit."""

from __future__ import annotations

from sweeperd.verb.sizing import AIM, FIRST_SIZE, MOST_GROWTH, MOST_SHRINK, CallSizer

TARGET_S = 0.002
AIM_S = TARGET_S * AIM  # the call time the sizer aims at


class TestCallSizer:
    def test_first_call_is_the_first_size_within_the_limit(self) -> None:
        """Before any call is timed the size is FIRST_SIZE, cut to a smaller limit."""
        sizer = CallSizer(TARGET_S)
        assert sizer.next(1000) == FIRST_SIZE
        assert sizer.next(7) == 7

    def test_a_fast_full_call_grows_at_most_twofold(self) -> None:
        """A full call at a tenth of the aim doubles the size, not tenfold."""
        sizer = CallSizer(TARGET_S)
        sizer.observe(asked=100, taken=100, seconds=AIM_S / 10)
        assert sizer.size == 100 * MOST_GROWTH

    def test_growth_follows_the_time_left(self) -> None:
        """A full call at 80 % of the aim grows by a quarter."""
        sizer = CallSizer(TARGET_S)
        sizer.observe(asked=400, taken=400, seconds=AIM_S * 0.8)
        assert sizer.size == 500

    def test_a_short_call_does_not_grow(self) -> None:
        """A call that ran out of leases says nothing about a bigger one."""
        sizer = CallSizer(TARGET_S)
        sizer.observe(asked=100, taken=3, seconds=AIM_S / 10)
        assert sizer.size == FIRST_SIZE

    def test_a_slow_call_shrinks_in_proportion(self) -> None:
        """A call at twice the aim halves; one far above shrinks by at most MOST_SHRINK."""
        sizer = CallSizer(TARGET_S)
        sizer.observe(asked=400, taken=400, seconds=AIM_S * 2)
        assert sizer.size == 200
        sizer.observe(asked=200, taken=10, seconds=TARGET_S * 100)
        assert sizer.size == 200 * MOST_SHRINK

    def test_a_call_that_took_nothing_changes_nothing(self) -> None:
        """A slow call that found nothing due timed the server's pace, not a lease's cost: an
        idle queue's call on a loaded host leaves the size."""
        sizer = CallSizer(TARGET_S, size=400)
        sizer.observe(asked=400, taken=0, seconds=TARGET_S * 5)
        assert sizer.size == 400

    def test_never_below_one(self) -> None:
        """However slow a call of one lease, the next still takes one."""
        sizer = CallSizer(TARGET_S)
        sizer.observe(asked=1, taken=1, seconds=10.0)
        assert sizer.next(1000) == 1

    def test_converges_on_a_linear_server(self) -> None:
        """Against a server that takes 5 µs a lease plus 100 µs, the size settles where a call
        takes the aim (1.5 ms of a 2 ms target), within a few percent."""
        sizer = CallSizer(TARGET_S)
        for _ in range(30):
            size = sizer.next(10_000)
            sizer.observe(size, size, 100e-6 + 5e-6 * size)
        assert abs(sizer.size - 280) <= 280 * 0.05

    def test_an_unknown_time_changes_nothing(self) -> None:
        """A call time of zero (a server that could not say) leaves the size."""
        sizer = CallSizer(TARGET_S)
        sizer.observe(asked=100, taken=100, seconds=0.0)
        assert sizer.size == FIRST_SIZE
