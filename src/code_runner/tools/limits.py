"""Bounds on what one tool call may read, write, run and show."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolLimits:
    read_max_lines: int = 400
    read_max_bytes: int = 256 * 1024  # largest file read_file/edit_file will open
    read_max_line_chars: int = 2000  # a longer line is shown cut (minified files)
    write_max_bytes: int = 1024 * 1024
    command_timeout_s: float = 120
    command_max_timeout_s: float = 600
    command_output_bytes: int = 16 * 1024  # what the agent sees: head + tail of each stream
    search_max_matches: int = 200
