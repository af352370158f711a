"""Is an HTTP error a refusal of the key? The shapes gateways and providers answer with.

A refused key is not always a 401: a LiteLLM proxy without a database answers a key it does
not know with HTTP 400 `{"error": {"message": "No connected db.", "type":
"no_db_connection"}}`; OpenAI says `invalid_api_key`, Anthropic `authentication_error`,
others `Unauthorized` or `invalid token` under 400, 404 or 422. Every 401, 403 and 407 is one;
words such as "forbidden" alone are not, under another status (a tool name can be forbidden).
A refusal is never retried: the same key gets the same answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

KEY_REFUSED = "the gateway refused the key"

_STATUSES = frozenset({400, 401, 403, 404, 407, 422})
# words that, in an error body, say the caller's credentials are the problem
_REFUSAL = re.compile(
    r"no[ _]connected[ _]db|no_db_connection"
    r"|invalid[ _-]?(api[ _-]?)?key\b|invalid_api_key|incorrect api key"
    r"|api key (is )?(not valid|invalid|expired|missing)"
    r"|authenticat(ion|e)[ _](error|failed|required)|authentication_error|not authenticated"
    r"|unauthori[sz]ed|invalid[ _](proxy[ _]server[ _])?token|token (is )?(invalid|expired)"
    r"|virtual key|key (not found|is blocked|has expired)|expired[ _]key",
    re.IGNORECASE,
)


def refusal_text(body: str) -> str:
    """The server's own message in an error body (OpenAI's and Anthropic's shapes), or the
    body's start."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    inner = data.get("error", data) if isinstance(data, Mapping) else data
    if isinstance(inner, Mapping):
        message = inner.get("message") or inner.get("detail") or inner.get("type")
        if isinstance(message, str):
            return message.strip()[:300]
    if isinstance(inner, str):
        return inner.strip()[:300]
    return body.strip()[:300]


def key_refused(status: int, body: str) -> bool:
    """Whether an error answer says the key (or its absence) was refused."""
    if status in (401, 403, 407):
        return True
    return status in _STATUSES and _REFUSAL.search(body) is not None


def key_fix(key_env: str | None, base_url: str) -> str:
    """What to do about a refused key, for the preflight error and a failed model call."""
    where = f"${key_env}" if key_env else "the backend's api_key_env (none is set)"
    return (
        f"put a key that {base_url} accepts in {where}: for a LiteLLM proxy, its master_key "
        "or a virtual key it issued (a proxy without a database accepts only the master_key); "
        "`code-runner doctor` checks every configured backend."
    )


__all__ = ["KEY_REFUSED", "key_fix", "key_refused", "refusal_text"]
