"""docs/cli.md is generated from --help; this fails when a command changed without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cli_docs_are_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
