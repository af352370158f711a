"""Write docs/cli.md from the commands' own --help, so the docs cannot go stale.

python scripts/gen_cli_docs.py          # rewrite docs/cli.md
python scripts/gen_cli_docs.py --check  # exit 1 if docs/cli.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from code_runner.cli.main import cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def render() -> str:
    parts = ["# code-runner commands\n", "Generated from `--help` by `scripts/gen_cli_docs.py`.\n"]
    with click.Context(cli, info_name="code-runner", terminal_width=100) as ctx:
        parts.append(f"```\n{cli.get_help(ctx)}\n```\n")
        assert isinstance(cli, click.Group)
        for name in sorted(cli.list_commands(ctx)):
            command = cli.get_command(ctx, name)
            assert command is not None
            with click.Context(command, info_name=name, parent=ctx, terminal_width=100) as sub:
                parts.append(f"## `code-runner {name}`\n\n```\n{command.get_help(sub)}\n```\n")
    return "\n".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not DOC.exists() or DOC.read_text() != text:
            print("docs/cli.md is out of date: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
