"""What the server may touch: the source repos and backends it was started with, and the
shape of the ids and arguments it accepts. Every refusal says how to allow the thing.

A source is compared after resolving symlinks, on both sides: a link to an allowed repo is
that repo, and a link inside an allowed repo that points elsewhere is elsewhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from code_runner.errors import UsageError

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,160}$")
MAX_TEXT_CHARS = 4096  # a reason, an author, one command-line word
MAX_ID_CHARS = 161


class Refused(UsageError):
    """A tool call the server will not carry out; sent back to the client as a tool error."""


@dataclass(frozen=True)
class Limits:
    sources: tuple[Path, ...]  # resolved
    backends: frozenset[str]
    allow_apply: bool

    @classmethod
    def of(cls, sources: Iterable[str], backends: Iterable[str], *, allow_apply: bool) -> Limits:
        resolved: list[Path] = []
        for given in sources:
            path = Path(os.path.expanduser(given)).resolve()
            if not path.is_dir():
                raise UsageError(
                    f"--allow-source {given}: not a directory.",
                    fix="pass the root of a git repo the server may run tasks on.",
                )
            resolved.append(path)
        return cls(tuple(dict.fromkeys(resolved)), frozenset(backends), allow_apply)

    def describe(self) -> dict[str, object]:
        return {
            "sources": [str(p) for p in self.sources],
            "backends": sorted(self.backends),
            "allow_apply": self.allow_apply,
        }

    def source(self, given: str | os.PathLike[str]) -> Path:
        """The allowed source repo `given` names, resolved; `Refused` for any other path."""
        text = os.fspath(given)
        if not os.path.isabs(text):
            raise Refused(
                f"cwd {text!r} is not an absolute path.",
                fix=f"give cwd as the absolute path of an allowed source: {self._sources()}.",
            )
        if ".." in Path(text).parts:
            raise Refused(
                f"cwd {text!r} contains '..'.",
                fix=f"give cwd as the plain absolute path of an allowed source: {self._sources()}.",
            )
        resolved = Path(text).resolve()
        if resolved not in self.sources:
            raise Refused(
                f"source {text} (resolved: {resolved}) is not served by this server.",
                fix="restart `code-runner mcp` with `--allow-source "
                f"{resolved}` to serve it; served now: {self._sources()}.",
            )
        return resolved

    def default_source(self) -> Path:
        if len(self.sources) == 1:
            return self.sources[0]
        raise Refused(
            "the task spec has no cwd.",
            fix=f"set cwd to one of the allowed sources: {self._sources()}.",
        )

    def backend(self, backend: str) -> None:
        name = backend.partition(":")[0]
        if name not in self.backends:
            served = ", ".join(sorted(self.backends)) or "none"
            raise Refused(
                f"backend {name!r} is not served by this server (served: {served}).",
                fix=f"restart `code-runner mcp` with `--allow-backend {name}` to serve it.",
            )

    def apply_allowed(self) -> None:
        if not self.allow_apply:
            raise Refused(
                "this server does not apply patches to sources.",
                fix="use mode 'check', or restart `code-runner mcp` with --allow-apply; "
                "`code-runner apply RUN_DIR` applies it by hand.",
            )

    def _sources(self) -> str:
        return ", ".join(str(p) for p in self.sources) or "none (start with --allow-source DIR)"


def run_id(value: object) -> str:
    """A run or experiment id as the server made it; `Refused` for anything else."""
    if not isinstance(value, str):
        raise Refused(f"a run id is a string, got {type(value).__name__}.", fix=_ID_FIX)
    if len(value) > MAX_ID_CHARS:
        raise Refused(f"run id is {len(value)} characters long; ids are short.", fix=_ID_FIX)
    if "/" in value or "\\" in value or "\0" in value or ".." in value:
        raise Refused(f"run id {value[:80]!r} contains a path separator or '..'.", fix=_ID_FIX)
    if not RUN_ID_RE.match(value):
        raise Refused(f"run id {value[:80]!r} is not an id this server gives.", fix=_ID_FIX)
    return value


_ID_FIX = "pass the run_id that run_task (or exec_start) returned."


__all__ = ["MAX_TEXT_CHARS", "Limits", "Refused", "run_id"]
