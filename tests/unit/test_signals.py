"""The signal inbox: signals read in order, only its own, handlers given back, and a storm of
signals never wedging the loop that waits for them (an Event set by the handler did)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from sweeperd.signals import SignalInbox

# A child sends SIGHUP every millisecond while the main thread waits in short turns, as the
# daemon's loop does. With a threading.Event set by the handler in place of the inbox, this
# wedged the main thread within a few hundred signals in each of 3 runs of 3: the handler ran
# as Event.wait took its lock back, and waited for that lock.
STORM = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    from sweeperd.signals import SignalInbox

    sender = subprocess.Popen([sys.executable, "-c", (
        "import os, signal, time\\n"
        "for _ in range({sent}):\\n"
        "    os.kill({pid}, signal.SIGHUP)\\n"
        "    time.sleep(0.001)\\n"
    ).format(sent=int(sys.argv[1]), pid=os.getpid())])
    heard = 0
    with SignalInbox([signal.SIGHUP]) as signals:
        while sender.poll() is None:
            heard += len(signals.wait(0.0005))
        heard += len(signals.take())
    print(heard, sender.returncode)
    """
)


class TestSignalInbox:
    def test_signals_come_in_order_and_only_its_own(self) -> None:
        others: list[int] = []
        before = signal.signal(signal.SIGUSR2, lambda signum, _frame: others.append(signum))
        try:
            with SignalInbox([signal.SIGUSR1, signal.SIGHUP]) as signals:
                assert signals.wait(0) == []
                signal.raise_signal(signal.SIGHUP)
                signal.raise_signal(signal.SIGUSR2)  # handled by Python, but not its
                signal.raise_signal(signal.SIGUSR1)
                assert signals.wait(5) == [signal.SIGHUP, signal.SIGUSR1]
                assert signals.take() == []
        finally:
            signal.signal(signal.SIGUSR2, before)
        assert others == [signal.SIGUSR2]

    def test_the_handlers_and_the_wakeup_fd_are_given_back(self) -> None:
        def mine(_signum: int, _frame: object) -> None:
            raise AssertionError("not called while the inbox holds the signal")

        before = signal.signal(signal.SIGUSR1, mine)
        reader, writer = os.pipe()
        os.set_blocking(writer, False)
        previous_fd = signal.set_wakeup_fd(writer)
        try:
            with SignalInbox([signal.SIGUSR1]) as signals:
                assert signal.getsignal(signal.SIGUSR1) is not mine
                signal.raise_signal(signal.SIGUSR1)
                assert signals.wait(5) == [signal.SIGUSR1]
            assert signal.getsignal(signal.SIGUSR1) is mine
            assert signal.set_wakeup_fd(previous_fd) == writer
        finally:
            signal.signal(signal.SIGUSR1, before)
            os.close(reader)
            os.close(writer)

    def test_a_handler_given_runs_on_each_signal(self) -> None:
        ran: list[int] = []
        with SignalInbox([signal.SIGUSR1], lambda signum, _frame: ran.append(signum)) as signals:
            signal.raise_signal(signal.SIGUSR1)
            assert signals.wait(5) == [signal.SIGUSR1]
        assert ran == [signal.SIGUSR1]

    def test_a_storm_of_signals_never_wedges_the_loop(self) -> None:
        """1,000 SIGHUPs a millisecond apart into a loop that waits half a millisecond at a
        time: it hears them (some merge in the kernel) and ends when the sender does."""
        sent = 1000
        done = subprocess.run(
            [sys.executable, "-c", STORM, str(sent)],
            capture_output=True,
            text=True,
            timeout=90,
            check=True,
        )
        heard, sender_code = (int(word) for word in done.stdout.split())
        assert sender_code == 0  # every signal found the process there
        assert 0 < heard <= sent
