"""The disposable checkout an agent works in: created, audited, exported, released.

`create` makes the work tree an overlay over the shared checkout cache (`checkouts`,
`overlay`) where it can, else a `clone --shared` into the state dir and a hardened checkout,
and returns the `Workspace` that owns it: `ws.audit(allowlist)`, `ws.keep()`, `ws.restore(tree)`,
`ws.export(tree)`, `ws.release()`. Below it, `layout.WorkspacePaths` names its parts;
`audit` judges every change against git's path rules and the allowlist; `trees` keeps and
restores states and exports the patch; `lease` guards the source and finds what dead runs
left; `env` is the environment every command in the workspace gets, and `python_env` the
project's own environment in it (its editable install resolving to the work tree).
"""

from code_runner.workspace.audit import (
    Audit,
    Change,
    ChangeKind,
    GitState,
    Rejection,
    audit,
    git_state,
    read_changes,
    restore_git_pointer,
)
from code_runner.workspace.checkouts import prune as prune_checkouts
from code_runner.workspace.create import (
    ExportedPatch,
    Workspace,
    create,
    planned_kind,
    remove_root,
)
from code_runner.workspace.env import command_env, empty_scratch
from code_runner.workspace.layout import WorkspacePaths
from code_runner.workspace.lease import (
    LOCK_TIMEOUT_S,
    Leftover,
    find_leftovers,
    lease_is_live,
    process_start,
    read_lease,
    source_lock,
)
from code_runner.workspace.python_env import (
    START_FIX,
    ProjectEnv,
    cannot_start,
    discover,
    from_section,
    project_packages,
)
from code_runner.workspace.trees import (
    EMPTY_TREE,
    base_tree,
    current_tree,
    export_patch,
    materialize,
    patch_applies_on_base,
    restore_tree,
    review_diff,
)

__all__ = [
    "EMPTY_TREE",
    "LOCK_TIMEOUT_S",
    "START_FIX",
    "Audit",
    "Change",
    "ChangeKind",
    "ExportedPatch",
    "GitState",
    "Leftover",
    "ProjectEnv",
    "Rejection",
    "Workspace",
    "WorkspacePaths",
    "audit",
    "base_tree",
    "cannot_start",
    "command_env",
    "create",
    "current_tree",
    "discover",
    "empty_scratch",
    "export_patch",
    "find_leftovers",
    "from_section",
    "git_state",
    "lease_is_live",
    "materialize",
    "patch_applies_on_base",
    "planned_kind",
    "process_start",
    "project_packages",
    "prune_checkouts",
    "read_changes",
    "read_lease",
    "remove_root",
    "restore_git_pointer",
    "restore_tree",
    "review_diff",
    "source_lock",
]
