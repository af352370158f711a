"""Full runs of attack scripts, and a tally of attacks tried and held.

Every attack is a tool call a scripted agent makes through the normal toolbox, in a real
`code-runner` run (in process: the same `preflight` + `run_task` the CLI calls). A test
then checks the call's outcome in the run's events and that its target is byte-identical.
`held()` asserts one attack and counts it; the suite's conftest prints the tally.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner import files, runner
from code_runner import task as spec_mod
from tests.helpers.tasks import calc_repo, write_task

MODES = ("required", "off")  # the sandbox, and the command policy without it
TALLY = {"tried": 0, "held": 0}


def held(name: str, ok: bool, detail: object = "") -> None:
    """Assert one attack failed (and its target is intact); count it either way."""
    TALLY["tried"] += 1
    assert ok, f"attack not held: {name}: {detail}"
    TALLY["held"] += 1


@dataclass
class Run:
    root: Path
    source: Path
    result: dict[str, Any]
    events: list[dict[str, Any]]
    patch: str

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == "tool_result"]

    @property
    def sandboxed(self) -> bool:
        return bool(self.result["sandbox"]["kind"] == "bwrap")

    def added(self, path: str) -> str:
        """The content the patch gives `path` (a file the agent created), else ''."""
        match = re.search(
            rf"^diff --git a/{re.escape(path)} b/{re.escape(path)}\n(?:[^\n]*\n)*?@@[^\n]*@@\n"
            r"((?:[+ \\][^\n]*\n)*)",
            self.patch,
            re.MULTILINE,
        )
        if not match:
            return ""
        return "".join(line[1:] + "\n" for line in match.group(1).splitlines() if line[:1] == "+")


def attack(
    root: Path,
    calls: list[dict[str, Any]],
    *,
    sandbox: str,
    source: Path | None = None,
    allowlist: tuple[str, ...] = ("calc.py", "report.txt"),
    command: str = "grep -q 'a [*] b' calc.py",  # fails on base, passes once fixed
    assertion: str = "exit_code == 0",
    **extra: Any,
) -> Run:
    """One full run whose single round makes `calls`; returns what the record says."""
    root.mkdir(parents=True, exist_ok=True)
    source = source or calc_repo(root)
    path = write_task(
        root,
        source,
        [calls],
        allowlist=list(allowlist),
        command=command,
        assertion=assertion,
        sandbox=sandbox,
        **extra,
    )
    task = spec_mod.load_spec(path)
    outcome = runner.run_task(runner.preflight(task, base_dir=root))
    assert outcome.worktree_removed, "the workspace was left behind"
    out = root / "out"
    patch_path = out / "fix-calc.patch"
    return Run(
        root=root,
        source=source,
        result=outcome.to_json(),
        events=files.read_jsonl(out / "fix-calc.events.jsonl"),
        patch=patch_path.read_text(errors="replace") if patch_path.exists() else "",
    )


def cmd(command: str, timeout_s: float | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"command": command}
    if timeout_s is not None:
        args["timeout_s"] = timeout_s
    return {"tool": "run_command", "args": args}


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def dump(run: Run) -> str:
    """What to print when an assertion fails: the tool results and the sandbox posture."""
    keep = ("name", "ok", "error", "summary", "details")
    lines = [json.dumps({k: r.get(k) for k in keep}) for r in run.tool_results]
    return "\n".join([json.dumps(run.result.get("sandbox")), *lines])
