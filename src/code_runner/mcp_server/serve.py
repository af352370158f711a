"""Run the server on stdio, or on streamable HTTP bound to a loopback address only.

There is no authentication on the HTTP transport, so it never listens beyond this machine:
a host that is not a loopback address is refused before anything starts. When the server
stops, the log names the runs still going; they finish on their own (see `runs`).
"""

from __future__ import annotations

import ipaddress
import socket

import anyio

from code_runner.errors import UsageError
from code_runner.mcp_server.limits import Limits
from code_runner.mcp_server.log import ServerLog
from code_runner.mcp_server.runs import Registry
from code_runner.mcp_server.server import build


def loopback_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` with HOST a loopback address (or `localhost`); `UsageError` otherwise."""
    host, colon, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(
            f"--http {text!r} is not HOST:PORT.", fix="write e.g. --http 127.0.0.1:8765."
        )
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError as exc:
        raise UsageError(f"--http: cannot resolve {host!r} ({exc}).", fix="use 127.0.0.1.") from exc
    if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        raise UsageError(
            f"--http {text}: {host} is not a loopback address; the HTTP transport has no "
            "authentication, so it listens on this machine only.",
            fix="use 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (a tunnel can reach it).",
        )
    return host, int(port_text)


def serve(limits: Limits, *, http: str | None = None) -> None:
    address = loopback_address(http) if http else None
    log = ServerLog()
    registry = Registry()
    app = build(limits, log=log, registry=registry)
    transport = f"http://{address[0]}:{address[1]}/mcp" if address else "stdio"
    log.write("server_started", transport=transport, limits=limits.describe())
    try:
        if address is None:
            anyio.run(app.run_stdio_async)
        else:
            host, port = address
            anyio.run(lambda: app.run_streamable_http_async(host=host, port=port))
    finally:
        running = registry.running()
        log.write(
            "server_stopped",
            still_running=[{"run_id": i, "pid": p} for i, p in running],
            note="each run goes on in its own session and finishes its record" if running else "",
        )


__all__ = ["loopback_address", "serve"]
