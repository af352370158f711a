"""Agent-CLI runs for tests: the real Codex and Claude Code CLIs (installed by
scripts/bootstrap into .tools/agent-clis), a calc repo, a spec whose backend points the CLI
at a scripted server on 127.0.0.1, and `code-runner run` in a real process.

A CLI that is not installed fails the test under CI (CI=true) and skips it elsewhere,
always with the command that installs it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.git import make_repo
from tests.helpers.programs import installed_program
from tests.helpers.tasks import fingerprint, run_cli

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
CLI_BIN_DIR = REPO / ".tools" / "agent-clis" / "node_modules" / ".bin"
KEY_ENV = "CR_TEST_CLI_KEY"
KEY = "sk-test-c0ffee1234567890-secret"
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
CHECK = (
    "from calc import add, mul\n"
    "assert add(2, 3) == 5, 'add(2, 3) should be 5'\n"
    "assert mul(2, 3) == 6, 'mul(2, 3) should be 6'\n"
    "print('2 passed')\n"
)
DOD = f"{shlex.quote(PY)} check_calc.py"
_INSTALL = "./scripts/bootstrap --tests (npm install of @openai/codex, @anthropic-ai/claude-code)"
BIN_ENV = {"codex": "CODE_RUNNER_CODEX_BIN", "claude": "CODE_RUNNER_CLAUDE_BIN"}


def cli_program(name: str) -> str:
    """The installed CLI, or fail (CI) / skip (elsewhere) saying how to install it."""
    candidate = os.environ.get(BIN_ENV[name]) or str(CLI_BIN_DIR / name)
    return installed_program(candidate, f"the {name} CLI", _INSTALL)


def codex_program(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Codex (for a fixture), with workspaces where its own sandbox can reach them.

    Codex's sandbox runs it in a user namespace, where a directory on the way to the
    workspace that only root may search is closed. Workspaces (and CODEX_HOME in them) go
    under /var/tmp, so a test elsewhere that leaves /tmp closed cannot break these.
    """
    program = cli_program("codex")
    monkeypatch.setenv(BIN_ENV["codex"], program)
    monkeypatch.setenv(KEY_ENV, KEY)
    base = Path("/var/tmp")
    if not (base.is_dir() and open_path(base)):
        yield program
        return
    state = Path(tempfile.mkdtemp(prefix="code-runner-e2e-", dir=base))
    state.chmod(0o755)
    monkeypatch.setenv("CODE_RUNNER_STATE_DIR", str(state))
    try:
        yield program
    finally:
        shutil.rmtree(state, ignore_errors=True)


def open_path(path: Path) -> bool:
    """Every directory on the way to `path` can be searched by anyone."""
    return all(os.stat(p).st_mode & 0o001 for p in [*reversed(path.parents), path])


def backend(kind: str, base_url: str, **options: object) -> str:
    """`codex-cli:...` / `claude-cli:...` for the scripted server, test-speed timeouts."""
    values: dict[str, object] = {
        "base_url": base_url,
        "model": "scripted-model",
        "api_key_env": KEY_ENV,
        "idle_timeout_s": 20,
        **options,
    }
    words = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in values.items())
    return f"{kind}:{words}"


@dataclass
class CliRun:
    root: Path
    source: Path
    spec_path: Path
    out: Path
    before: dict[str, str]
    task_id: str = "fix-calc"
    proc: Any = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def result(self) -> dict[str, Any]:
        data = json.loads((self.out / f"{self.task_id}.result.json").read_text())
        assert isinstance(data, dict)
        return data

    def events(self) -> list[dict[str, Any]]:
        path = self.out / f"{self.task_id}.events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events()]

    def file(self, suffix: str) -> Path:
        return self.out / f"{self.task_id}.{suffix}"

    def patch(self) -> str:
        return self.file("patch").read_text()

    def source_unchanged(self) -> bool:
        return fingerprint(self.source) == self.before

    def output(self) -> str:
        return str(self.proc.stdout) + str(self.proc.stderr)


def prepare(
    root: Path,
    backend_string: str,
    *,
    allowlist: list[str] | None = None,
    max_rounds: int = 1,
    task_id: str = "fix-calc",
    out: Path | None = None,
    timeout_s: float = 120,
    sandbox: str = "auto",
) -> CliRun:
    root.mkdir(parents=True, exist_ok=True)
    source = root / "source"
    if not source.exists():
        make_repo(
            source, {"calc.py": BUGGY, "check_calc.py": CHECK, ".gitignore": "__pycache__/\n"}
        )
    out_dir = out or root / "out"
    spec = {
        "task_id": task_id,
        "title": "Fix the calculator",
        "prompt": "calc.add and calc.mul are wrong; fix them so check_calc.py passes.",
        "backend": backend_string,
        "cwd": str(source),
        "output_dir": str(out_dir),
        "allowlist": allowlist or ["calc.py"],
        "definition_of_done": {"command": DOD, "assertion": "exit_code == 0", "timeout_s": 60},
        "max_rounds": max_rounds,
        "timeout_s": timeout_s,
        "sandbox": sandbox,  # auto: code-runner's OS sandbox around the DoD, where it works
    }
    spec_path = root / f"{task_id}.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    return CliRun(root, source, spec_path, out_dir, fingerprint(source), task_id=task_id)


def run(cli_run: CliRun, *args: str, timeout: float = 180) -> CliRun:
    started = time.monotonic()
    cli_run.proc = run_cli("run", str(cli_run.spec_path), *args, timeout=timeout)
    cli_run.seconds = time.monotonic() - started
    return cli_run


def leftovers(*needles: str) -> list[str]:
    """Live processes whose command line mentions any of `needles` (CLIs, workspaces)."""
    found: list[str] = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(process.info["cmdline"] or [])
        except psutil.Error:
            continue
        if process.pid != os.getpid() and any(n and n in command for n in needles):
            found.append(f"{process.pid}: {command[:200]}")
    return found


def wait_for(predicate: Any, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def processes_of(program: str) -> Iterator[psutil.Process]:
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(program in part for part in process.info["cmdline"] or []):
                yield process
        except psutil.Error:
            continue


def success_block(changed: str = "calc.py") -> str:
    return (
        "Fixed add and mul.\n\n"
        "RESULT_STATUS: SUCCESS\n"
        "SUMMARY: add now adds and mul multiplies.\n"
        f"CHANGED_FILES: {changed}\n"
        "VERIFICATION: ran check_calc.py: 2 passed\n"
        "OPEN_DECISIONS: none\n"
    )
