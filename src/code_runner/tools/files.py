"""read_file, write_file, edit_file: the agent's view of the workspace's files.

Paths pass git's path rules (`policy.path_problem`) and are opened beneath the workspace
without following symlinks (`fsops`); writes are limited to the allowlist. An edit is
refused (`STALE`) unless the toolbox itself last read or wrote exactly the bytes now on
disk, so an agent never edits by line numbers of a file it has not seen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

import code_runner.tools.fsops as fsops
from code_runner.task.paths import Allowlist, path_problem
from code_runner.tools.base import ToolErrorCode, ToolResult
from code_runner.tools.fsops import FsError
from code_runner.tools.limits import ToolLimits
from code_runner.tools.text import (
    count_lines,
    is_binary,
    number_lines,
    sha256,
    shown_path,
    splice,
    split_lines,
)

_EDIT_CONTEXT_LINES = 3
_EDIT_SHOWN_LINES = 60
_PATH = Field(description="File path relative to the repository root.")


class FileTools:
    """The file tools of one toolbox, with the read/write memory STALE checks rely on."""

    def __init__(self, workspace_dir: Path, *, allowlist: Allowlist, limits: ToolLimits) -> None:
        self._workspace_dir = workspace_dir
        self._allowlist = allowlist
        self._limits = limits
        self._seen: dict[str, str] = {}  # path -> sha256 of the bytes last read or written

    def read_file(
        self,
        path: Annotated[str, _PATH],
        start_line: Annotated[
            int | None, Field(ge=1, description="First line to show (1-based). Default 1.")
        ] = None,
        end_line: Annotated[
            int | None, Field(ge=1, description="Last line to show (inclusive).")
        ] = None,
    ) -> ToolResult:
        """Read a text file of the repository, shown with line numbers (`   12| text`).

        Long files are shown a bounded number of lines at a time; the reply says how many
        lines there are and where to continue. Binary files are described, not shown.
        You must read a file before you can edit it with edit_file.
        """
        rel = self._checked_path(path)
        limits = self._limits
        with fsops.workspace_root(self._workspace_dir) as root:
            data = fsops.read_regular(root, rel, max_bytes=limits.read_max_bytes)
        digest = sha256(data)
        self._seen[rel] = digest
        if is_binary(data):
            return ToolResult.success(
                f"{rel}: binary file, {len(data)} bytes, sha256 {digest}; not shown. "
                "Use run_command (e.g. `od -c FILE | head`) to inspect it, or write_file to "
                "replace it.",
                path=rel,
                sha256=digest,
                binary=True,
                size=len(data),
            )
        lines = split_lines(data.decode("utf-8"))
        total = len(lines)
        first = start_line or 1
        if total == 0:
            if first > 1:
                return ToolResult.failure(
                    ToolErrorCode.LINE_RANGE, f"{rel} is empty; start_line must be 1"
                )
            return ToolResult.success(f"{rel}: empty file (0 lines)", path=rel, sha256=digest)
        if first > total:
            return ToolResult.failure(
                ToolErrorCode.LINE_RANGE,
                f"start_line {first} is past the end of {rel}, which has {count_lines(total)}",
            )
        if end_line is not None and end_line < first:
            return ToolResult.failure(
                ToolErrorCode.LINE_RANGE, f"end_line {end_line} is before start_line {first}"
            )
        wanted_last = min(total, end_line or total)
        last = min(wanted_last, first + limits.read_max_lines - 1)
        header = f"{rel}: lines {first}-{last} of {total}"
        if lines[0].endswith("\r\n"):
            header += " (CRLF line endings)"
        width = max(5, len(str(last)))
        body = number_lines(lines[first - 1 : last], first, width, limits.read_max_line_chars)
        footer = []
        if last < wanted_last:
            footer.append(
                f"[truncated at {limits.read_max_lines} lines: showing {first}-{last} of "
                f"{total}; call read_file with start_line={last + 1} to continue]"
            )
        if last == total and not lines[-1].endswith("\n"):
            footer.append("[no newline at end of file]")
        return ToolResult.success(
            "\n".join([header, *body, *footer]),
            path=rel,
            sha256=digest,
            total_lines=total,
            start_line=first,
            end_line=last,
            truncated=last < wanted_last,
        )

    def write_file(
        self,
        path: Annotated[str, _PATH],
        content: Annotated[str, Field(description="The complete new content of the file.")],
    ) -> ToolResult:
        """Create a file or replace its whole content. Only paths in the write allowlist.

        Missing parent directories are created. For a change to part of an existing file,
        prefer edit_file.
        """
        rel = self._checked_path(path)
        self._check_allowed(rel)
        data = self._encode(content)
        with fsops.workspace_root(self._workspace_dir) as root:
            outcome = fsops.write_regular(root, rel, data)
        digest = sha256(data)
        self._seen[rel] = digest
        verb = "created" if outcome.created else "replaced"
        return ToolResult.success(
            f"{verb} {rel} ({len(data)} bytes, {count_lines(len(split_lines(content)))})",
            path=rel,
            sha256=digest,
            created=outcome.created,
            size=len(data),
        )

    def edit_file(
        self,
        path: Annotated[str, _PATH],
        start_line: Annotated[int, Field(ge=1, description="First line to replace (1-based).")],
        end_line: Annotated[
            int,
            Field(
                ge=0,
                description="Last line to replace (inclusive). Use start_line - 1 to insert "
                "before start_line without replacing anything.",
            ),
        ],
        content: Annotated[
            str, Field(description="The new text for those lines; empty deletes them.")
        ],
    ) -> ToolResult:
        """Replace lines start_line..end_line (inclusive, 1-based) of a file with new text.

        Only paths in the write allowlist. The file must have been read with read_file (or
        written by you) and must not have changed since; otherwise read it again first.
        Line numbers are those read_file shows. After an edit, the new content counts as
        read, but line numbers below the edit may have moved.
        """
        rel = self._checked_path(path)
        self._check_allowed(rel)
        with fsops.workspace_root(self._workspace_dir) as root:
            data = fsops.read_regular(root, rel, max_bytes=self._limits.read_max_bytes)
            if is_binary(data):
                return ToolResult.failure(
                    ToolErrorCode.INVALID_ARGS,
                    f"{rel} is a binary file and cannot be edited by line; use write_file",
                )
            known = self._seen.get(rel)
            if known is None:
                return ToolResult.failure(
                    ToolErrorCode.STALE, f"read {rel} with read_file before editing it"
                )
            if known != sha256(data):
                return ToolResult.failure(
                    ToolErrorCode.STALE,
                    f"{rel} changed since you last read it; read it again before editing",
                )
            lines = split_lines(data.decode("utf-8"))
            total = len(lines)
            if not (start_line <= total + 1 and start_line - 1 <= end_line <= total):
                return ToolResult.failure(
                    ToolErrorCode.LINE_RANGE,
                    f"{rel} has {count_lines(total)}; replace with start_line <= end_line <= "
                    f"{total}, or insert with end_line = start_line - 1 "
                    f"(got {start_line}-{end_line})",
                )
            new_lines = splice(lines, start_line, end_line, content)
            new_data = self._encode("".join(new_lines))
            fsops.write_regular(root, rel, new_data)
        digest = sha256(new_data)
        self._seen[rel] = digest
        removed = end_line - start_line + 1
        inserted = len(new_lines) - total + removed
        action = (
            f"inserted {count_lines(inserted)} before line {start_line}"
            if removed == 0
            else f"replaced lines {start_line}-{end_line} ({count_lines(removed)}) "
            f"with {count_lines(inserted)}"
        )
        lo = max(1, start_line - _EDIT_CONTEXT_LINES)
        hi = min(len(new_lines), start_line + inserted - 1 + _EDIT_CONTEXT_LINES)
        hi = min(hi, lo + _EDIT_SHOWN_LINES - 1)
        snippet = number_lines(
            new_lines[lo - 1 : hi], lo, max(5, len(str(hi))), self._limits.read_max_line_chars
        )
        headline = f"edited {rel}: {action}; it now has {count_lines(len(new_lines))}"
        return ToolResult.success(
            "\n".join([headline, *snippet]),
            path=rel,
            sha256=digest,
            total_lines=len(new_lines),
        )

    def _checked_path(self, path: str) -> str:
        if path == "":
            raise FsError(ToolErrorCode.INVALID_ARGS, "path is empty")
        problem = path_problem(path)
        if problem is not None:
            raise FsError(ToolErrorCode.PERMISSION, f"path {shown_path(path)!r} {problem}")
        return path.rstrip("/")

    def _check_allowed(self, rel: str) -> None:
        if not self._allowlist.allows(rel):
            entries = ", ".join(self._allowlist.entries)
            raise FsError(
                ToolErrorCode.PERMISSION,
                f"{shown_path(rel)} is outside the write allowlist ({entries}); "
                "only those paths may be changed",
            )

    def _encode(self, content: str) -> bytes:
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FsError(
                ToolErrorCode.INVALID_ARGS, f"content is not valid Unicode text ({exc.reason})"
            ) from None
        if len(data) > self._limits.write_max_bytes:
            raise FsError(
                ToolErrorCode.TOO_LARGE,
                f"content is {len(data)} bytes; the limit is {self._limits.write_max_bytes}",
            )
        return data
