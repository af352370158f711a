"""Full `code-runner run` invocations as an unprivileged user (uid/gid 65534).

A root test process drops to the user with `setpriv` for each run. The user needs a Python
that can import code-runner and its dependencies: the running interpreter when that user can
use it, else the system `python3` of the same version with a copy of the modules code-runner
imports (the test interpreter may live under `/root`, which that user cannot enter). Work
roots live under `/var/tmp` (masked inside the sandbox, like a source under `/home`) and
belong to that user, with a HOME and a state dir of its own.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import code_runner

NOBODY = 65534
SRC = Path(code_runner.__file__).resolve().parent.parent
PATH = "/usr/local/bin:/usr/bin:/bin"


def _as_nobody(argv: list[str], env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    assert setpriv is not None
    drop = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    return subprocess.run(
        [*drop, "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv],
        capture_output=True,
        text=True,
        check=False,
        **kw,
    )


def _imports_code_runner(python: str, pythonpath: str) -> bool:
    env = {"PATH": PATH, "PYTHONPATH": pythonpath, "HOME": "/"}
    probe = "import code_runner.cli.main, pydantic, click, yaml, psutil"
    return _as_nobody([python, "-c", probe], env).returncode == 0


def _third_party_modules() -> set[Path]:
    """The top-level packages and modules of site-packages that code-runner imports."""
    for info in pkgutil.walk_packages(code_runner.__path__, "code_runner."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found: set[Path] = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or "-packages" not in path or str(SRC) in path:
            continue
        parts = Path(path).parts
        index = max(i for i, p in enumerate(parts) if p.endswith("-packages"))
        found.add(Path(*parts[: index + 2]))
    return found


def _distribution_infos(modules: set[Path]) -> set[Path]:
    """The `*.dist-info` dirs beside the copied modules (some read their own version)."""
    found: set[Path] = set()
    for module in modules:
        for info in module.parent.glob("*.dist-info"):
            top = info / "top_level.txt"
            names = top.read_text().split() if top.is_file() else []
            stem = module.name.removesuffix(".py")
            if stem in names or info.name.split("-")[0].lower().replace(
                "_", ""
            ) == stem.lower().replace("_", ""):
                found.add(info)
    return found


@functools.cache
def runtime() -> tuple[str, str] | None:
    """(python, PYTHONPATH) with which uid 65534 can run code-runner, or None."""
    if os.geteuid() != 0 or shutil.which("setpriv", path="/usr/bin:/bin") is None:
        return None
    if _imports_code_runner(sys.executable, str(SRC)):
        return sys.executable, str(SRC)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path=PATH)
    if python is None:
        return None
    runtime_dir = Path(tempfile.mkdtemp(prefix="code-runner-test-runtime-", dir="/var/tmp"))
    atexit.register(shutil.rmtree, runtime_dir, ignore_errors=True)
    site = runtime_dir / version
    site.mkdir()
    for module in _third_party_modules():
        if module.is_dir():
            shutil.copytree(module, site / module.name, ignore=shutil.ignore_patterns("*.pyc"))
        else:
            shutil.copy2(module, site / module.name)
    for info in _distribution_infos(_third_party_modules()):  # importlib.metadata.version()
        shutil.copytree(info, site / info.name, ignore=shutil.ignore_patterns("RECORD"))
    for path in (runtime_dir, *runtime_dir.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    pythonpath = f"{SRC}:{site}"
    return (python, pythonpath) if _imports_code_runner(python, pythonpath) else None


@dataclass
class Nobody:
    """A work root, HOME and state dir that belong to uid 65534."""

    root: Path
    home: Path
    state: Path
    python: str
    pythonpath: str

    def own(self) -> None:
        """Give everything under the root to the user (after the test wrote files there)."""
        for path in (self.root, *self.root.rglob("*")):
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)

    def env(self) -> dict[str, str]:
        return {
            "PATH": PATH,
            "HOME": str(self.home),
            "CODE_RUNNER_STATE_DIR": str(self.state),
            "PYTHONPATH": self.pythonpath,
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
        }

    def run(self, spec: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """`code-runner run SPEC` as the user, in a process of its own."""
        self.own()
        argv = [self.python, "-m", "code_runner", "run", str(spec)]
        return _as_nobody(argv, self.env(), cwd=self.root, timeout=timeout)

    def cli(
        self, *args: str, cwd: Path | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Any `code-runner` command as the user (extra environment in `env`)."""
        self.own()
        argv = [self.python, "-m", "code_runner", *args]
        return _as_nobody(argv, {**self.env(), **env}, cwd=cwd or self.root, timeout=240)

    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "out/fix-calc.result.json").read_text())
        return data

    def events(self) -> list[dict[str, Any]]:
        text = (self.root / "out/fix-calc.events.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def patch(self) -> str:
        path = self.root / "out/fix-calc.patch"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture
def nobody() -> Iterator[Nobody]:
    """A runner that is not root. Skips where the machine cannot provide one."""
    found = runtime()
    if found is None:
        pytest.skip("needs root (to drop to uid 65534 with setpriv) and a Python it can run")
    root = Path("/var/tmp") / f"code-runner-nobody-{uuid.uuid4().hex[:12]}"
    root.mkdir(mode=0o755)
    home, state = root / "home", root / "state"
    home.mkdir()
    state.mkdir()
    who = Nobody(root, home, state, *found)
    who.own()
    try:
        yield who
    finally:
        shutil.rmtree(root, ignore_errors=True)
