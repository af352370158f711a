"""`request_bodies` on a hostile transcript: every bad `messages_from` is a RecordError
that names the request, never a wrong history rebuilt in silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from code_runner.agents.model.transcript import request_bodies
from code_runner.errors import RecordError

FIRST = {"kind": "request", "seq": 2, "body": {"messages": [{"role": "user", "content": "a"}]}}


def _transcript(tmp_path: Path, start: object) -> Path:
    second = {
        "kind": "request",
        "seq": 3,
        "body": {"messages": [{"role": "user", "content": "b"}], "messages_from": start},
    }
    path = tmp_path / "t.transcript.jsonl"
    lines = [{"kind": "session", "seq": 1}, FIRST, second]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("start", [True, False, -1, 10**30, "1", 1.0, None])
def test_a_bad_messages_from_is_a_record_error(tmp_path: Path, start: object) -> None:
    with pytest.raises(RecordError, match="request 3 extends"):
        request_bodies(_transcript(tmp_path, start))


def test_a_good_messages_from_extends_the_request_before(tmp_path: Path) -> None:
    bodies = request_bodies(_transcript(tmp_path, 1))
    assert [m["content"] for m in bodies[1]["messages"]] == ["a", "b"]
