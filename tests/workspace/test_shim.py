"""The import shim that maps the source to the workspace is whole or absent, never torn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A write cut short part-way (a full disk; here a file size limit, whose EFBIG stands in for
# ENOSPC): a torn sitecustomize.py would be read by the next DoD, and a shim that does not
# map the source lets the DoD import the user's working copy instead of the workspace.
_CUT_SHORT = """
import resource, signal, sys
from pathlib import Path
from code_runner.workspace.python_env import write_shim
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))
try:
    write_shim(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), [])
except OSError as exc:
    print("refused:", exc.__class__.__name__)
"""


def test_a_shim_write_cut_short_leaves_no_torn_shim(tmp_path: Path) -> None:
    where, tree, source = tmp_path / "shim", tmp_path / "wt", tmp_path / "src"
    for path in (where, tree, source):
        path.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _CUT_SHORT, str(where), str(tree), str(source)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "refused:" in done.stdout, (done.stdout, done.stderr)
    assert not (where / "sitecustomize.py").exists()
    assert list(where.iterdir()) == []  # no draft left either
