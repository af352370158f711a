"""run_command and search_code: the agent's processes, bounded and policed.

`command_argv` and `search_argv` are the only places an agent's argv is built, and
`CommandTools._spawn` the only place one is started; the OS sandbox wraps the argv there
(`wrap_argv`), or runs it in the session's resident sandbox (`launch`), so adding it
changes one seam, not every tool. Without a wrapper, the
command policy (`command_policy.check_command`) refuses the destructive patterns instead.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import Field

import code_runner.tools.fsops as fsops
from code_runner import proc
from code_runner.tools.base import ToolErrorCode, ToolResult
from code_runner.tools.command_policy import check_command
from code_runner.tools.limits import ToolLimits
from code_runner.tools.text import clip_line, tail

ArgvWrapper = Callable[[Sequence[str]], list[str]]

RG_INSTALL_HINT = (
    "ripgrep (`rg`) is not installed; install it (`apt-get install ripgrep`, or "
    "`pip install ripgrep==14.1.0`) and run again"
)
_SEARCH_HEAD_BYTES = 256 * 1024
_SEARCH_OUTPUT_CAP_BYTES = 8 * 1024 * 1024
_SEARCH_LINE_CHARS = 500

# Variables a command never needs and an agent must never see, whatever env it was given.
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|API_?KEY|KEY|AUTH_SOCK)"
    r"(?:_|$)",
    re.IGNORECASE,
)


def command_argv(command: str) -> list[str]:
    """THE argv that runs an agent's shell command (bash without rc files)."""
    return proc.shell_argv(command)


def search_argv(pattern: str, glob: str | None, *, rg: str = "rg") -> list[str]:
    """THE argv for `search_code`: no config file, no `--pre`, no `-L`, pattern after `-e`.

    A `.git` entry (the pointer file, any nested git dir) is never searched, whatever the
    glob asks for: the exclusion comes last, so it wins.
    """
    argv = [rg, "--no-config", "--no-heading", "--line-number", "--color=never"]
    if glob:
        argv += ["--glob", glob]
    return [*argv, "--iglob", "!.git", "-e", pattern, "--", "."]


def find_rg(env: Mapping[str, str]) -> str | None:
    """Where `rg` is, searching the command environment's PATH, then our own."""
    return shutil.which("rg", path=env.get("PATH")) or shutil.which("rg")


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without anything that looks like a secret (tokens, keys, passwords, agents)."""
    return {name: value for name, value in env.items() if not _SECRET_NAME.search(name)}


class CommandTools:
    """The process tools of one toolbox."""

    def __init__(
        self,
        workspace_dir: Path,
        *,
        source_dir: Path,
        env: Mapping[str, str],
        limits: ToolLimits,
        wrap_argv: ArgvWrapper | None = None,
        deadline: float | None = None,
        stop_when: proc.StopCheck | None = None,
        launch: proc.Launcher | None = None,
    ) -> None:
        self._workspace_dir = workspace_dir
        self._stop_when = stop_when  # asked while a command runs: True ends it (disk budget)
        self._deadline = deadline  # time.monotonic() at which the run's time is up
        self._source_dir = source_dir
        self._env = scrub_env(env)
        self._limits = limits
        self._wrap_argv = wrap_argv
        self._launch = launch  # runs the argv inside the sandbox itself (`Session.run`)

    def run_command(
        self,
        command: Annotated[str, Field(min_length=1, description="A bash command line.")],
        timeout_s: Annotated[
            float | None,
            Field(gt=0, allow_inf_nan=False, description="Seconds before it is killed."),
        ] = None,
    ) -> ToolResult:
        """Run a shell command in the repository (the working directory), bounded in time.

        Use it to run tests, builds and linters. stdin is empty; the output you see is the
        head and tail of stdout and stderr. The whole process tree is killed at the timeout
        and when the command ends. Commands that change git state, touch the original
        repository, or delete recursively are refused.
        """
        if not command.strip():
            return ToolResult.failure(ToolErrorCode.INVALID_ARGS, "run_command: empty command")
        # The policy is the fallback for when no OS sandbox wraps the command; inside the
        # sandbox the command runs and the read-only mounts make such attempts fail.
        block = None
        if self._wrap_argv is None and self._launch is None:
            block = check_command(
                command, source_dir=self._source_dir, workspace_dir=self._workspace_dir
            )
        if block is not None:
            return ToolResult.failure(
                ToolErrorCode.BLOCKED_COMMAND,
                f"refused by rule `{block.rule}`: {block.reason}",
                rule=block.rule,
            )
        limits = self._limits
        wanted_s = limits.command_timeout_s if timeout_s is None else timeout_s
        budget_s = min(wanted_s, limits.command_max_timeout_s)
        note = f"\n(timeout lowered to the maximum, {budget_s:g} s)" if budget_s < wanted_s else ""
        left_s = self.time_left()
        if left_s is not None and left_s <= 0:
            return _out_of_time("run_command")
        if left_s is not None and left_s < budget_s:
            budget_s = left_s
            note = f"\n(timeout lowered to the time the run has left, {budget_s:.1f} s)"
        quarter = max(1, limits.command_output_bytes // 4)
        result = self._spawn(
            command_argv(command), timeout_s=budget_s, head_bytes=quarter, tail_bytes=quarter
        )
        if result.timed_out:
            half = limits.command_output_bytes // 2
            return ToolResult.failure(
                ToolErrorCode.TIMEOUT,
                f"the command timed out after {budget_s:.3g} s and its whole process tree was "
                f"killed (exit {proc.TIMEOUT_EXIT_CODE}).{note}\n"
                + _stream("stdout tail", tail(result.stdout, half), result.stdout_size)
                + "\n"
                + _stream("stderr tail", tail(result.stderr, half), result.stderr_size),
                exit_code=result.exit_code,
                duration_s=result.duration_s,
            )
        lines = [f"{result.describe()} in {result.duration_s:.2f} s{note}"]
        if result.killed_descendants:
            lines.append(f"({result.killed_descendants} leftover processes were killed)")
        lines.append(_stream("stdout", result.stdout, result.stdout_size))
        lines.append(_stream("stderr", result.stderr, result.stderr_size))
        return ToolResult.success(
            "\n".join(lines),
            exit_code=result.exit_code,
            duration_s=result.duration_s,
            output_limited=result.output_limited,
        )

    def search_code(
        self,
        pattern: Annotated[
            str, Field(min_length=1, description="A regular expression (ripgrep syntax).")
        ],
        glob: Annotated[
            str | None,
            Field(min_length=1, description="Only search files matching this glob, e.g. *.py"),
        ] = None,
    ) -> ToolResult:
        """Search the repository's files for a regular expression (ripgrep).

        Shows matching lines as `path:line:text`, up to a bounded number. Hidden and
        git-ignored files are skipped; symlinks are not followed.
        """
        if "\0" in pattern or (glob is not None and "\0" in glob):
            return ToolResult.failure(
                ToolErrorCode.INVALID_ARGS, "search_code: pattern and glob may not contain NUL"
            )
        rg = find_rg(self._env)
        if rg is None:
            return ToolResult.failure(ToolErrorCode.IO_ERROR, RG_INSTALL_HINT)
        budget_s = self._limits.command_timeout_s
        left_s = self.time_left()
        if left_s is not None and left_s <= 0:
            return _out_of_time("search_code")
        if left_s is not None:
            budget_s = min(budget_s, left_s)
        result = self._spawn(
            search_argv(pattern, glob, rg=rg),
            timeout_s=budget_s,
            head_bytes=_SEARCH_HEAD_BYTES,
            tail_bytes=0,
            max_output_bytes=_SEARCH_OUTPUT_CAP_BYTES,
        )
        if result.timed_out:
            return ToolResult.failure(
                ToolErrorCode.TIMEOUT,
                f"the search timed out after {budget_s:.3g} s; "
                "narrow it with a glob or a more specific pattern",
            )
        if result.exit_code == 1 and result.stdout_size == 0:
            where = f" in files matching {glob}" if glob else ""
            return ToolResult.success(f"no matches for {pattern!r}{where}", matches=0)
        if result.exit_code != 0 and result.stdout_size == 0:
            # rg exits 2 for a bad pattern or glob; anything else means it did not run
            code = ToolErrorCode.INVALID_ARGS if result.exit_code == 2 else ToolErrorCode.IO_ERROR
            return ToolResult.failure(code, f"search_code: {tail(result.stderr.strip(), 2000)}")
        return self._render_matches(result)

    def time_left(self) -> float | None:
        """Seconds until the run's deadline; None when the run has none."""
        return None if self._deadline is None else self._deadline - time.monotonic()

    def _render_matches(self, result: proc.ProcResult) -> ToolResult:
        cap = self._limits.search_max_matches
        text = result.stdout
        cut = result.stdout_size > _SEARCH_HEAD_BYTES or result.output_limited
        if cut and "\n[... " in text:
            text = text[: text.rfind("\n[... ")]
        lines = text.split("\n")
        if cut or lines[-1] == "":
            lines = lines[:-1]  # a partial last line, or the empty string after the last \n
        shown = [clip_line(line.removeprefix("./"), _SEARCH_LINE_CHARS) for line in lines[:cap]]
        more = cut or len(lines) > cap
        if more:
            shown.append(
                f"[only the first {min(cap, len(lines))} matching lines are shown; narrow the "
                "pattern or add a glob]"
            )
        if result.exit_code not in (0, 1) and result.stderr.strip():
            shown.append(f"[rg reported: {tail(result.stderr.strip(), 500)}]")
        return ToolResult.success("\n".join(shown), matches=min(cap, len(lines)), truncated=more)

    def _spawn(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        head_bytes: int,
        tail_bytes: int,
        max_output_bytes: int = proc.DEFAULT_MAX_OUTPUT_BYTES,
    ) -> proc.ProcResult:
        """THE seam every agent process goes through (the sandbox wraps `argv` here)."""
        with fsops.workspace_root(self._workspace_dir):
            pass  # refuses a workspace that was replaced by a symlink
        proc.become_subreaper()  # `setsid` escapees are re-parented to us, found and killed
        if self._launch is not None:
            launch, final = self._launch, list(argv)
        else:
            launch = proc.run
            final = self._wrap_argv(argv) if self._wrap_argv else list(argv)
        return launch(
            final,
            cwd=self._workspace_dir,
            env=self._env,
            timeout_s=timeout_s,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            max_output_bytes=max_output_bytes,
            stop_when=self._stop_when,
        )


def _out_of_time(tool: str) -> ToolResult:
    return ToolResult.failure(
        ToolErrorCode.TIMEOUT,
        f"{tool}: not run: the run's timeout has passed; no more commands can run",
    )


def _stream(label: str, text: str, size: int) -> str:
    if size == 0:
        return f"--- {label}: (empty) ---"
    return f"--- {label} ({size} bytes) ---\n{text.rstrip(chr(10))}"
