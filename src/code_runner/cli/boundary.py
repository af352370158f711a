"""The one error boundary of the CLI: expected failures print a fix, bugs print a traceback.

Exit codes are stable (see `code_runner.errors`). A bug also writes a crash log to the
state dir, so a user can attach it to a report.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

import click

from code_runner import dirs
from code_runner.errors import CodeRunnerError

INTERNAL_ERROR_EXIT = 70


def _crash_log(exc: BaseException) -> str | None:
    try:
        crash_dir = dirs.state_dir() / "crashes"
        crash_dir.mkdir(parents=True, exist_ok=True)
        path = crash_dir / f"crash-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}.log"
        path.write_text(
            "argv: " + " ".join(sys.argv) + "\n\n" + "".join(traceback.format_exception(exc))
        )
        return str(path)
    except OSError:
        return None


def run_cli(group: click.Command, argv: list[str] | None = None) -> int:
    """Invoke a click command with our error handling; return the exit code."""
    try:
        result = group.main(args=argv, standalone_mode=False, prog_name="code-runner")
    except CodeRunnerError as exc:
        click.echo(f"error: {exc.render()}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        traceback.print_exc()
        where = _crash_log(exc)
        click.echo(
            "code-runner hit an internal error (a bug)."
            + (f" A crash log was written to {where}." if where else ""),
            err=True,
        )
        return INTERNAL_ERROR_EXIT
    return int(result) if isinstance(result, int) else 0


def entry(group: click.Command) -> Callable[[], None]:
    def main() -> None:
        sys.exit(run_cli(group))

    return main
