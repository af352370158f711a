"""`code-runner mcp`: serve code-runner's tools to an MCP client (Claude Code, Codex, ...)."""

from __future__ import annotations

import click

from code_runner.errors import EnvironmentProblem


@click.command("mcp")
@click.option(
    "--allow-source",
    "sources",
    multiple=True,
    metavar="DIR",
    help="A git repo the server may run tasks on (symlinks resolved); repeatable.",
)
@click.option(
    "--allow-backend",
    "backends",
    multiple=True,
    metavar="NAME",
    help="A backend name tasks may use (e.g. scripted, openai, claude-cli); repeatable.",
)
@click.option(
    "--allow-apply",
    is_flag=True,
    help="Let apply_patch (and apply_to_source specs) change the allowed sources.",
)
@click.option(
    "--http",
    metavar="HOST:PORT",
    help="Serve streamable HTTP on a loopback address instead of stdio (e.g. 127.0.0.1:8765).",
)
def mcp_command(
    sources: tuple[str, ...], backends: tuple[str, ...], allow_apply: bool, http: str | None
) -> int:
    """Serve code-runner's tools to an MCP client (stdio, or --http on loopback).

    Tools: run_task (starts a run, returns its id at once), task_status, task_result,
    apply_patch (check | apply | commit), reject, exec_start, exec_status, exec_stop;
    resource code-runner://runs/ID/result. Only --allow-source repos and
    --allow-backend backends are served; nothing is applied to a source without
    --allow-apply. Runs outlive the server (each in its own session); records and the
    server log live in the state dir (mcp/).
    """
    try:
        import mcp  # noqa: F401  (the SDK is an optional extra)
    except ImportError as exc:
        raise EnvironmentProblem(
            "`code-runner mcp` needs the MCP SDK (the `mcp` package), which is not installed.",
            fix="pip install 'code-runner[mcp]'",
        ) from exc
    from code_runner.mcp_server import Limits, serve

    limits = Limits.of(sources, backends, allow_apply=allow_apply)
    serve(limits, http=http)
    return 0
