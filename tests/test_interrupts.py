"""Ctrl-C is never lost: a SIGINT whose KeyboardInterrupt Python drops (raised inside a callback
whose exceptions are ignored, as logging's after-fork lock release is while a subprocess is
spawned) is raised again at the next launch stage. Found by a CI run of tests/test_resume.py,
where a Ctrl-C during a launch's spawn let the session run on to its end (exit 0, not 130)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, signal
    from perfbisect import interrupts

    interrupts.install()

    class Spawner:
        def __del__(self):  # exceptions raised here are printed and ignored
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs here, inside the ignored callback
                pass

    Spawner()
    print("ran on after the lost Ctrl-C", flush=True)
    try:
        interrupts.check()
    except KeyboardInterrupt:
        print("raised again at the next check", flush=True)
    """
)


def test_a_ctrl_c_lost_in_an_ignored_callback_is_raised_at_the_next_check() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert "Exception ignored" in done.stderr and "KeyboardInterrupt" in done.stderr, done.stderr
    assert done.stdout.splitlines() == [
        "ran on after the lost Ctrl-C",
        "raised again at the next check",
    ], (done.stdout, done.stderr)


def test_without_a_ctrl_c_check_does_nothing_and_a_foreign_handler_is_kept() -> None:
    script = textwrap.dedent(
        """
        import signal
        from perfbisect import interrupts

        mine = lambda *_: None
        signal.signal(signal.SIGINT, mine)
        interrupts.install()  # an embedding program's own handler stays
        assert signal.getsignal(signal.SIGINT) is mine
        interrupts.check()
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_hangup_that_nohup_ignores_is_left_ignored_and_sigterm_is_taken_over() -> None:
    # `nohup perfbisect bisect start ...` must run on when its terminal closes; SIGTERM, at
    # Python's default (killed outright, no teardown), is taken over (tests/test_launch.py
    # test_a_signal_during_measure_leaves_nothing runs it on a real session).
    script = textwrap.dedent(
        """
        import signal
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        from perfbisect import interrupts

        interrupts.install()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        try:
            signal.raise_signal(signal.SIGTERM)
        except interrupts.Terminated as stop:
            print(interrupts.stopped_by(stop))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "('terminated by SIGTERM', 143)", done.stdout
