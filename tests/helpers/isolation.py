"""The guard behind every test's private HOME: the real state and config dirs are off limits.

`isolated_dirs` (tests/conftest.py) points HOME, XDG and the state dir at a temp dir. That
redirects code that reads the environment; the guard here also catches code that computes
the real location some other way: any call that resolves to the real state dir or the real
user config raises `RealDirUsed` instead of touching it (pre-commit's
`dont_write_to_home_directory`, for code-runner's own dirs).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from code_runner import config, dirs


class RealDirUsed(AssertionError):
    """A test reached for a real directory of the user running the suite."""


def _real_dirs() -> dict[str, Path]:
    return {"state dir": dirs.state_dir(), "user config": config.user_config_path()}


# The dirs code-runner would use for the user running the suite: read when the suite's
# conftest imports this module, before any test changes the environment.
REAL_DIRS = _real_dirs()


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _guarded(original: Callable[[], Path], what: str, real: Path) -> Callable[[], Path]:
    def guarded() -> Path:
        found = original()
        if _inside(found.absolute(), real.absolute()):
            raise RealDirUsed(
                f"a test resolved the real {what} ({found}); set the env vars that "
                "isolated_dirs sets (HOME, XDG_*, CODE_RUNNER_STATE_DIR) instead of unsetting them"
            )
        return found

    return guarded


def forbid_real_dirs(monkeypatch: pytest.MonkeyPatch, real: dict[str, Path] = REAL_DIRS) -> None:
    """Make every path function that could name a real dir fail loudly when it does."""
    monkeypatch.setattr(dirs, "state_dir", _guarded(dirs.state_dir, "state dir", real["state dir"]))
    monkeypatch.setattr(
        config,
        "user_config_path",
        _guarded(config.user_config_path, "user config", real["user config"]),
    )


def dev_null_intact() -> str | None:
    """None while /dev/null is the null device; else what replaced it, after putting the
    device back (as root) so one broken test does not break every git call after it."""
    try:
        st = os.lstat("/dev/null")
    except FileNotFoundError:
        found = "nothing"
    else:
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3:
            return None
        found = f"mode {stat.filemode(st.st_mode)}, {st.st_size} bytes"
    if os.geteuid() == 0:
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/dev/null")
        os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod("/dev/null", 0o666)
    return found


def mounts_under(base: Path) -> list[Path]:
    """Mount points at or below `base` in this mount namespace, deepest first (a workspace's
    overlay or an apply view that a killed run left for `gc`)."""
    found: list[Path] = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split(b" ")
            if len(fields) > 4:
                point = Path(os.fsdecode(fields[4].decode("unicode_escape").encode("latin-1")))
                if point == base or base in point.parents:
                    found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


# Each directory variable a test gets its own copy of, and where under its root it points.
ISOLATED_DIRS = (
    ("HOME", "home"),
    ("XDG_CONFIG_HOME", "config"),
    ("XDG_STATE_HOME", "state"),
    ("XDG_CACHE_HOME", "cache"),
    ("CODE_RUNNER_STATE_DIR", "state/code-runner"),
)
