"""Timestamps as the records write them: UTC, milliseconds, a trailing `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime) -> str:
    """`moment` in the records' format (it must carry a time zone)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now() -> str:
    """Now, in the records' format."""
    return iso(datetime.now(UTC))
