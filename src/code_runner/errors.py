"""The error tree: every expected failure is one of these, each carrying a fix.

The CLI has a single error boundary (`code_runner.cli.boundary`): a `CodeRunnerError`
prints its message and fix and exits with its `exit_code`; anything else is a bug and
gets a traceback plus a crash log.

Exit codes are stable and documented in README.md:

    0  success (run passed, command did what was asked)
    1  the run finished but did not pass (DoD failed, budget exhausted)
    2  bad input: spec, arguments, paths (nothing was created)
    3  environment or preflight: missing tool, not a git repo, lock held
    4  safety violation: the source changed, a forbidden change was attempted
    5  record problem: incomplete or tampered run record
   70  internal error (a bug: traceback and crash log)
  124  timeout (the same code `timeout(1)` uses)
  130  interrupted (SIGINT / SIGTERM)
"""

from __future__ import annotations

from collections.abc import Sequence


class CodeRunnerError(Exception):
    """Base of every expected failure. `fix` tells the user what to do about it."""

    exit_code: int = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def render(self) -> str:
        """One paragraph for a human: what went wrong, then how to fix it."""
        if self.fix:
            return f"{self.message}\nFix: {self.fix}"
        return self.message


class UsageError(CodeRunnerError):
    """Bad command-line arguments or a bad file named on the command line."""

    exit_code = 2


class SpecError(UsageError):
    """A task spec (or other input file) failed validation. Holds every problem at once."""

    def __init__(self, source: str, problems: Sequence[str], *, fix: str | None = None) -> None:
        self.source = source
        self.problems = tuple(problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = [f"{source}: {count} {noun}:"] + [f"  - {p}" for p in self.problems]
        super().__init__(
            "\n".join(lines),
            fix=fix or "correct the fields above and run again; nothing was created.",
        )


class EnvironmentProblem(CodeRunnerError):
    """The machine lacks something the run needs, or preflight found a blocker."""

    exit_code = 3


class DiskFull(EnvironmentProblem):
    """A file of the record (or the state dir) could not be written: the disk is full."""

    def __init__(self, path: object, reason: str = "no space left on device") -> None:
        super().__init__(
            f"could not write {path}: {reason}.",
            fix="free space on that disk (or give the task another output_dir), then run "
            "`code-runner gc`: it marks the record abandoned and removes what the run left.",
        )


class DiskBudgetExceeded(CodeRunnerError):
    """The run wrote more to its workspace (work tree, git dir, HOME, TMPDIR) than its
    `limits.disk_mb` allows; the run ends, keeping its best patch so far."""


class PreflightError(EnvironmentProblem):
    """A check before any workspace is made failed."""


class ApplyRefused(EnvironmentProblem):
    """The source is not in a state to take a patch (dirty overlap, HEAD moved, staged
    files); nothing in it was changed."""


class LockHeld(EnvironmentProblem):
    """Another process holds a lock this operation needs."""


class GitError(EnvironmentProblem):
    """A git command failed where it must not."""

    def __init__(self, argv: Sequence[str], exit_code: int, stderr: str) -> None:
        self.argv = tuple(argv)
        self.git_exit_code = exit_code
        self.stderr = stderr
        shown = " ".join(self.argv[:6])
        super().__init__(
            f"git failed (exit {exit_code}): {shown}\n{stderr.strip()[-2000:]}",
            fix="check that the repository is healthy (`git fsck`) and run again.",
        )


class SafetyViolation(CodeRunnerError):
    """Something changed that must never change (the source repo, a ref, a config)."""

    exit_code = 4


class RecordError(CodeRunnerError):
    """A run record is missing, incomplete, or does not match its digests."""

    exit_code = 5


class RunTimeout(CodeRunnerError):
    exit_code = 124


class Interrupted(CodeRunnerError):
    """SIGINT or SIGTERM arrived; cleanup has run."""

    exit_code = 130


class IllegalTransition(CodeRunnerError):
    """A run tried to move between two states its state table does not connect: a bug."""

    exit_code = 70
