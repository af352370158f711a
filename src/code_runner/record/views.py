"""The compact artifacts beside a run record, for a person reviewing a worker's run.

- `{task_id}.run.json`: who ran what where: the backend, its command line with secrets
  redacted, the workspace, the owned paths (allowlist), the sandbox posture, the pid a
  `code-runner stop` signals. Written when the workspace exists and again at the end.
- `{task_id}.result.md`: the normalized status (SUCCESS / PARTIAL /
  BLOCKED_NEEDS_DECISION / FAILED) derived from evidence, the reason, the worker's claim
  and every mismatch between the two.
- `{task_id}.eval.md`: scope (changes inside and outside the owned paths), the diff
  summary, the DoD proof (command, assertion, exit code, output tail) and ownership
  findings (dropped changes, safety violations, claimed-but-absent files).

All of it is derived from result.json and the record, so it can be rebuilt and never
disagrees with them; every file is written atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import code_runner.record.skill_review as skill_review
from code_runner import files
from code_runner.record.paths import RecordPaths
from code_runner.record.result import RunResult
from code_runner.task import TaskSpec

_TAIL_CHARS = 2000


class _Describable(Protocol):
    def describe(self) -> Mapping[str, Any]: ...


def agent_description(agent: object, backend: str) -> dict[str, Any]:
    """What the backend says about itself (agent CLIs), or what the runner knows."""
    describe = getattr(agent, "describe", None)
    if callable(describe):
        described = describe()
        if isinstance(described, Mapping):
            return dict(described)
    return {
        "backend": backend,
        "command_line": None,
        "sandbox": {
            "os_sandbox": None,
            "tools": "code-runner's own tools: every call checked against the allowlist "
            "and the command policy",
        },
    }


def run_info(
    spec: TaskSpec,
    *,
    run_id: str,
    agent: object,
    workspace_dir: Path | None,
    base: str,
    paths: RecordPaths,
    status: str = "running",
    os_sandbox: object = None,
    skills: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """`os_sandbox`: code-runner's own OS sandbox (around its tools and the DoD), once known;
    `sandbox` is the agent's (an agent CLI's own confinement)."""
    described = agent_description(agent, spec.backend)
    return {
        "schema_version": 1,
        "run_id": run_id,
        "task_id": spec.task_id,
        "title": spec.title,
        "backend": spec.backend,
        "agent": described,
        "command_line": described.get("command_line"),
        "sandbox": described.get("sandbox"),
        "os_sandbox": os_sandbox,
        "source": str(spec.cwd),
        "base": base,
        "workspace": str(workspace_dir) if workspace_dir else None,
        "owned_paths": list(spec.allowlist),
        "read_context": list(spec.read_context),
        "skills": [dict(skill) for skill in skills],
        "definition_of_done": spec.definition_of_done.model_dump(mode="json"),
        "record_dir": str(paths.output_dir),
        "tmux": str(paths.tmux_info) if paths.tmux_info.exists() else None,
        "terminal_log": str(paths.terminal_log) if paths.terminal_log.exists() else None,
        "pid": os.getpid(),
        "status": status,
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }


def write_run_info(paths: RecordPaths, info: Mapping[str, Any]) -> None:
    files.atomic_write_json(paths.run_info, dict(info), durable=False)


def _bullets(items: Sequence[str], empty: str = "none") -> str:
    return "\n".join(f"- {item}" for item in items) if items else f"- {empty}"


def result_markdown(result: RunResult) -> str:
    contract = result.result_contract
    evidence = contract.evidence_status if contract else "?"
    claim = contract.claim if contract else None
    lines = [
        f"# {result.task_id}: {evidence}",
        "",
        f"- status: **{evidence}** (runner: {result.status.value}, reason `{result.reason.value}`)",
        f"- DoD passed: {result.dod_passed}",
        f"- backend: `{result.backend}`",
        f"- rounds: {result.rounds} of {result.max_rounds}, best score {result.best_score:.2f}",
        f"- source unchanged: {result.source_unchanged}",
        f"- duration: {result.duration_s} s",
    ]
    if result.error:
        lines += ["", "## Reason", "", result.error.strip()]
    lines += ["", "## Worker's claim", ""]
    if claim:
        lines += [
            f"- RESULT_STATUS: {claim.raw_status or '(empty)'}",
            f"- SUMMARY: {claim.summary or '(empty)'}",
            f"- CHANGED_FILES: {', '.join(claim.changed_files) or 'none'}",
            f"- VERIFICATION: {claim.verification or '(empty)'}",
            f"- OPEN_DECISIONS: {'; '.join(claim.open_decisions) or 'none'}",
        ]
    else:
        lines.append("- no RESULT_STATUS block in the worker's final message")
    lines += ["", "## Claim against evidence", ""]
    mismatches = list(contract.mismatches) if contract else []
    lines.append(_bullets([f"MISMATCH: {m}" for m in mismatches], "no mismatch"))
    findings = list(contract.findings) if contract else []
    if findings:
        lines.append(_bullets(findings))
    return "\n".join(lines) + "\n"


def eval_markdown(result: RunResult, spec: TaskSpec, review: str) -> str:
    owned = list(spec.allowlist)
    contract = result.result_contract
    lines = [
        f"# Evaluation of {result.task_id} ({result.run_id})",
        "",
        "## Scope",
        "",
        "Owned paths: " + ", ".join(f"`{p}`" for p in owned),
        "",
        "Changes inside the owned paths (in the patch):",
        _bullets([f"`{c.path}` ({c.kind})" for c in result.changed_files]),
        "",
        "Changes outside the owned paths (dropped, never in the patch):",
        _bullets(
            [f"`{d.path}` ({d.kind}, round {d.round}): {d.reason}" for d in result.dropped_changes]
        ),
        "",
        "## Diff",
        "",
    ]
    stat = _diff_stat(review)
    lines += [f"```\n{stat}\n```" if stat else "- no changes", ""]
    lines += ["## Proof (the DoD, run by the runner)", ""]
    dod = spec.definition_of_done
    lines += [f"- command: `{dod.command}`", f"- assertion: `{dod.assertion}`"]
    verdict = result.last_verdict()
    if verdict:
        lines += [
            f"- last verdict: {'pass' if verdict.passed else 'fail'} — {verdict.reason}",
            f"- exit code: {verdict.exit_code}, timed out: {verdict.timed_out}",
        ]
        tail = (verdict.stdout_tail + verdict.stderr_tail).strip()[-_TAIL_CHARS:]
        if tail:
            lines += ["", "```", tail, "```"]
    else:
        lines.append("- the DoD did not run after the agent")
    lines += ["", "## Ownership findings", ""]
    findings = [f"safety violation: {v}" for v in result.safety_violations]
    findings += [
        f"changed outside the owned paths: `{d.path}` ({d.reason})" for d in result.dropped_changes
    ]
    if contract:
        findings += [f"claim: {m}" for m in contract.mismatches]
        findings += list(contract.findings)
    if not result.source_unchanged:
        findings.append("the source repo changed: " + "; ".join(result.source_differences))
    lines.append(_bullets(findings, "none: every change is inside the owned paths"))
    return "\n".join(lines) + "\n"


def _diff_stat(review: str) -> str:
    """The `--stat` lines at the top of a review diff."""
    stat: list[str] = []
    for line in review.splitlines():
        if line.startswith("diff --git"):
            break
        if line.startswith("```") or line.strip() == "(no changes)":
            break  # the review page's closing fence, or its empty-patch line
        if line.strip():
            stat.append(line.rstrip())
    return "\n".join(stat)


_STAT_MAX_BYTES = 1 << 20


def _review_head(hunk: Path) -> str:
    """The review page's diff up to its first file diff (its `--stat`), read line by line:
    the page itself may be as large as the patch."""
    kept: list[str] = []
    size = 0
    try:
        with hunk.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if (kept and line.startswith("diff --git")) or size > _STAT_MAX_BYTES:
                    break
                if kept or line.startswith("```diff"):
                    kept.append(line)
                    size += len(line)
    except OSError:
        return ""
    return "".join(kept[1:])


def recorded_skills(paths: RecordPaths) -> list[Mapping[str, Any]]:
    """The skills run.json lists (name, path, origin, hashes), or none."""
    try:
        info = json.loads(files.read_regular(paths.run_info))
    except (OSError, ValueError):
        return []
    found = info.get("skills") if isinstance(info, dict) else None
    return [s for s in found if isinstance(s, Mapping)] if isinstance(found, list) else []


def review_skills(paths: RecordPaths, result: RunResult) -> skill_review.SkillReview:
    """The skills' recommendation from run.json, result.json and the events."""
    events = [e for e in files.read_jsonl(paths.events) if isinstance(e, Mapping)]
    return skill_review.review(result, recorded_skills(paths), events)


def write_reports(paths: RecordPaths, result: RunResult, spec: TaskSpec) -> None:
    """result.md, eval.md and skill-review.md from the finished result (and the hunk file's
    diff stat, run.json's skills and the events)."""
    review = _review_head(paths.hunk)
    # agent text is in both (its claim, its errors, file names): never terminal escapes
    result_md = files.printable(result_markdown(result))
    files.atomic_write_text(paths.result_md, result_md, durable=False)
    eval_md = files.printable(eval_markdown(result, spec, review))
    files.atomic_write_text(paths.eval_md, eval_md, durable=False)
    reviewed = skill_review.skill_review_markdown(result, review_skills(paths, result))
    files.atomic_write_text(paths.skill_review_md, files.printable(reviewed), durable=False)


__all__ = [
    "agent_description",
    "eval_markdown",
    "recorded_skills",
    "result_markdown",
    "review_skills",
    "run_info",
    "write_reports",
    "write_run_info",
]
