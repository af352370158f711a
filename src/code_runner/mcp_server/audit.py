"""The server log's view of the protocol: every tool call and resource read, with its
arguments summarised and its outcome, whether our code refused it or the SDK did (a
wrong type, a missing field, an unknown tool never reach a tool function)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext

from code_runner.mcp_server.log import ServerLog, preview

ERROR_CHARS = 1000
_AUDITED = ("tools/call", "resources/read")


def _error_text(result: object) -> str | None:
    """The text of a tool error result (dict on the wire, or the SDK's model), else None."""
    data = result.model_dump() if hasattr(result, "model_dump") else result
    if not isinstance(data, Mapping):
        return None
    if not (data.get("isError") or data.get("is_error")):
        return None
    parts = [c.get("text", "") for c in data.get("content") or [] if isinstance(c, Mapping)]
    return "".join(str(p) for p in parts)[:ERROR_CHARS] or "error"


def audit_middleware(log: ServerLog) -> ServerMiddleware[Any]:
    async def audit(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = getattr(ctx, "method", None)
        if method not in _AUDITED:
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        what = {"tool": preview(params.get("name"))} if method == "tools/call" else {}
        if method == "tools/call":
            what["arguments"] = preview(params.get("arguments"))
        else:
            what["uri"] = preview(params.get("uri"))
        try:
            result = await call_next(ctx)
        except Exception as exc:
            log.write(method, **what, ok=False, error=str(exc)[:ERROR_CHARS])
            raise
        error = _error_text(result)
        log.write(method, **what, ok=error is None, **({"error": error} if error else {}))
        return result

    return audit


__all__ = ["audit_middleware"]
