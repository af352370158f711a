"""Programs some tests need that a plain checkout lacks: found, or the test says how to get them."""

from __future__ import annotations

import os

import pytest


def installed_program(candidate: str, what: str, install: str) -> str:
    """`candidate` if it can be run; otherwise fail (CI) or skip (elsewhere), saying that
    `what` is not installed there and how to `install` it."""
    if os.access(candidate, os.X_OK):
        return candidate
    message = f"{what} is not installed at {candidate}; run {install}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
