"""Agent and job text made safe to show: terminal escapes and control characters removed.

HTML escaping is the templates' (autoescape is on everywhere); this module takes out what
a browser would not escape but a person should not see: ANSI/VT sequences (CSI, OSC, DCS,
single-character escapes), other C0/C1 controls, and bidi overrides that reorder text.
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]?"  # two-character escapes, or a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` without terminal escapes or control characters (newlines and tabs stay).

    A lone carriage return ends a progress-bar repaint: it becomes a newline."""
    text = _ESCAPES.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)


def clean_value(value: object) -> object:
    """`clean` applied to every string inside a JSON-like value."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(k)): clean_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_value(v) for v in value]
    return value


__all__ = ["clean", "clean_value"]
