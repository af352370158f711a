"""The soak's parts: sources, specs, the real CLI in real processes, and the checks that
every run must pass (right outcome, no traceback, source bytes unchanged, nothing left).

Every run goes through `python -m code_runner ...` in its own process, against real git
repos, with the scripted backend or a model backend talking to a loopback `ScriptedServer`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.helpers.git import git, make_repo
from tests.helpers.tasks import CALC, FIXED_ADD, FIXED_BOTH, fingerprint

PY = sys.executable
# -B: the DoD leaves no __pycache__ in a source it runs in (complete-task mode)
DOD = f"{PY} -B -c 'import calc; assert calc.add(2, 3) == 5; assert calc.mul(2, 3) == 6'"
KEY_ENV = "CR_SOAK_MODEL_KEY"
RUN_ID_ENV = "CODE_RUNNER_RUN_ID"


@dataclass
class Tally:
    """What a scenario saw; the soak asserts the bad counts are all 0."""

    runs: int = 0
    wrong: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    changed_sources: list[str] = field(default_factory=list)
    left_workspaces: list[str] = field(default_factory=list)
    left_processes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.wrong.append(what)

    def assert_clean(self) -> None:
        report = {
            "runs": self.runs,
            "wrong outcomes": self.wrong[:5],
            "tracebacks": self.tracebacks[:3],
            "changed sources": self.changed_sources[:5],
            "workspaces left after gc": self.left_workspaces[:5],
            "processes left after gc": self.left_processes[:5],
        }
        assert not (
            self.wrong
            or self.tracebacks
            or self.changed_sources
            or self.left_workspaces
            or self.left_processes
        ), json.dumps(report, indent=2)
        print(f"soak: {self.runs} runs in {self.seconds:.1f} s, 0 wrong")


def source_repo(path: Path, files: Mapping[str, str] | None = None) -> Path:
    repo = make_repo(
        path, dict(files or {"calc.py": CALC, ".gitignore": "__pycache__/\n", "README.md": "hi\n"})
    )
    git(repo, "config", "user.name", "Soak User")
    git(repo, "config", "user.email", "soak@example.com")
    return repo


def scripted_spec(
    root: Path,
    source: Path,
    task_id: str,
    rounds: Sequence[Sequence[Mapping[str, Any]]],
    **extra: Any,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    script = root / f"{task_id}.script.json"
    script.write_text(
        json.dumps({"rounds": [{"calls": list(c), "response": "done"} for c in rounds]})
    )
    rounds_n = max(1, len(rounds))
    return write_spec(root, source, task_id, f"scripted:{script.name}", rounds_n, **extra)


def write_spec(
    root: Path, source: Path, task_id: str, backend: str, max_rounds: int = 1, **extra: Any
) -> Path:
    spec: dict[str, Any] = {
        "task_id": task_id,
        "title": "Fix the calculator",
        "prompt": "Make add and mul correct.",
        "backend": backend,
        "cwd": str(source),
        "output_dir": str(root / "out"),
        "allowlist": ["calc.py"],
        "definition_of_done": {"command": DOD, "assertion": "exit_code == 0", "timeout_s": 60},
        "max_rounds": max_rounds,
        "timeout_s": 120,
        **extra,
    }
    path = root / f"{task_id}.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def cli(*args: str, timeout: float = 180, env: Mapping[str, str] | None = None) -> Any:
    """`python -m code_runner ARGS` in a real process."""
    return subprocess.run(
        [PY, "-m", "code_runner", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def result_of(spec: Path) -> dict[str, Any]:
    data = json.loads(spec.read_text())
    out = Path(data["output_dir"]) / f"{data['task_id']}.result.json"
    loaded = json.loads(out.read_text())
    assert isinstance(loaded, dict)
    return loaded


def saw_traceback(tally: Tally, what: str, proc: Any) -> bool:
    text = f"{proc.stdout}\n{proc.stderr}"
    if proc.returncode == 70 or "Traceback (most recent call last)" in text:
        tally.tracebacks.append(f"{what}: exit {proc.returncode}: {text[-1500:]}")
        return True
    return False


def workspaces() -> list[str]:
    from code_runner import dirs

    root = dirs.workspaces_dir()
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def run_processes(run_ids: set[str] | None = None) -> list[str]:
    """Live processes started by the soak's runs (they carry the run id in their env)."""
    found = []
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            run_id = process.environ().get(RUN_ID_ENV)
        except (psutil.Error, OSError):
            continue
        # the soak's task ids start with "soak-"; other code-runner runs on the machine
        # (another test session's) are not ours to count
        if run_id and (run_id in run_ids if run_ids is not None else run_id.startswith("soak-")):
            found.append(f"{process.pid} ({run_id}): {' '.join(process.cmdline())[:120]}")
    return found


def gc_and_check(tally: Tally, run_ids: set[str] | None = None) -> Any:
    proc = cli("gc")
    saw_traceback(tally, "gc", proc)
    tally.check(proc.returncode == 0, f"gc exit {proc.returncode}: {proc.stderr[-500:]}")
    tally.left_workspaces += workspaces()
    tally.left_processes += run_processes(run_ids)
    return proc


def same_bytes(tally: Tally, source: Path, before: Mapping[str, str], what: str) -> None:
    after = fingerprint(source)
    if after != before:
        diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        tally.changed_sources.append(f"{what}: {diff[:8]}")


def kill_at(
    spec: Path, stop: Any, *, timeout_s: float = 60.0, env: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Start `code-runner run SPEC`, SIGKILL the runner (only it: its children are orphaned,
    as after a real crash) as soon as an event satisfies `stop`; (events, exit code)."""
    data = json.loads(spec.read_text())
    events_path = Path(data["output_dir"]) / f"{data['task_id']}.events.jsonl"
    process = subprocess.Popen(
        [PY, "-m", "code_runner", "run", str(spec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + timeout_s
    seen = 0
    try:
        while process.poll() is None and time.monotonic() < deadline:
            events = _events(events_path)
            if any(stop(e) for e in events[seen:]):
                os.kill(process.pid, signal.SIGKILL)
                break
            seen = max(0, len(events) - 1)
            time.sleep(0.001)
    finally:
        if process.poll() is None and time.monotonic() >= deadline:
            process.kill()
        code = process.wait()
    return _events(events_path), code


def _events(path: Path) -> list[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    events = []
    for line in raw.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


__all__ = [
    "CALC",
    "DOD",
    "FIXED_ADD",
    "FIXED_BOTH",
    "KEY_ENV",
    "PY",
    "Tally",
    "cli",
    "fingerprint",
    "gc_and_check",
    "kill_at",
    "result_of",
    "run_processes",
    "same_bytes",
    "saw_traceback",
    "scripted_spec",
    "source_repo",
    "workspaces",
    "write",
    "write_spec",
]
