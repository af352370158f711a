"""Which error answers refuse the key: the shapes gateways and providers use, and the
look-alikes that are about something else."""

from __future__ import annotations

import json

import pytest

from code_runner.agents.model.refusal import key_fix, key_refused, refusal_text


def body(message: str, kind: str = "invalid_request_error") -> str:
    return json.dumps({"error": {"message": message, "type": kind}})


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (400, body("No connected db.", "no_db_connection")),  # LiteLLM without a database
        (400, body("Authentication Error, Invalid proxy server token passed.", "auth_error")),
        (401, body("Incorrect API key provided: sk-...")),
        (401, json.dumps({"type": "error", "error": {"type": "authentication_error"}})),
        (403, "Forbidden"),
        (407, "Proxy Authentication Required"),
        (400, body("API key not valid. Please pass a valid API key.")),
        (404, body("key not found")),
    ],
)
def test_a_refusal_in_any_common_shape(status: int, text: str) -> None:
    assert key_refused(status, text)


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (400, body("The model `m` does not support tools")),
        (400, body("invalid keyword argument 'foo'")),
        (400, body("Forbidden characters in tool name")),
        (404, body("Not Found")),
        (429, body("Rate limit reached")),
        (500, body("Unauthorized upstream")),  # a server error is the server's, retried
    ],
)
def test_other_errors_are_not_a_refusal(status: int, text: str) -> None:
    assert not key_refused(status, text)


def test_the_servers_own_words_and_the_fix() -> None:
    assert refusal_text(body("No connected db.")) == "No connected db."
    assert refusal_text("plain text answer\n") == "plain text answer"
    fix = key_fix("GATEWAY_KEY", "http://127.0.0.1:4000/v1")
    assert "$GATEWAY_KEY" in fix and "master_key" in fix and "http://127.0.0.1:4000/v1" in fix
