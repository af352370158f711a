"""What every bench's own git commands run with: no user or system config, a fixed author."""

from __future__ import annotations

import argparse
import os
import shutil

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
