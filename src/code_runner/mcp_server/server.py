"""The MCP server: the tools and the result resource on the official `mcp` SDK.

Each tool is a thin shell over `tasks` or `experiments`: the work runs in a worker thread
(git and file I/O never stall the protocol loop), and every expected failure (a
`CodeRunnerError`, with its fix) comes back as a tool error the model can read. Nothing is
long: `run_task` and `exec_start` return an id at once; `task_status` may wait up to
`MAX_WAIT_S` for the run to end, sending progress notifications meanwhile when the client
gave a progress token. Every call is written to the server log with its outcome.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import Field

import code_runner.mcp_server.experiments as experiments
import code_runner.mcp_server.tasks as tasks
from code_runner import __version__
from code_runner.errors import CodeRunnerError
from code_runner.mcp_server.audit import audit_middleware
from code_runner.mcp_server.limits import MAX_TEXT_CHARS, Limits
from code_runner.mcp_server.log import ServerLog
from code_runner.mcp_server.runs import EXPERIMENT, TASK, Registry

MAX_WAIT_S = 25.0
POLL_S = 0.25
T = TypeVar("T")

INSTRUCTIONS = """\
code-runner runs a bounded coding task in a disposable checkout of a git repo and proves the
result: an agent works there, a deterministic command (the definition of done) judges the
allowlist-scoped patch, and the source repo is never changed by the run. run_task starts a
run and returns its run_id at once; poll task_status (wait_s waits for the end), then read
task_result (patch, verdict, mismatches). apply_patch checks or lands a verified patch;
reject marks a run never to be applied. exec_start/exec_status/exec_stop run a command under
the experiment monitor."""

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Word = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


async def _work(fn: Callable[..., T], *args: Any) -> T:
    """Run `fn` in a worker thread; an expected failure becomes a tool error."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))
    except CodeRunnerError as exc:
        raise ToolError(exc.render()) from None


def _progress_message(view: dict[str, Any]) -> str:
    rounds = f"round {view.get('round') or 0} of {view.get('max_rounds') or '?'}"
    return f"{view.get('run_id')}: {view.get('state')}, {rounds}"


def build(  # noqa: C901 - one small nested handler per tool, registered on one server
    limits: Limits, *, log: ServerLog | None = None, registry: Registry | None = None
) -> Any:
    """The configured `MCPServer` (typed Any: the SDK's generic is internal detail)."""
    log = log or ServerLog()
    registry = registry or Registry()
    app: MCPServer[Any] = MCPServer(
        name="code-runner",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        middleware=[audit_middleware(log)],
    )

    @app.tool()
    async def run_task(spec: dict[str, Any]) -> dict[str, Any]:
        """Start a task run and return its run_id at once (the run goes on in the background).

        `spec` holds the fields of a code-runner task spec (see `code-runner schema`):
        task_id, title, prompt, backend, cwd (an allowed source repo; may be left out when
        the server serves one), allowlist, definition_of_done {command, assertion,
        timeout_s}, and optionally max_rounds, timeout_s, read_context, base, sandbox.
        output_dir is chosen by the server. It is validated exactly as `code-runner run`
        validates a spec file; every problem comes back at once.
        """
        return await _work(tasks.start, limits, registry, log, spec)

    @app.tool()
    async def task_status(
        run_id: str,
        ctx: Context[Any, Any],
        wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S)] = 0.0,
    ) -> dict[str, Any]:
        """Where a run is: state, round, max_rounds, best score, whether it ended.

        With wait_s > 0, waits up to that many seconds for the run to end and sends
        progress notifications (round of max_rounds) when the call carries a progress token.
        """
        entry = await _work(registry.get, run_id, TASK)
        deadline = time.monotonic() + wait_s
        shown: list[tuple[object, ...]] = []
        while True:
            view = await _work(tasks.status, registry, entry)
            now = (view.get("state"), view.get("round"))
            if not shown or now != shown[-1]:
                shown.append(now)  # progress must grow: it counts the states seen
                await ctx.report_progress(float(len(shown)), None, _progress_message(view))
            if view.get("terminal") or time.monotonic() >= deadline:
                return view
            await anyio.sleep(POLL_S)

    @app.tool()
    async def task_result(run_id: str) -> dict[str, Any]:
        """An ended run's outcome: status and reason, the DoD verdict, the patch (the
        allowlist-scoped diff against base: its first 256 KiB, with the whole file's size,
        sha256 and path), the changed files, and every mismatch (the worker's claim
        against the evidence, dropped changes, safety findings)."""
        entry = await _work(registry.get, run_id, TASK)
        return await _work(tasks.result, entry)

    @app.tool()
    async def apply_patch(
        run_id: str,
        mode: Literal["check", "apply", "commit"] = "check",
        author: Text | None = None,
    ) -> dict[str, Any]:
        """Decide on a passed run's patch, through the same code as `code-runner apply`.

        check: would it apply on the source's HEAD and pass the DoD there (in a disposable
        checkout; changes nothing). apply: land it in the source's working tree and run the
        DoD there, rolling back on failure. commit: the same, then commit only the patch's
        paths (author "NAME <EMAIL>" or the repo's git identity). apply and commit need a
        server started with --allow-apply.
        """
        entry = await _work(registry.get, run_id, TASK)
        return await _work(tasks.decide_on, limits, entry, mode, author, log)

    @app.tool()
    async def reject(run_id: str, reason: Text | None = None) -> dict[str, Any]:
        """Mark an ended run rejected in its record: it will never be applied."""
        entry = await _work(registry.get, run_id, TASK)
        return await _work(tasks.reject, entry, reason)

    @app.tool()
    async def exec_start(
        command: Annotated[list[Word], Field(min_length=1, max_length=256)],
        cwd: Text | None = None,
        timeout: Annotated[str, Field(max_length=32)] | None = None,
        success: Annotated[list[Text], Field(max_length=32)] | None = None,
    ) -> dict[str, Any]:
        """Start a command (program and arguments, no shell) under the experiment monitor
        in an allowed source dir, as `code-runner exec --yes` would; returns its run_id at
        once. timeout like '90s', '30m', '2h' (default 30m); success criteria like
        'exit_code == 0' or 'file out.csv > 0 bytes'."""
        return await _work(
            experiments.start, limits, registry, log, command, cwd, timeout, success or []
        )

    @app.tool()
    async def exec_status(run_id: str) -> dict[str, Any]:
        """An experiment's state, its latest check, and its result once it ended."""
        entry = await _work(registry.get, run_id, EXPERIMENT)
        return await _work(experiments.status, registry, entry)

    @app.tool()
    async def exec_stop(run_id: str) -> dict[str, Any]:
        """End an experiment's whole process tree (SIGTERM, grace, SIGKILL); its record
        says it was stopped. One an earlier server started is asked through its record,
        as `code-runner stop` does."""
        entry = await _work(registry.get, run_id, EXPERIMENT)
        return await _work(experiments.stop, registry, log, entry)

    @app.resource(tasks.RESULT_URI, mime_type="application/json")
    async def run_result(run_id: str) -> str:
        """The same outcome task_result returns, as a JSON document."""
        try:
            entry = await anyio.to_thread.run_sync(registry.get, run_id, TASK)
            found = await anyio.to_thread.run_sync(tasks.result, entry)
        except CodeRunnerError as exc:
            log.write("resource_refused", uri=f"code-runner://runs/{run_id[:80]}/result")
            raise ResourceError(exc.render()) from None
        return json.dumps(found, indent=2)

    return app


__all__ = ["INSTRUCTIONS", "MAX_WAIT_S", "build"]
