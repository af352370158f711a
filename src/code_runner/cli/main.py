"""The `code-runner` command: one group, one module per command family, loaded on use.

A command's module (and everything it imports) is loaded only when that command runs, so
`code-runner --help` and a mistyped command cost the start of Python and click, not the whole
product. The group's help lists each command from the short help kept in `COMMANDS`; a test
checks that it matches the command's own.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click
from click.utils import make_default_short_help

from code_runner import __version__, tuning
from code_runner.cli.boundary import entry


class Lazy(NamedTuple):
    target: str  # "module:attribute"
    short_help: str


COMMANDS: dict[str, Lazy] = {
    "answer": Lazy(
        "code_runner.cli.answer_cmd:answer_command",
        "Answer a running experiment's alert (`code-runner exec`) from another terminal.",
    ),
    "apply": Lazy(
        "code_runner.cli.apply_cmd:apply_command",
        "Apply a finished run's verified patch to its source repo.",
    ),
    "attach": Lazy(
        "code_runner.cli.supervise_cmd:attach_command",
        "Watch an agent CLI run live in its tmux pane (runs started with --tmux).",
    ),
    "batch": Lazy(
        "code_runner.cli.batch_cmd:batch_command",
        "Run many task specs, or the cells of an exec sweep, on N slots or on Ray.",
    ),
    "demo": Lazy(
        "code_runner.cli.demo_cmd:demo_command",
        "Build a sample repo with failing tests and fix it with the scripted backend.",
    ),
    "doctor": Lazy(
        "code_runner.cli.maintenance:doctor_command",
        "Check the machine: tools, backends, which credentials are set (by name only).",
    ),
    "dry-run": Lazy(
        "code_runner.cli.run_cmd:dry_run_command", "Validate a spec and show what a run would do."
    ),
    "exec": Lazy(
        "code_runner.cli.exec_cmd:exec_command",
        "Run COMMAND exactly as given, under the experiment monitor.",
    ),
    "finalize": Lazy(
        "code_runner.cli.supervise_cmd:finalize_command",
        "Rewrite a finished run's result.md, eval.md and skill-review.md from its evidence.",
    ),
    "gc": Lazy(
        "code_runner.cli.maintenance:gc_command",
        "Clean up after killed runs: workspaces, half-applied patches, plans, experiments.",
    ),
    "plan": Lazy(
        "code_runner.cli.plan_cmd:plan_group",
        "Plans: several items run in order, each verified and committed by code-runner.",
    ),
    "mcp": Lazy(
        "code_runner.cli.mcp_cmd:mcp_command",
        "Serve code-runner's tools to an MCP client (stdio, or --http on loopback).",
    ),
    "reject": Lazy(
        "code_runner.cli.apply_cmd:reject_command",
        "Mark a finished run rejected in its record; it will never be applied.",
    ),
    "replay": Lazy(
        "code_runner.cli.replay_cmd:replay_command",
        "Re-run a recorded run from its transcript with no network; exit 0 iff it reproduces.",
    ),
    "result": Lazy(
        "code_runner.cli.inspect_cmd:result_command",
        "Show a result file (or an output dir's); exit 0 iff dod_passed.",
    ),
    "run": Lazy(
        "code_runner.cli.run_cmd:run_command",
        "Run a task spec; exit 0 iff the DoD passed on the patch.",
    ),
    "schema": Lazy(
        "code_runner.cli.maintenance:schema_command", "Print the JSON Schema of the task spec."
    ),
    "serve": Lazy(
        "code_runner.cli.serve_cmd:serve_command",
        "Serve a web dashboard of the runs under --runs (task runs, exec runs, plans).",
    ),
    "status": Lazy(
        "code_runner.cli.inspect_cmd:status_command",
        "Show a run's state (TARGET: output dir, status.json or result.json).",
    ),
    "stop": Lazy(
        "code_runner.cli.supervise_cmd:stop_command",
        "End a running run cleanly from another terminal (any backend).",
    ),
    "summarize": Lazy(
        "code_runner.cli.supervise_cmd:summarize_command",
        "One line per run under RUNS_ROOT (default: .) and totals, for every backend.",
    ),
    "trust": Lazy(
        "code_runner.cli.trust_cmd:trust_command",
        "Trust SOURCE's code-runner.toml (default: the current directory's) as it is now.",
    ),
    "watch": Lazy(
        "code_runner.cli.inspect_cmd:watch_command",
        "Follow a run live until it reaches a terminal state; exit 0 iff it passed.",
    ),
}


def load(name: str) -> click.Command:
    """The command registered as `name`, its module imported now."""
    module_name, attribute = COMMANDS[name].target.split(":")
    command = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{COMMANDS[name].target} is not a click command")
    return command


class LazyGroup(click.Group):
    """A group whose commands are imported only when one of them is run."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists commands, from the kept short help instead of the modules."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, make_default_short_help(COMMANDS[name].short_help, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="code-runner")
def cli() -> None:
    """Run bounded code work in a disposable workspace and prove what happened.

    Exit codes: 0 success, 1 ran but did not pass, 2 bad input, 3 environment,
    4 safety violation, 5 bad record, 70 internal error, 124 timeout, 130 interrupted.
    """
    tuning.check_all()  # a bad CODE_RUNNER_* value stops every command before it creates anything


main = entry(cli)
