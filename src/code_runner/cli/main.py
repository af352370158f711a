"""The `code-runner` command: one group, one module per command family."""

from __future__ import annotations

import click

from code_runner import __version__
from code_runner.cli.apply_cmd import apply_command, reject_command
from code_runner.cli.boundary import entry
from code_runner.cli.demo_cmd import demo_command
from code_runner.cli.inspect_cmd import result_command, status_command, watch_command
from code_runner.cli.maintenance import doctor_command, gc_command, schema_command
from code_runner.cli.plan_cmd import plan_group
from code_runner.cli.replay_cmd import replay_command
from code_runner.cli.run_cmd import dry_run_command, run_command
from code_runner.cli.supervise_cmd import attach_command, stop_command, summarize_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="code-runner")
def cli() -> None:
    """Run bounded code work in a disposable workspace and prove what happened.

    Exit codes: 0 success, 1 ran but did not pass, 2 bad input, 3 environment,
    4 safety violation, 5 bad record, 70 internal error, 124 timeout, 130 interrupted.
    """


for command in (
    run_command,
    dry_run_command,
    status_command,
    watch_command,
    result_command,
    doctor_command,
    gc_command,
    schema_command,
    demo_command,
    apply_command,
    reject_command,
    replay_command,
    stop_command,
    attach_command,
    summarize_command,
    plan_group,
):
    cli.add_command(command)

try:
    from code_runner.cli.exec_cmd import exec_command
except ImportError:  # the experiment monitor is optional at import time
    pass
else:
    cli.add_command(exec_command)

main = entry(cli)
