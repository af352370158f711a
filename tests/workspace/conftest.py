"""Fixtures for the workspace tests: the build tools a real editable install needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tools_dir(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A directory holding a setuptools wheel that builds editable installs (>= 70.1 has
    `bdist_wheel` built in), or None when the interpreter's own setuptools already does."""
    probe = "import setuptools.command.bdist_wheel"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return None
    where = tmp_path_factory.mktemp("build-tools")
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(where)]
    done = subprocess.run([*argv, "setuptools>=70.1,<80"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no setuptools >= 70.1 to build editable installs with: {done.stderr}")
    return where
