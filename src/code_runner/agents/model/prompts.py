"""What the model is told: the system prompt (rules) and each round's opening message.

Every round starts a fresh conversation: the task, the editable paths, the read-only
context, the definition of done and the current content of the files (read through the
toolbox, as `read_file` shows them, so `edit_file` may follow at once). From round 2 the
previous DoD result (exit code, verdict, stdout and stderr tails) is included. Everything
is cut to fixed bounds so a large repo cannot blow the context.
"""

from __future__ import annotations

from typing import Any

from code_runner.agents.base import RoundContext
from code_runner.tools.base import ToolErrorCode, ToolRunner
from code_runner.tools.text import tail

FILE_CHARS = 12_000  # of one file's content
CONTEXT_CHARS = 48_000  # of all files together
DOD_TAIL_CHARS = 3_000  # of each of stdout and stderr of the previous DoD

SYSTEM_PROMPT = """\
You are a careful software engineer working through tools on a disposable copy of a git \
repository. Your working directory is the repository root; paths are relative to it.

Rules:
- Change only the editable paths listed in the task. Changes anywhere else are discarded \
and reported.
- Use the tools to act: read_file, edit_file (read a file before editing it), write_file, \
run_command (bash, bounded in time; use it to run tests), search_code (ripgrep).
- Do not run git commands that change state (commit, checkout, reset, stash, config): the \
runner owns git. Do not touch anything outside the repository.
- The runner decides whether the task is done by running the definition-of-done command on \
your changes and checking its assertion. You may run that command yourself to check.
- Be economical: make the change, check it, and stop. When you are finished, reply with a \
short summary of what you changed and why, without calling a tool.
"""

NUDGE = (
    "You answered without calling a tool, so nothing in the repository changed. Use the "
    "tools (read_file, edit_file, write_file, run_command, search_code) to make the change. "
    "If you answer without a tool call again, this round ends."
)


def round_messages(ctx: RoundContext, tools: ToolRunner) -> list[dict[str, Any]]:
    """The opening messages of a round: the system prompt and the task as it stands."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task_message(ctx, tools)},
    ]


def task_message(ctx: RoundContext, tools: ToolRunner) -> str:
    task = ctx.task
    dod = task.definition_of_done
    parts = [
        f"# Task: {task.title}\n\n{task.prompt.strip()}",
        "## Editable paths (a directory covers everything beneath it)\n"
        + "\n".join(f"- {path}" for path in task.allowlist),
    ]
    if task.read_context:
        parts.append(
            "## Read-only context\n" + "\n".join(f"- {path}" for path in task.read_context)
        )
    parts.append(
        "## Definition of done\n"
        f"Command: `{dod.command}`\nAssertion: `{dod.assertion}` "
        f"(timeout {dod.timeout_s:g} s)"
    )
    round_line = f"This is round {ctx.round_index} of at most {ctx.max_rounds}."
    verdict = ctx.previous_verdict
    if ctx.round_index > 1 and verdict is not None:
        round_line += (
            " The files below are as the runner kept them after the previous rounds (the best "
            "state so far)."
        )
        parts.append(
            "## The definition of done after the previous round\n"
            f"Result: {'passed' if verdict.passed else 'failed'}: {verdict.reason}\n"
            f"Exit code: {verdict.exit_code}{' (timed out)' if verdict.timed_out else ''}\n"
            f"stdout (tail):\n```\n{tail(verdict.stdout_tail, DOD_TAIL_CHARS).rstrip()}\n```\n"
            f"stderr (tail):\n```\n{tail(verdict.stderr_tail, DOD_TAIL_CHARS).rstrip()}\n```"
        )
    parts.append(round_line)
    parts.append(file_context(ctx, tools))
    return "\n\n".join(parts)


def file_context(ctx: RoundContext, tools: ToolRunner) -> str:
    """The current content of the editable files and the read-only context, bounded."""
    sections = ["## Current files"]
    budget = CONTEXT_CHARS
    for path in dict.fromkeys([*ctx.task.allowlist, *ctx.task.read_context]):
        if budget <= 0:
            sections.append(f"### {path}\n(not shown: the context bound is reached; use read_file)")
            continue
        result = tools.call("read_file", {"path": path})
        if result.error is ToolErrorCode.NOT_FOUND:
            body = "(does not exist yet)"
        elif result.error is ToolErrorCode.NOT_A_FILE:
            body = "(a directory: use search_code or run_command `ls` to explore it)"
        elif not result.ok:
            body = f"(cannot be shown: {result.content})"
        else:
            limit = min(FILE_CHARS, budget)
            body = result.content
            if len(body) > limit:
                body = body[:limit] + "\n[... cut; use read_file with start_line to see more]"
            budget -= len(body)
        sections.append(f"### {path}\n{body}")
    return "\n\n".join(sections)


__all__ = ["NUDGE", "SYSTEM_PROMPT", "file_context", "round_messages", "task_message"]
