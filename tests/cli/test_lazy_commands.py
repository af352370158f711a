"""The command group loads a command's module only when that command runs."""

from __future__ import annotations

import subprocess
import sys

import click

from code_runner.cli.main import COMMANDS, cli, load


def test_every_listed_command_loads_and_its_kept_help_is_its_own() -> None:
    for name, lazy in COMMANDS.items():
        command = load(name)
        assert command.name == name, lazy.target
        assert command.get_short_help_str(10_000) == lazy.short_help, name


def test_the_group_lists_exactly_the_registered_commands() -> None:
    with click.Context(cli) as ctx:
        assert isinstance(cli, click.Group)
        assert cli.list_commands(ctx) == sorted(COMMANDS)
        assert cli.get_command(ctx, "no-such-command") is None


def test_help_imports_no_command_module() -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from code_runner.cli.main import cli\n"
        "result = CliRunner().invoke(cli, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('code_runner'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    heavy = {"code_runner.runner", "code_runner.apply", "code_runner.monitor", "code_runner.agents"}
    assert not loaded & heavy, sorted(loaded)
    assert "code_runner.cli.main" in loaded
