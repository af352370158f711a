"""`signals_as_interrupt`: the first signal raises, a repeat during cleanup does not."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from code_runner import proc


class Stopped(Exception):
    pass


def test_first_signal_raises_and_a_repeat_during_cleanup_is_ignored() -> None:
    heard: list[str] = []
    cleaned = False
    with (
        pytest.raises(Stopped, match="SIGTERM"),
        proc.signals_as_interrupt(Stopped, on_signal=heard.append),
    ):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # must not cut the cleanup short
            cleaned = True
    assert cleaned and heard == ["SIGTERM", "SIGINT"]


def test_previous_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with proc.signals_as_interrupt(Stopped, signals=(signal.SIGTERM,)):
        assert signal.getsignal(signal.SIGTERM) is not before
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is before


def test_ignore_holds_signals_back() -> None:
    with proc.signals_as_interrupt(Stopped, ignore=lambda: True):
        os.kill(os.getpid(), signal.SIGTERM)  # a stop already being honoured


def test_deferred_signals_arrive_after_the_block() -> None:
    order: list[str] = []
    main = threading.main_thread().ident
    assert main is not None
    with pytest.raises(Stopped), proc.signals_as_interrupt(Stopped), proc.signals_deferred():
        # to this thread: the mask is per thread, and another may have it unblocked
        signal.pthread_kill(main, signal.SIGTERM)
        order.append("cleanup finished")
    assert order == ["cleanup finished"]
