"""Real small Python projects with a real editable install, as people set them up.

`editable_project` makes a git repo with a package `tinypkg` (src or flat layout) whose
`value()` returns 1 and a test that wants 2, then a real virtualenv (`python -m venv`) with
the project installed editable in one of the three forms pip and setuptools leave behind:
`pth` (an `__editable__*.pth` path entry), `finder` (an `__editable__*.pth` that installs a
finder) and `egg-link` (`setup.py develop`). Nothing is fetched: setuptools comes from
`tools_dir`, a directory of wheels.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.git import git, make_repo

PY = sys.executable
BROKEN = "def value():\n    return 1\n"
FIXED = "def value():\n    return 2\n"
WRONG = "def value():\n    return 3\n"
TEST = "from tinypkg import value\n\n\ndef test_value():\n    assert value() == 2\n"
DOD = "python -m pytest -q -p no:cacheprovider test_value.py"

_PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tinypkg"
version = "0.1"
"""
_SRC_CFG = '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
_FLAT_CFG = '[tool.setuptools]\npackages = ["tinypkg"]\n'


def module_path(layout: str) -> str:
    return "src/tinypkg/__init__.py" if layout == "src" else "tinypkg/__init__.py"


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{argv} failed:\n{done.stdout}\n{done.stderr}")


def make_venv(prefix: Path, tools_dir: Path | None) -> Path:
    """A real virtualenv that sees the system's packages (pytest) and a recent setuptools."""
    _run([PY, "-m", "venv", "--without-pip", "--system-site-packages", str(prefix)], prefix.parent)
    python = prefix / "bin" / "python"
    if tools_dir is not None:
        pip = [PY, "-m", "pip", "--python", str(python), "install", "-q", "--no-index"]
        _run([*pip, "--find-links", str(tools_dir), "setuptools>=70.1,<80"], prefix.parent)
    return python


def editable_project(
    root: Path, *, layout: str, form: str, tools_dir: Path | None, env_at: Path | None = None
) -> Path:
    """A committed project at `root / "source"` with an editable install in `.venv` (or in
    the environment at `env_at`, which may be outside the repo)."""
    pyproject = _PYPROJECT + (_SRC_CFG if layout == "src" else _FLAT_CFG)
    files = {
        "pyproject.toml": pyproject,
        module_path(layout): BROKEN,
        "test_value.py": TEST,
        ".gitignore": ".venv/\nvenv/\n*.egg-info/\n__pycache__/\nbuild/\n",
    }
    if form == "egg-link":
        files["setup.py"] = "from setuptools import setup\n\nsetup()\n"
    source = make_repo(root / "source", files)
    prefix = env_at if env_at is not None else source / ".venv"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    python = make_venv(prefix, tools_dir)
    if form == "egg-link":
        _run([str(python), "setup.py", "-q", "develop", "--no-deps"], source)
    else:
        # setuptools writes a path entry for the src layout and a finder for the flat one
        assert form == ("pth" if layout == "src" else "finder"), (layout, form)
        argv = [PY, "-m", "pip", "--python", str(python), "install", "-q", "--no-index"]
        _run([*argv, "--no-build-isolation", "--no-deps", "-e", "."], source)
    git(source, "update-index", "-q", "--refresh")  # the index is no longer racily clean
    return source


def _uv() -> str:
    """uv's binary, from the `uv` package on PyPI (in the `dev` extra)."""
    from uv import find_uv_bin

    return str(find_uv_bin())


def uv_project(root: Path, tools_dir: Path | None) -> Path:
    """A committed src-layout project managed by uv: `uv venv` made its `.venv` (a uv
    `pyvenv.cfg`, no pip) and `uv pip install -e .` installed it editable."""
    source = make_repo(
        root / "source",
        {
            "pyproject.toml": _PYPROJECT + _SRC_CFG,
            module_path("src"): BROKEN,
            "test_value.py": TEST,
            ".gitignore": ".venv/\n*.egg-info/\n__pycache__/\nbuild/\n",
        },
    )
    uv = _uv()
    _run([uv, "venv", "-q", "--system-site-packages", "--python", PY, ".venv"], source)
    install = [uv, "pip", "install", "-q", "--offline", "--python", ".venv/bin/python"]
    if tools_dir is not None:  # build isolation, with a setuptools that builds editables
        install += ["--no-index", "--find-links", str(tools_dir)]
    else:
        install += ["--no-build-isolation", "--no-deps"]
    _run([*install, "-e", "."], source)
    git(source, "update-index", "-q", "--refresh")
    return source


_POETRY_PYPROJECT = """\
[tool.poetry]
name = "tinypkg"
version = "0.1.0"
description = ""
authors = []
packages = [{ include = "tinypkg", from = "src" }]

[build-system]
requires = ["poetry-core>=1.0"]
build-backend = "poetry.core.masonry.api"
"""


def poetry_project(root: Path, env_at: Path) -> Path:
    """A committed src-layout poetry project whose environment lives outside the repo, where
    poetry keeps it (`.../pypoetry/virtualenvs/NAME-HASH-py3.X`), with the project installed
    as poetry's installer does it: poetry-core's editable wheel (a `tinypkg.pth` holding the
    source's `src`) installed into the environment."""
    from poetry.core.factory import Factory
    from poetry.core.masonry.builders.wheel import WheelBuilder

    source = make_repo(
        root / "source",
        {
            "pyproject.toml": _POETRY_PYPROJECT,
            module_path("src"): BROKEN,
            "test_value.py": TEST,
            ".gitignore": "__pycache__/\ndist/\n",
        },
    )
    env_at.parent.mkdir(parents=True, exist_ok=True)
    python = make_venv(env_at, None)
    dist = root / "poetry-dist"
    dist.mkdir()
    wheel = WheelBuilder.make_in(Factory().create_poetry(source), dist, editable=True)
    pip = [PY, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps"]
    _run([*pip, str(dist / wheel)], root)
    return source
