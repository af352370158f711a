"""docs/cli.md is generated from --help; this fails when a command changed without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from code_runner.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def test_cli_docs_are_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def _commands() -> list[tuple[str, click.Command]]:
    """Every leaf command of the real CLI, by its full name (lazy groups loaded)."""
    found: list[tuple[str, click.Command]] = []

    def walk(command: click.Command, name: str) -> None:
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for sub in command.list_commands(ctx):
                child = command.get_command(ctx, sub)
                assert child is not None, sub
                walk(child, f"{name} {sub}".strip())
        else:
            found.append((name, command))

    walk(cli, "")
    return found


def test_every_option_says_what_it_does_and_no_summary_is_cut() -> None:
    """Used to: a bare `--json`, `--port`, `--interval` or `plan run --source` in --help, and
    gc's one-line summary cut to "repair patches a killed..." in `code-runner --help`."""
    bare = [
        f"{name} {'/'.join(param.opts)}"
        for name, command in _commands()
        for param in command.params
        if isinstance(param, click.Option) and param.name != "help" and not param.help
    ]
    assert not bare, bare
    # docs/cli.md is --help at 100 columns (test_cli_docs_are_up_to_date keeps it so)
    listed = [line for line in (ROOT / "docs/cli.md").read_text().splitlines() if "  " in line]
    cut = [line.strip() for line in listed if line.rstrip().endswith("...")]
    assert not cut, cut
