"""`code-runner serve`: the web dashboard over one or more folders of run records."""

from __future__ import annotations

import importlib.util
import socket
import sys
import webbrowser
from pathlib import Path

import click

from code_runner.errors import EnvironmentProblem, UsageError


def _need_web_extra() -> None:
    missing = [m for m in ("starlette", "uvicorn", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        raise EnvironmentProblem(
            f"the dashboard needs {', '.join(missing)}, which is not installed.",
            fix="install the web extra: pip install 'code-runner[web]'",
        )


@click.command("serve")
@click.option(
    "--runs",
    "runs",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="A folder of run records to show (repeatable; default: the current directory).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    default=8765,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to bind (0: any free one).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the dashboard in a browser.")
def serve_command(runs: tuple[Path, ...], host: str, port: int, open_browser: bool) -> int:
    """Serve a web dashboard of the runs under --runs (task runs, exec runs, plans).

    Binds 127.0.0.1 by default. Any other address needs the access token printed once at
    start (open the printed URL; the token is then kept in a cookie). Every button runs
    the same code-runner command you would type. Nothing outside the --runs folders can
    be read, whatever the URL.
    """
    _need_web_extra()
    import uvicorn

    from code_runner.web import Guard, create_app

    roots = list(runs) or [Path.cwd()]
    for root in roots:
        if not root.is_dir():
            raise UsageError(f"--runs {root} is not a folder.", fix="pass a folder of run records.")
    guard = Guard.for_bind(host)
    app = create_app(roots, guard=guard)
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    url = f"http://{f'[{host}]' if ':' in host else host}:{bound}/"
    if guard.token is not None:
        url += f"?token={guard.token}"
        click.echo(f"{host} is not a loopback address: open this URL (the token is shown once)")
    click.echo(f"code-runner dashboard: {url}")
    sys.stdout.flush()
    if open_browser:
        webbrowser.open(url)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}).",
            fix="pick another --port (0 picks a free one) or another --host.",
        ) from None
    sock.listen(128)
    return sock


__all__ = ["serve_command"]
