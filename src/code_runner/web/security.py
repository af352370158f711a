"""The dashboard's walls, as one ASGI middleware in front of every route.

- Host: on a loopback bind only a loopback name is answered, so a web page cannot reach the
  dashboard by pointing its own domain at 127.0.0.1 (DNS rebinding).
- Token: on any other bind every request needs the token printed once at start. A visit to
  `/?token=...` sets it as an HttpOnly, SameSite=Strict cookie and drops it from the URL.
- CSRF: every request that is not GET or HEAD carries the page's CSRF token in the
  `X-CSRF-Token` header (forms: a `csrf` field is not accepted), and a foreign `Origin` is
  refused; a browser does not let another site set that header without the server's consent.
- Headers: a content security policy that runs only the package's own scripts, no framing,
  no sniffing, no referrer.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_COOKIE = "code_runner_token"  # noqa: S105 - the cookie's name, not a secret
CSRF_HEADER = "x-csrf-token"
_SAFE_METHODS = {"GET", "HEAD"}
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


def is_loopback(host: str) -> bool:
    """True for `localhost` and any loopback address (IPv4 or IPv6)."""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Guard:
    """The secrets of one server: the CSRF token always, the access token off loopback."""

    host: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    token: str | None = None

    @classmethod
    def for_bind(cls, host: str) -> Guard:
        return cls(host, token=None if is_loopback(host) else secrets.token_urlsafe(32))


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _same(given: str, wanted: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), wanted.encode())


class GuardMiddleware:
    def __init__(self, app: App, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await _plain(send, *refusal)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = self.guard.token
        if token is not None and _same((query.get("token") or [""])[0], token):
            await _plain(
                send, 303, "signed in", [(b"location", b"/"), (b"set-cookie", _cookie(token))]
            )
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        host = _header(scope, b"host")
        name = urlsplit(f"//{host}").hostname or ""
        if self.guard.token is None and name not in _LOOPBACK_NAMES and not is_loopback(name):
            return 421, "this dashboard answers only on a loopback address (use 127.0.0.1)"
        if self.guard.token is not None and not self._signed_in(scope):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if not _same((query.get("token") or [""])[0], self.guard.token):
                return 401, "open the URL with the token that `code-runner serve` printed"
        if scope["method"] not in _SAFE_METHODS:
            if not _same(_header(scope, CSRF_HEADER.encode()), self.guard.csrf):
                return 403, "this request has no valid CSRF token; reload the page and retry"
            origin = _header(scope, b"origin")
            if origin and urlsplit(origin).netloc != host:
                return 403, "this request came from another site"
        return None

    def _signed_in(self, scope: Scope) -> bool:
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(_header(scope, b"cookie"))
        except ValueError:
            return False
        morsel = cookie.get(TOKEN_COOKIE)
        return (
            morsel is not None
            and self.guard.token is not None
            and (_same(morsel.value, self.guard.token))
        )


def _cookie(token: str) -> bytes:
    return f"{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/".encode()


async def _plain(
    send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *_HEADERS,
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["CSP", "CSRF_HEADER", "TOKEN_COOKIE", "Guard", "GuardMiddleware", "is_loopback"]
