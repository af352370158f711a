"""Secret redaction: what an agent's record or its model may see of a secret.

Known secret values (an API key read from the environment) are always masked. Text that
looks like a credential (`Bearer ...`, `sk-...`, `api_key=...`, `token=...`) is masked too
where a secret may hide in text nobody wrote down as one: command lines, for example.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MASK = "<redacted>"
_MIN_SECRET_CHARS = 4  # shorter values would mask ordinary text
_LOOKS_SECRET = re.compile(
    r"(?i)(bearer\s+)\S+|\b(sk-[A-Za-z0-9_-]{6,})|((?:api[_-]?key|token|secret|password)=)[^\s,}\"']+"
)


def redact(
    text: str,
    secrets: Sequence[str] = (),
    *,
    mask: str = MASK,
    look_alikes: bool = True,
) -> str:
    """`text` with each known secret value, and anything that looks like a credential, masked.

    `look_alikes=False` masks only the known values: for text that must stay exact apart
    from them, such as a file an agent reads in order to edit it (`f(token=token)` is code).
    """
    for secret in secrets:
        if len(secret) >= _MIN_SECRET_CHARS:
            text = text.replace(secret, mask)
    if not look_alikes:
        return text

    def masked(match: re.Match[str]) -> str:
        prefix = match.group(1) or match.group(3) or ""
        return f"{prefix}{mask}"

    return _LOOKS_SECRET.sub(masked, text)


__all__ = ["MASK", "redact"]
