"""One `redact()`: known secret values, and text that looks like a credential."""

from __future__ import annotations

from code_runner.agents.redact import MASK, redact


def test_known_values_and_look_alikes_are_masked() -> None:
    text = "curl -H 'Authorization: Bearer abc.def' --data api_key=x1 sk-abcdefgh hunter2"
    shown = redact(text, ["hunter2"])
    assert "hunter2" not in shown and "abc.def" not in shown and "x1" not in shown
    assert "sk-abcdefgh" not in shown and shown.count(MASK) == 4
    assert "Bearer " in shown and "api_key=" in shown  # what was masked stays readable


def test_short_values_are_not_secrets() -> None:
    assert redact("a b c", ["b"]) == "a b c"


def test_known_values_only_keep_code_exact() -> None:
    code = "def f(token=token):\n    return 'hunter2'\n"
    shown = redact(code, ["hunter2"], mask="[redacted]", look_alikes=False)
    assert shown == "def f(token=token):\n    return '[redacted]'\n"
