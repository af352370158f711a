"""How code-runner starts, bounds and ends a subprocess, and how it meets signals.

This package is the only place that starts a process. `run` waits for a command and returns
a `ProcResult` (a timeout is exit code 124, as with timeout(1)); `spawn` hands back a
`Process` for callers that watch a command while it runs (`poll`, `wait`, `kill_tree`);
`capture` keeps a short command's output in memory; `hand_terminal` lends the terminal to an
interactive child. A run's children join a cgroup of the run (`tracking`), so `gc` finds
what they left even after they cleared their environment; `release_run_group` removes the
run's group when the run ends. `signals_as_interrupt` and
`signals_deferred` are the one way a command turns SIGINT/SIGTERM into cleanup.
"""

from code_runner.proc.outputs import open_no_follow, real_dir
from code_runner.proc.process import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TAIL_BYTES,
    TIMEOUT_EXIT_CODE,
    Process,
    ProcResult,
    StopCheck,
    exit_code_of,
    hand_terminal,
    read_head_tail,
    read_head_tail_fd,
    signal_of,
    spawn,
)
from code_runner.proc.run import Captured, Launcher, capture, run, shell_argv, stale_scratch
from code_runner.proc.signals import signals_as_interrupt, signals_deferred, unhandled_signals
from code_runner.proc.tracking import describe as describe_tracking
from code_runner.proc.tracking import leftover_groups, members, remove_group
from code_runner.proc.tracking import release as release_run_group
from code_runner.proc.tree import (
    DEFAULT_GRACE_S,
    RUN_ID_ENV,
    TOKEN_ENV,
    become_subreaper,
    descendants,
    family,
    kill_processes,
    kill_run_processes,
    kill_tokened,
)

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_HEAD_BYTES",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_TAIL_BYTES",
    "RUN_ID_ENV",
    "TIMEOUT_EXIT_CODE",
    "TOKEN_ENV",
    "Captured",
    "Launcher",
    "ProcResult",
    "Process",
    "StopCheck",
    "become_subreaper",
    "capture",
    "descendants",
    "describe_tracking",
    "exit_code_of",
    "family",
    "hand_terminal",
    "kill_processes",
    "kill_run_processes",
    "kill_tokened",
    "leftover_groups",
    "members",
    "open_no_follow",
    "read_head_tail",
    "read_head_tail_fd",
    "real_dir",
    "release_run_group",
    "remove_group",
    "run",
    "shell_argv",
    "signal_of",
    "signals_as_interrupt",
    "signals_deferred",
    "spawn",
    "stale_scratch",
    "unhandled_signals",
]
