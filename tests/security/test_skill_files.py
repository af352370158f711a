"""Skill files are never writable by the worker unless the allowlist names them.

A real Codex CLI, told by a scripted model to write into every copy of a named skill: the
work tree's (a skill of the source repo), the copy installed in its CODEX_HOME, and the
source repo's own. Each attack must fail and leave its target byte-identical; the skill
review then asks a person to look (REVIEW_REQUIRED). When the allowlist names the skill,
the change is the task's, lands in the patch, and still needs that review.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import ScriptedServer
from tests.agents.cli_agents.test_skills import REPO_SKILL, block, skilled_run
from tests.helpers.agent_clis import FIXED, backend, run
from tests.helpers.attacks import held
from tests.helpers.skills import SKILL_NAME, skill_md

pytestmark = pytest.mark.e2e


def _scribble(source: Path) -> str:
    targets = [
        f"{REPO_SKILL}/SKILL.md",
        f"$CODEX_HOME/skills/{SKILL_NAME}/SKILL.md",
        str(source / REPO_SKILL / "SKILL.md"),
    ]
    writes = "; ".join(
        f'chmod u+w "{t}" 2>/dev/null; printf "evil\\n" >> "{t}" && echo "WROTE {t}"'
        for t in (shlex.quote(t) if not t.startswith("$") else t for t in targets)
    )
    return writes + "; true"


def test_a_worker_cannot_change_a_named_skill(tmp_path: Path, codex: str) -> None:
    source = tmp_path / "source"
    steps = [
        resp.shell(_scribble(source)),
        resp.write_file("calc.py", FIXED),
        resp.say(block()),
    ]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = skilled_run(tmp_path, backend("codex-cli", server.base_url), [REPO_SKILL])
        run(cli_run)
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    output = "\n".join(resp.tool_outputs(requests[1].body))
    wrote = [line for line in output.splitlines() if line.startswith("WROTE ")]
    result = cli_run.result()
    # the source repo's skill: Codex's sandbox refused the write, the file is as it was
    held(
        "write the source repo's skill",
        not any(str(source) in line for line in wrote)
        and (source / REPO_SKILL / "SKILL.md").read_text() == skill_md()
        and cli_run.source_unchanged(),
        output,
    )
    # the copy installed for the CLI: refused, and unchanged after the round
    held(
        "write the installed skill",
        not any(".codex-home/skills" in line for line in wrote)
        and "skill_changed" not in cli_run.kinds(),
        output,
    )
    # the work tree's copy: written, then dropped by the audit, never in the patch
    dropped = [d["path"] for d in result["dropped_changes"]]
    held(
        "write the work tree's skill",
        f"{REPO_SKILL}/SKILL.md" in dropped and REPO_SKILL not in cli_run.patch(),
        dropped,
    )
    assert result["status"] == "passed"
    assert result["skill_review"]["verdict"] == "REVIEW_REQUIRED"
    review = cli_run.file("skill-review.md").read_text()
    assert "dropped by the audit" in review and "**REVIEW_REQUIRED**" in review


def test_an_allowlisted_skill_change_lands_and_needs_review(tmp_path: Path, codex: str) -> None:
    steps = [
        resp.shell(f'printf "Also check mul.\\n" >> {REPO_SKILL}/SKILL.md'),
        resp.write_file("calc.py", FIXED),
        resp.say(block()),
    ]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = skilled_run(
            tmp_path,
            backend("codex-cli", server.base_url),
            [REPO_SKILL],
            allowlist=["calc.py", REPO_SKILL],
        )
        run(cli_run)
    assert cli_run.proc.returncode == 0, cli_run.output()
    assert "+Also check mul." in cli_run.patch()
    result = cli_run.result()
    assert result["skill_review"]["verdict"] == "REVIEW_REQUIRED"
    assert any("in the patch" in c for c in result["skill_review"]["changes"])
    assert json.loads(cli_run.file("run.json").read_text())["skills"][0]["name"] == SKILL_NAME
