"""The `openai` SDK's client as the model client drives it: its bytes read through a guard,
and what the SDK would redo identically on every call done once.

- `GuardedOpenAI` is the SDK's `OpenAI` client whose streams decode SSE through the current
  `StreamGuard`, whose request URL is joined to the base URL once, whose default headers
  are built once and without the SDK's telemetry, and whose User-Agent is the SDK's own;
- `ParsedURLClient` is the SDK's `DefaultHttpxClient` (its timeouts, limits and redirects)
  that parses each request URL once: the SDK hands httpx the URL as a string on every call,
  and httpx parses it again, the largest single cost of building a request;
- `request_template` is what `sdk.post("/chat/completions", ...)` would build for every
  call, without the SDK's telemetry headers.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx2
import openai
from openai._models import FinalRequestOptions

from code_runner.agents.model.stream_guard import StreamGuard
from code_runner.config import OpenAIBackend

_MAX_URLS = 64  # parsed URLs kept per client: a model client only ever asks for one


class ParsedURLClient(openai.DefaultHttpxClient):
    """The SDK's default httpx client, parsing each request URL once.

    An `httpx2.URL` is immutable and equal to what parsing its text gives, so handing httpx
    the parsed URL instead of its text builds the same request."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._urls: dict[str, httpx2.URL] = {}

    def build_request(self, method: str, url: httpx2.URL | str, **options: Any) -> httpx2.Request:
        if isinstance(url, str):
            parsed = self._urls.get(url)
            if parsed is None:
                parsed = httpx2.URL(url)
                if len(self._urls) < _MAX_URLS:
                    self._urls[url] = parsed
            url = parsed
        return super().build_request(method, url, **options)

    def __del__(self) -> None:
        # as the SDK's own client does: a client dropped unclosed lets go of its connection
        if not self.is_closed:
            with contextlib.suppress(Exception):
                self.close()


class GuardedOpenAI(openai.OpenAI):
    """The SDK's client, with every stream's bytes read through the current `StreamGuard`,
    each request URL joined to the base URL once (the SDK re-parses both per call), the
    SDK's own User-Agent, and its default headers built once, without its telemetry.

    The SDK's telemetry headers (`X-Stainless-*`: its version, the OS, the Python runtime
    and more) are nine of a request's seventeen headers, each one merged, normalised and
    validated again on every call by every layer below; a server has no use for them. A
    header the backend's `headers` names is sent as configured, whatever its name."""

    guard: StreamGuard | None = None

    def __init__(self, **options: Any) -> None:
        self._headers: dict[str, str | openai.Omit] | None = None
        super().__init__(**options)
        self._urls: dict[str, httpx2.URL] = {}
        configured = {name.lower() for name in self._custom_headers}
        self._headers = {
            name: value
            for name, value in super().default_headers.items()
            if not name.lower().startswith("x-stainless-") or name.lower() in configured
        }

    @property
    def default_headers(self) -> dict[str, str | openai.Omit]:
        # the key, organization and project of this client never change after it is made
        return super().default_headers if self._headers is None else self._headers

    @property
    def user_agent(self) -> str:
        # the SDK names the client's class: the server sees the SDK, not this subclass
        return f"OpenAI/Python {openai.__version__}"

    def _make_sse_decoder(self) -> Any:
        return self.guard.decoder() if self.guard is not None else super()._make_sse_decoder()

    def _prepare_url(self, url: str) -> httpx2.URL:
        # an httpx URL is immutable, and this client's base URL is never changed
        prepared = self._urls.get(url)
        if prepared is None:
            prepared = self._urls[url] = super()._prepare_url(url)
        return prepared


def request_template(sdk: openai.OpenAI, settings: OpenAIBackend) -> FinalRequestOptions:
    """What `sdk.post("/chat/completions", ...)` would build for every call, built once:
    the SDK fills each option left out from a deep copy of its default on every call, and
    a call only changes the body and the timeout (`model_copy(update=...)`).

    The telemetry headers the SDK adds per request (`X-Stainless-Retry-Count`, always 0
    with its retries off, and `X-Stainless-Read-Timeout`), and any other `X-Stainless-*`
    default the client still has, are left out unless the backend's `headers` names them."""
    telemetry = [*sdk.default_headers, "X-Stainless-Retry-Count", "X-Stainless-Read-Timeout"]
    configured = {name.lower() for name in settings.headers}
    headers: dict[str, str | openai.Omit] = {
        name: openai.omit
        for name in telemetry
        if name.lower().startswith("x-stainless-") and name.lower() not in configured
    }
    if "accept-encoding" not in configured:
        headers["Accept-Encoding"] = "identity"  # the guard bounds the bytes that arrive
    return FinalRequestOptions.construct(
        method="post", url="/chat/completions", files=None, content=None, headers=headers
    )


__all__ = ["GuardedOpenAI", "ParsedURLClient", "request_template"]
