"""The review page (hunk.md) holds the agent's bytes only as printable text.

An agent writes a patch full of terminal escapes (a title change, a screen clear, an OSC 52
clipboard write, a one-byte C1 CSI), bidi overrides that reorder what a reviewer reads, and
bare carriage returns that overprint a line. `cat hunk.md` must show them as escapes: no
ESC, BEL, C1 or bidi character, no bare CR. The patch itself keeps the exact bytes (it is
what gets applied and what the DoD judged)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.attacks import held
from tests.helpers.tasks import FIXED_BOTH, calc_repo, run_cli, write, write_task

pytestmark = pytest.mark.integration

HOSTILE = (
    "# \x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07 clear\n"
    "# \x9b31m one-byte CSI \u202eevil\u202c \u2066isolate\u2069\n"
    "# looks fine\rOVERPRINTED\n"
)
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_terminal_escapes_in_a_patch_are_neutralized_in_the_review(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(
        tmp_path,
        source,
        [[write("calc.py", FIXED_BOTH + HOSTILE)]],
        command="grep -q 'a [*] b' calc.py",
    )
    ran = run_cli("run", str(spec))
    assert ran.returncode == 0, ran.stderr
    review = (tmp_path / "out/fix-calc.hunk.md").read_bytes().decode("utf-8")
    found = sorted({f"U+{ord(c):04X}" for c in UNSAFE.findall(review)})
    held("review escapes: hunk.md holds no control or bidi character", found == [], found)
    held("review escapes: the escapes are shown", "\\x1b]0;owned\\x07" in review, review[-600:])
    patch = (tmp_path / "out/fix-calc.patch").read_bytes()
    lines = [f"+{line}\n".encode() for line in HOSTILE.split("\n") if line]
    held("review escapes: the patch keeps the exact bytes", all(x in patch for x in lines))
