"""How code-runner meets SIGINT and SIGTERM: the one handler every command uses.

A signal becomes an exception (so `finally` blocks roll back and kill trees), and cleanup
that must finish runs with the signals held back.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends (main thread only; elsewhere a no-op).

    Cleanup that must finish, such as killing a process tree, runs inside it: the
    interrupt handler then fires after the cleanup instead of cutting it short.
    """
    if not _in_main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(INTERRUPT_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


_HANDLERS: set[Callable[[int, FrameType | None], None]] = set()  # those in place now


def unhandled_signals() -> tuple[signal.Signals, ...]:
    """The interrupt signals no `signals_as_interrupt` of code-runner's holds yet: those an
    outer one may take without hiding an enclosing one's. A handler someone else left (a
    library's, or the default action) does not count: a run takes those signals."""
    return tuple(s for s in INTERRUPT_SIGNALS if signal.getsignal(s) not in _HANDLERS)


@contextlib.contextmanager
def signals_as_interrupt(
    make_error: Callable[[str], BaseException],
    *,
    signals: Sequence[signal.Signals] = INTERRUPT_SIGNALS,
    on_signal: Callable[[str], None] = lambda _name: None,
    ignore: Callable[[], bool] = lambda: False,
) -> Iterator[None]:
    """The first of `signals` raises `make_error(name)`, so `finally` blocks run cleanup.

    A repeat during cleanup is reported to `on_signal` and otherwise ignored: cleanup must
    finish. So is any signal while `ignore()` (a stop already being honoured). In a thread
    other than the main one, Python cannot install handlers: a no-op.
    """
    received: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        on_signal(name)
        if received or ignore():
            return
        received.append(signum)
        raise make_error(name)

    if not _in_main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signals}
    _HANDLERS.add(handler)
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _HANDLERS.discard(handler)
