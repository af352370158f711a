"""What every bench shares: the git environment of its own git commands (no user or system
config, a fixed author), its argument types, and how it times a pair."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Callable

GIT_ENV = {
    "PATH": os.environ["PATH"],
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.com",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.com",
}


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a repeat, a count)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def file_counts(text: str) -> list[int]:
    """An argparse type: file counts separated by commas (1000,20000)."""
    return [positive_int(part.strip()) for part in text.split(",")]


def executable(text: str) -> str:
    """An argparse type: a program that exists and may be run."""
    found = shutil.which(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable program")
    return found


def pair(
    ours: Callable[[], object], floor: Callable[[], object], repeat: int, gap_s: float = 0.0
) -> tuple[float, float]:
    """Medians of `ours` and `floor`, interleaved (ours, floor, ours, ...) so machine noise
    hits both alike, after one warm-up of each; each after `gap_s` idle (not timed)."""
    ours()
    floor()
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        for fn, into in ((ours, a), (floor, b)):
            if gap_s:
                time.sleep(gap_s)
            started = time.perf_counter()
            fn()
            into.append(time.perf_counter() - started)
    return statistics.median(a), statistics.median(b)
