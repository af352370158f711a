"""`code-runner mcp`: other agents hand bounded, verified work to code-runner over MCP.

`limits` holds what the server may touch (sources, backends, apply), `runs` the children
it started, `reading` the one reader of their records, `tasks` and `experiments` the tools'
work, `server` the tools on the `mcp` SDK, `audit` and `log` the server's own record, and
`serve` the transports. Importing this package imports the SDK: the CLI loads it only when
`code-runner mcp` runs.
"""

from code_runner.mcp_server.limits import Limits, Refused
from code_runner.mcp_server.serve import loopback_address, serve

__all__ = ["Limits", "Refused", "loopback_address", "serve"]
