"""One streamed Chat Completions call through the official `openai` SDK, made robust.

- `stream=True`; tool-call deltas are joined by `index`; usage is read from the usage chunk
  (`stream_options.include_usage`) or any chunk that carries it.
- A stream that ends without a `finish_reason`, or with nothing in it, is a failure.
- Timeouts, connection errors, broken streams, 429 and 5xx are retried with bounded
  exponential backoff, honouring `Retry-After` / `retry-after-ms`; any other status is
  reported at once with the server's own message. The SDK's own retries are off, so every
  attempt is ours and is in the transcript.
- A request may take at most `request_timeout_s` (no byte for that long, or that long in
  all, however slowly the bytes trickle in), and never past the deadline of a wall-clock
  budget.
- A malformed stream (a data line that is not JSON or not UTF-8, a body that is not SSE or
  has another content type, a chunk of an unexpected shape, a line longer than
  `max_stream_line_bytes`) is a `stream_malformed` failure, retried like a cut stream; the
  offending bytes (at most 1 KiB) go into the transcript.
- An answer larger than `max_response_bytes` (the raw stream of one turn) ends the call at
  once, unretried: a `response_too_large` failure whose first bytes go into the transcript,
  and the round ends with `agent_error`.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from code_runner.agents.model.chunks import Accumulator
from code_runner.agents.model.refusal import KEY_REFUSED, key_fix, key_refused, refusal_text
from code_runner.agents.model.sdk import GuardedOpenAI, ParsedURLClient, request_template
from code_runner.agents.model.stream_guard import (
    EVIDENCE_BYTES,
    MalformedStream,
    ResponseTooLarge,
    StreamGuard,
    StreamTooLong,
    malformed,
)
from code_runner.agents.model.transcript import (
    FailureKind,
    ModelError,
    ModelTurn,
    Transcript,
)
from code_runner.config import OpenAIBackend

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUSES = frozenset({408, 409, 429})
_CHUNKS = openai.Stream[object]  # each chunk as plain JSON
_PROBE_BODY_BYTES = 4096  # of an error answer to the probe: enough for its message


def effective_base_url(settings: OpenAIBackend) -> str:
    """The endpoint a call goes to: the config's, else OPENAI_BASE_URL, else OpenAI's."""
    return (settings.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


@dataclass
class _Failure(Exception):
    kind: FailureKind
    message: str
    status: int | None = None
    retry_after_s: float | None = None
    retryable: bool = True
    evidence: str | None = None  # the offending bytes of a malformed stream, bounded


class OpenAIChatClient:
    """A `ModelClient` for one OpenAI-compatible endpoint."""

    def __init__(
        self,
        settings: OpenAIBackend,
        *,
        api_key: str | None,
        transcript: Transcript,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not settings.model:
            raise ValueError("a model is required")
        self.settings = settings
        self.transcript = transcript
        self.sleep = sleep
        self.base_url = effective_base_url(settings)
        self._sdk = GuardedOpenAI(
            api_key=api_key or "no-key",
            base_url=self.base_url,
            max_retries=0,
            timeout=settings.request_timeout_s,
            default_headers=dict(settings.headers) or None,
            http_client=ParsedURLClient(timeout=settings.request_timeout_s),
        )
        self._template = request_template(self._sdk, settings)

    def body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {"model": s.model, "messages": list(messages), "stream": True}
        if tools:
            body["tools"] = list(tools)
            if s.tool_choice:
                body["tool_choice"] = s.tool_choice
        if s.include_usage:
            body["stream_options"] = {"include_usage": True}
        if s.max_tokens is not None and s.send_max_tokens:
            body["max_tokens"] = s.max_tokens
        return {**body, **s.extra_body}

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        deadline: float | None,
        tag: Mapping[str, int],
    ) -> ModelTurn:
        body = self.body(messages, tools)
        attempt = 0
        while True:
            attempt += 1
            self.transcript.write("request", **tag, attempt=attempt, body=body)
            started = time.monotonic()
            try:
                turn = self._stream(body, deadline)
            except _Failure as failure:
                wait = self._retry_wait(failure, attempt, deadline)
                duration_s = round(time.monotonic() - started, 4)
                if wait is None:
                    final = self._final(failure, attempt)
                    self.transcript.write(
                        "error",
                        **tag,
                        attempt=attempt,
                        duration_s=duration_s,
                        retry_in_s=None,
                        **final.to_record(),
                        **_evidence(failure),
                    )
                    raise final from None
                self.transcript.write(
                    "error",
                    **tag,
                    attempt=attempt,
                    duration_s=duration_s,
                    retry_in_s=round(wait, 3),
                    failure=failure.kind.value,
                    status=failure.status,
                    message=failure.message,
                    **_evidence(failure),
                )
                self.sleep(wait)
                continue
            self.transcript.write("response", **tag, attempt=attempt, **turn.to_record())
            return turn

    def _stream(self, body: Mapping[str, Any], deadline: float | None) -> ModelTurn:  # noqa: C901 - one except per SDK failure, each its own failure kind
        started = time.monotonic()
        limit = self.settings.request_timeout_s
        if deadline is not None:
            limit = min(limit, deadline - started)
            if limit <= 0:
                raise _Failure(
                    FailureKind.DEADLINE, "a wall-clock budget is spent", retryable=False
                )
        acc = Accumulator()
        ttft: float | None = None
        guard = StreamGuard(
            limit_s=limit,
            max_line_bytes=self.settings.max_stream_line_bytes,
            max_response_bytes=self.settings.max_response_bytes,
        )
        self._sdk.guard = guard
        try:
            # `request` is what the SDK's `post` calls to send a body as is, and `object`
            # asks for the chunks as plain JSON: `create` would walk every message through
            # its TypedDict transform and build a model object per chunk, tens of ms per
            # turn on a long history, to produce the very same JSON and read three fields
            # of it.
            options = self._template.model_copy(update={"json_data": body, "timeout": limit})
            stream = self._sdk.request(object, options, stream=True, stream_cls=_CHUNKS)
            with stream:
                guard.response = stream.response
                _check_content_type(stream.response, guard)
                # the guard ends the stream once `limit` has passed, whatever arrives
                for chunk in stream:
                    if ttft is None:
                        ttft = time.monotonic() - started
                    acc.add(chunk)
        except (openai.APITimeoutError, StreamTooLong):
            raise self._too_long(time.monotonic() - started, deadline) from None
        except ResponseTooLarge as exc:
            raise _Failure(
                FailureKind.RESPONSE_TOO_LARGE,
                str(exc),
                retryable=False,
                evidence=exc.evidence,
            ) from None
        except (ValueError, MalformedStream) as exc:
            # json.JSONDecodeError and UnicodeDecodeError from inside the SDK's iterator,
            # ChunkShapeError from ours, MalformedStream from the guard
            bad = malformed(exc, guard)
            raise _Failure(
                FailureKind.STREAM_MALFORMED,
                f"the stream is malformed: {bad.message}",
                evidence=bad.evidence,
            ) from None
        except openai.APIStatusError as exc:
            raise _status_failure(exc) from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise _Failure(
                FailureKind.CONNECTION,
                f"connection to {self.base_url} failed: {type(cause).__name__}: {cause}",
            ) from None
        except openai.APIError as exc:
            raise _Failure(
                FailureKind.STREAM_ERROR, f"the stream reported an error: {exc.message}"
            ) from None
        finally:
            self._sdk.guard = None
        if acc.chunks == 0 and guard.head.strip():
            bad = malformed(
                MalformedStream(
                    f"the body ({guard.received} bytes) holds no SSE data line: it is not an "
                    "event stream",
                    bytes(guard.head),
                ),
                guard,
            )
            raise _Failure(
                FailureKind.STREAM_MALFORMED,
                f"the stream is malformed: {bad.message}",
                evidence=bad.evidence,
            )
        if acc.chunks == 0:
            raise _Failure(FailureKind.STREAM_INCOMPLETE, "the stream was empty (no chunks)")
        if acc.finish_reason is None:
            raise _Failure(
                FailureKind.STREAM_INCOMPLETE,
                f"the stream ended after {acc.chunks} chunk(s) without a terminal chunk "
                "(no finish_reason); the answer is incomplete",
            )
        return acc.turn(time.monotonic() - started, ttft)

    def _too_long(self, elapsed: float, deadline: float | None) -> _Failure:
        if deadline is not None and time.monotonic() >= deadline:
            return _Failure(
                FailureKind.DEADLINE, "a wall-clock budget ran out during the call", retryable=False
            )
        return _Failure(
            FailureKind.TIMEOUT,
            f"no complete answer within the request timeout of "
            f"{self.settings.request_timeout_s:g} s (waited {elapsed:.1f} s)",
        )

    def _retry_wait(self, failure: _Failure, attempt: int, deadline: float | None) -> float | None:
        s = self.settings
        if not failure.retryable or attempt > s.retries:
            return None
        if failure.retry_after_s is not None:
            if failure.retry_after_s > s.max_retry_wait_s:
                failure.message += (
                    f" (the server asked to wait {failure.retry_after_s:g} s, more than "
                    f"max_retry_wait_s = {s.max_retry_wait_s:g})"
                )
                return None
            wait = failure.retry_after_s
        else:
            wait = min(s.retry_backoff_s * 2 ** (attempt - 1), s.max_retry_wait_s)
        if deadline is not None and time.monotonic() + wait >= deadline:
            return None
        return wait

    def _final(self, failure: _Failure, attempts: int) -> ModelError:
        tried = f" (after {attempts} attempts)" if attempts > 1 else ""
        where = f"{self.base_url} (model {self.settings.model})"
        fix = {
            FailureKind.HTTP_STATUS: "read the server's message above; check the model name, "
            "the key and the backend's settings (`code-runner doctor`).",
            FailureKind.CONNECTION: "check that the endpoint is up and base_url is right.",
            FailureKind.TIMEOUT: "raise request_timeout_s or retries for this backend, or "
            "check the server's load.",
            FailureKind.STREAM_MALFORMED: f"{self.base_url} does not stream Chat Completions "
            "as OpenAI does (the offending bytes are in the transcript): check that base_url "
            "is the server's OpenAI-compatible root (often ending in /v1) and that no proxy "
            "on the way buffers or rewrites text/event-stream; raise max_stream_line_bytes "
            "if its lines are legitimately longer, or retries if it only happens sometimes.",
            FailureKind.RESPONSE_TOO_LARGE: "lower max_tokens for this backend, or raise "
            "max_response_bytes if answers this large are expected.",
        }.get(failure.kind, "check the server's health; raise retries for a flaky gateway.")
        if failure.message.startswith(KEY_REFUSED):
            fix = key_fix(self.settings.api_key_env, self.base_url)
        return ModelError(
            failure.kind,
            f"model call to {where} failed{tried}: {failure.message}",
            status=failure.status,
            attempts=attempts,
            fix=fix,
        )


def _evidence(failure: _Failure) -> dict[str, str]:
    return {"evidence": failure.evidence} if failure.evidence is not None else {}


def _check_content_type(response: Any, guard: StreamGuard) -> None:
    """A streamed answer is text/event-stream; no header at all is tolerated. Otherwise
    the body's first bytes are read (bounded in size and time) as evidence."""
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding not in ("", "identity"):
        # asked for identity: a compressed body's bytes reach the guard only once they
        # decode to something, so a trickle of empty blocks would pass every limit
        raise MalformedStream(
            f"the server answered with Content-Encoding {coding!r}, though asked for "
            "identity: a compressed stream's time and size cannot be bounded as it arrives"
        )
    value = response.headers.get("content-type")
    if value is None or value.split(";")[0].strip().lower() == "text/event-stream":
        return
    with contextlib.suppress(Exception):  # best effort: the evidence, not the verdict
        for _ in guard.watch(response.iter_bytes()):
            if len(guard.head) >= EVIDENCE_BYTES:
                break
    raise MalformedStream(
        f"the server answered with Content-Type {value!r}, not text/event-stream "
        "(a non-streamed answer, or not an OpenAI-compatible endpoint)",
        bytes(guard.head),
    )


def _status_failure(exc: openai.APIStatusError) -> _Failure:
    status = exc.status_code
    message = _server_message(exc)
    if key_refused(status, message):
        return _Failure(
            FailureKind.HTTP_STATUS,
            f"{KEY_REFUSED} (HTTP {status}: {message})",
            status=status,
            retryable=False,
        )
    retryable = status in _RETRY_STATUSES or status >= 500
    return _Failure(
        FailureKind.HTTP_STATUS,
        f"HTTP {status}: {message}",
        status=status,
        retry_after_s=retry_after_s(exc.response.headers) if retryable else None,
        retryable=retryable,
    )


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])[:2000]
        if isinstance(inner, str):
            return inner[:2000]
    try:
        text = exc.response.text.strip()
    except Exception:  # a streamed error body may already be closed
        text = ""
    return (text or exc.message)[:2000]


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, `Retry-After` (seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def url_problem(url: str) -> str | None:
    """What makes an http(s) URL unusable (whitespace or a control character, no host, a
    bad IPv6 literal or port), in words; None when it parses."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "has whitespace or a control character"
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if not parts.hostname:
        return "has no host"
    return None


def probe(settings: OpenAIBackend, api_key: str | None, *, timeout_s: float = 3.0) -> str | None:
    """Does the endpoint answer? None if it does; else what went wrong, in words.

    GET {base_url}/models: any HTTP answer means reachable (some servers have no /models),
    except one that refuses the key in any of its shapes (`refusal.key_refused`: a 401 or
    403, or a LiteLLM proxy's 400 "No connected db."), which starts with `KEY_REFUSED`.
    """
    url = effective_base_url(settings) + "/models"
    if not url.startswith(("http://", "https://")):
        return f"base_url {effective_base_url(settings)!r} is not an http(s) URL"
    malformed = url_problem(effective_base_url(settings))
    if malformed:
        return f"base_url {effective_base_url(settings)!r} {malformed}"
    request = urllib.request.Request(url, method="GET")  # noqa: S310 - http(s) from config
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    for name, value in settings.headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):  # noqa: S310
            return None
    except urllib.error.HTTPError as exc:
        body = _error_body(exc)
        if key_refused(exc.code, body):
            said = refusal_text(body)
            return f"{KEY_REFUSED} (GET {url}: HTTP {exc.code}" + (f", {said!r})" if said else ")")
        return None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{url} does not answer ({reason})"


def _error_body(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(_PROBE_BODY_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


__all__ = ["DEFAULT_BASE_URL", "OpenAIChatClient", "effective_base_url", "probe", "retry_after_s"]
