"""Agent and job text without terminal escapes or control characters."""

from __future__ import annotations

from code_runner.web.text import clean, clean_value


def test_terminal_escapes_are_removed_and_text_kept() -> None:
    raw = "\x1b[31mred\x1b[0m \x1b]0;title\x07ok \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x9b2Jz"
    assert clean(raw) == "red ok link z"


def test_controls_and_bidi_overrides_are_removed_newlines_kept() -> None:
    assert clean("a\x00b\x07c\u202ed\ttab\r\nline\rbar") == "abcd\ttab\nline\nbar"


def test_clean_value_reaches_every_string() -> None:
    assert clean_value({"k\x1b[1m": ["\x1b[2Jx", 3, {"y": "\x07z"}]}) == {"k": ["x", 3, {"y": "z"}]}
