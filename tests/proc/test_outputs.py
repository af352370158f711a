"""Output paths: a device is never replaced by a file, whatever path a caller gives."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from code_runner import proc
from code_runner.proc.outputs import open_no_follow, real_dir


def _is_null_device() -> bool:
    info = os.lstat("/dev/null")
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == os.makedev(1, 3)


def test_dev_null_as_an_output_path_is_refused_and_stays_the_null_device() -> None:
    with pytest.raises(OSError, match="is a device"):
        open_no_follow(Path("/dev/null"), os.O_WRONLY | os.O_APPEND)
    with pytest.raises(OSError, match="is a device"):
        real_dir(Path("/dev/null"))
    assert _is_null_device()


def test_a_child_whose_output_path_is_dev_null_does_not_replace_it(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="is a device"):
        proc.spawn(
            ["true"],
            cwd=tmp_path,
            env={},
            stdout_path=Path("/dev/null"),
            stderr_path=tmp_path / "e",
        )
    assert _is_null_device()
