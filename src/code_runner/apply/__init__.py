"""Complete-task mode and explicit apply: land a verified patch in the source, or roll back.

This is the one step that changes the user's repo, so it is a transaction:

    prepare (plan.py)     every precondition, checked read-only; the target of every path
    journal (journal.py)  prior state of every touched path and directory, saved under the
                          output dir and registered in the state dir, BEFORE the first write
    write (fs.py)         each path replaced atomically, never through a symlink
    verify                the same DoD, run in the source; files it leaves are moved out
    commit (commit.py)    HEAD + patch built in a private index, a title and trailers the
                          runner owns, a compare-and-swap ref update, and the user's index
                          updated for the patch's paths only; no hook runs unless asked
    roll back             on a DoD failure (when asked), any error while writing, a signal:
                          exactly the journaled paths go back to their prior bytes and modes
    repair (repair.py)    a killed apply is finished or undone from its journal by the next
                          `code-runner gc` or `code-runner apply`

`step.apply_patch` runs it all (transaction.py holds the steps) and returns an
`ApplyOutcome`; it never raises an expected failure.
"""

from code_runner.apply.commit import (
    TITLE_MAX_CHARS,
    TRAILERS,
    GitIdentity,
    commit_identity,
    commit_message,
    commit_title,
)
from code_runner.apply.dod_sandbox import DodSandbox, decide_dod_sandbox
from code_runner.apply.journal import apply_lock
from code_runner.apply.patch_copy import private_patch
from code_runner.apply.plan import ApplyRequest, PathChange, Plan, prepare
from code_runner.apply.repair import Repair, repair, repair_stale
from code_runner.apply.step import ApplyOutcome, apply_patch
from code_runner.errors import ApplyRefused

__all__ = [
    "TITLE_MAX_CHARS",
    "TRAILERS",
    "ApplyOutcome",
    "ApplyRefused",
    "ApplyRequest",
    "DodSandbox",
    "GitIdentity",
    "PathChange",
    "Plan",
    "Repair",
    "apply_lock",
    "apply_patch",
    "commit_identity",
    "commit_message",
    "commit_title",
    "decide_dod_sandbox",
    "prepare",
    "private_patch",
    "repair",
    "repair_stale",
]
