"""A scripted model server: real HTTP on 127.0.0.1, real SSE framing, every request logged.

The server knows HTTP, chunked transfer, SSE and faults; a `WireProtocol` (one module per
API: `chat_completions`, later the Responses API for Codex and the Messages API for Claude
Code) knows what a model turn looks like on its wire. Each request to the protocol's
streaming path consumes the next step of the script:

- a turn object of the protocol (rendered to SSE events), optionally wrapped in `Reply`
  to cut the stream, stall it, or slow it down;
- `Fail(status, body, headers)`: an HTTP error with a JSON body (a 429 with `Retry-After`,
  a 500, a 400 with the server's message);
- `Raw(pieces, ...)`: bytes written as they are, under any status and content type, with
  honest or broken HTTP framing and an optional drip (a malformed stream on purpose).

`connections` counts the TCP connections the server accepted, so a test can tell a client
that keeps its connection from one that opens a new one per request.

A request after the last step gets a 400 saying the script is exhausted, so a test that
asks for more than it scripted fails fast instead of retrying. `requests` holds every
request (path, headers, JSON body) with the time the server spent on it, so a benchmark
can subtract the server's own time from the client's.

    with ScriptedServer(ChatCompletions(), [Turn(tool_calls=[call("read_file", path="a")])]) as s:
        client = OpenAI(base_url=s.base_url, api_key="test")
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: `data` is sent as is (JSON text or a sentinel like [DONE])."""

    data: str
    event: str | None = None

    def encode(self) -> bytes:
        head = f"event: {self.event}\n" if self.event else ""
        lines = "".join(f"data: {line}\n" for line in self.data.split("\n"))
        return (head + lines + "\n").encode("utf-8")


class WireProtocol(Protocol):
    """What one model API looks like on the wire."""

    name: str
    base_path: str  # what an SDK's base URL ends with, e.g. /v1
    stream_path: str  # the path a streamed request is POSTed to, e.g. /v1/chat/completions

    def render(self, turn: Any, request: Mapping[str, Any]) -> list[SseEvent]:
        """The SSE events of one scripted turn, given the request body it answers."""
        ...

    def static_routes(self) -> Mapping[tuple[str, str], tuple[int, Any]]:
        """(method, path) -> (status, JSON body) for requests that consume no step."""
        ...

    def error_body(self, status: int, message: str) -> Any:
        """The JSON body of an HTTP error in this API's shape."""
        ...


class OpenAIStyle:
    """What OpenAI's APIs share on the wire: `/v1/models` and the shape of an error body.

    A subclass names its `stream_path`, renders turns, and may set an error's `type`
    (`error_types`) and `code` (`error_codes`) per HTTP status.
    """

    name = "openai-style"
    base_path = "/v1"
    error_types: Mapping[int, str] = {}
    error_codes: Mapping[int, str] = {}

    def __init__(self, models: Sequence[str]) -> None:
        self.models = tuple(models)
        self._counter = 0

    def static_routes(self) -> Mapping[tuple[str, str], tuple[int, Any]]:
        listing = {
            "object": "list",
            "data": [{"id": m, "object": "model", "owned_by": "scripted"} for m in self.models],
        }
        return {("GET", "/v1/models"): (200, listing)}

    def error_body(self, status: int, message: str) -> Any:
        kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
        kind = self.error_types.get(status, kind)
        code = self.error_codes.get(status)
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@dataclass(frozen=True)
class Reply:
    """A turn with transport effects.

    `cut_after`: send only the first N events, then end the stream (`abrupt=False`: a
    well-formed end of the HTTP body; `abrupt=True`: the socket is closed mid-body).
    `stall_after` / `stall_s`: pause after N events (a stalled stream).
    `event_delay_s`: pause before each event (a slow model).
    """

    turn: Any
    cut_after: int | None = None
    abrupt: bool = False
    stall_after: int | None = None
    stall_s: float = 0.0
    event_delay_s: float = 0.0


@dataclass(frozen=True)
class Fail:
    """An HTTP error response. `message` goes into the protocol's error body."""

    status: int
    message: str = "scripted failure"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None  # overrides the protocol's error body when given


@dataclass(frozen=True)
class Raw:
    """A response body written byte for byte: garbage, bad JSON, huge lines, wrong framing.

    `framing`: "chunked" sends each piece as one HTTP chunk and ends the body properly;
    "close" sends no length and ends the body by closing the connection; "lying" declares
    chunked transfer but writes the pieces unframed. `delay_s` pauses before each piece (a
    slow drip); `abrupt` closes the socket after the last piece without ending the body.
    """

    pieces: Sequence[bytes]
    status: int = 200
    content_type: str | None = "text/event-stream"
    framing: str = "chunked"
    delay_s: float = 0.0
    abrupt: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class LoggedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    step: int | None  # index of the script step it consumed; None for static routes
    received_at: float  # time.monotonic()
    server_s: float = 0.0  # time the server spent answering (stalls and delays included)
    status: int = 0


class ScriptedServer:
    """Serves a script of model turns over real HTTP until closed. Thread-safe."""

    def __init__(
        self, protocol: WireProtocol, steps: Sequence[Any] = (), *, host: str = "127.0.0.1"
    ) -> None:
        self.protocol = protocol
        self.steps: list[Any] = list(steps)
        self.requests: list[LoggedRequest] = []
        self._next = 0
        self._connections = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = _QuietServer((host, 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="scripted-server", daemon=True
        )

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # wakes stalled replies
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL an SDK is given: origin plus the protocol's path prefix (`/v1`)."""
        return self.origin + self.protocol.base_path

    # --- script ------------------------------------------------------------------------

    def add(self, *steps: Any) -> None:
        with self._lock:
            self.steps.extend(steps)

    @property
    def consumed(self) -> int:
        with self._lock:
            return self._next

    @property
    def connections(self) -> int:
        """How many TCP connections the server has accepted so far."""
        with self._lock:
            return self._connections

    def _connected(self) -> None:
        with self._lock:
            self._connections += 1

    def stream_requests(self) -> list[LoggedRequest]:
        return [r for r in self.requests if r.step is not None]

    def _take(self) -> tuple[int | None, Any]:
        with self._lock:
            if self._next >= len(self.steps):
                return None, None
            index = self._next
            self._next += 1
            return index, self.steps[index]

    def _log(self, request: LoggedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the server is closing; True if it is."""
        return self._closing.wait(seconds) if seconds > 0 else self._closing.is_set()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a cancelled or timed-out stream) is not a server error."""
        return None


def _handler_for(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        scripted = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each SSE event leaves at once, as from a real server
    scripted: ScriptedServer

    def setup(self) -> None:
        super().setup()
        self.scripted._connected()

    def log_message(self, format: str, *args: Any) -> None:
        return None  # quiet: the request log is `requests`

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        started = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        path = self.path.split("?", 1)[0]
        protocol = self.scripted.protocol
        logged = LoggedRequest(
            method=self.command,
            path=path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            step=None,
            received_at=started,
        )
        self.scripted._log(logged)
        try:
            static = protocol.static_routes().get((self.command, path))
            if static is not None:
                logged.status = static[0]
                self._json(static[0], static[1])
            elif self.command == "POST" and path == protocol.stream_path:
                self._step(logged, body if isinstance(body, dict) else {})
            else:
                logged.status = 404
                self._json(404, protocol.error_body(404, f"no route {self.command} {path}"))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            logged.server_s = time.monotonic() - started

    def _step(self, logged: LoggedRequest, body: dict[str, Any]) -> None:
        protocol = self.scripted.protocol
        index, step = self.scripted._take()
        logged.step = index
        if index is None:
            logged.status = 400
            message = f"scripted server: the script is exhausted ({len(self.scripted.steps)} steps)"
            self._json(400, protocol.error_body(400, message))
            return
        if isinstance(step, Fail):
            logged.status = step.status
            payload = (
                step.body
                if step.body is not None
                else protocol.error_body(step.status, step.message)
            )
            self._json(step.status, payload, step.headers)
            return
        if isinstance(step, Raw):
            logged.status = step.status
            self._raw(step)
            return
        reply = step if isinstance(step, Reply) else Reply(step)
        logged.status = 200
        self._stream(reply, protocol.render(reply.turn, body))

    def _stream(self, reply: Reply, events: list[SseEvent]) -> None:
        """A 200 event stream, with the reply's scripted cut, stall or drip."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for number, event in enumerate(events):
            if reply.cut_after is not None and number >= reply.cut_after:
                if reply.abrupt:
                    self._drop()
                    return
                break
            if reply.stall_after is not None and number == reply.stall_after:
                self.wfile.flush()
                if self.scripted._wait(reply.stall_s):
                    self._drop()
                    return
            if reply.event_delay_s and self.scripted._wait(reply.event_delay_s):
                self._drop()
                return
            last = number == len(events) - 1
            # the end of the body goes out with the last event, as real servers send it, so
            # a client that stops reading at [DONE] has read a complete response (and can
            # keep the connection)
            self._chunk(event.encode(), end=last)
            if last:
                return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _raw(self, raw: Raw) -> None:
        try:
            phrase = HTTPStatus(raw.status).phrase
        except ValueError:
            phrase = "Scripted"
        self.send_response(raw.status, phrase)
        if raw.content_type is not None:
            self.send_header("Content-Type", raw.content_type)
        if raw.framing in ("chunked", "lying"):
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        for name, value in raw.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()
        for piece in raw.pieces:
            if raw.delay_s and self.scripted._wait(raw.delay_s):
                self._drop()
                return
            if raw.framing == "chunked" and piece:
                self._chunk(piece)
            else:
                self.wfile.write(piece)
                self.wfile.flush()
        if raw.abrupt:
            self._drop()
        elif raw.framing == "chunked":
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        else:
            self._drop()

    def _chunk(self, data: bytes, *, end: bool = False) -> None:
        tail = b"0\r\n\r\n" if end else b""
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n" + tail)
        self.wfile.flush()

    def _drop(self) -> None:
        """Close the socket mid-body: the client sees a broken chunked stream."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Scripted"
        self.send_response(status, phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


__all__ = ["Fail", "LoggedRequest", "Raw", "Reply", "ScriptedServer", "SseEvent", "WireProtocol"]
