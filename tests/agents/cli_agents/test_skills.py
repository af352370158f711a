"""Named skills with the real Codex and Claude Code CLIs, against scripted servers.

The skill reaches the model through the CLI's own skill loading (Codex's skills list in its
instructions, Claude Code's Skill tool listing), not only through code-runner's prompt;
run.json lists it with its hashes; the worker's SKILL_BEHAVIOR_NOTES become the skill
review's recommendation, which `summarize` shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from code_runner.task.skills import read_skill
from code_runner.testing import anthropic_messages as msgs
from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.agent_clis import BUGGY, CHECK, FIXED, CliRun, backend, prepare, run
from tests.helpers.git import make_repo
from tests.helpers.skills import SKILL_DESCRIPTION, SKILL_NAME, skill_md, write_skill
from tests.helpers.tasks import run_cli

pytestmark = pytest.mark.e2e

REPO_SKILL = ".skills/calc-review"
NOTE = "the checklist never mentions mul"


def skilled_run(root: Path, backend_string: str, skills: list[str], **kw: Any) -> CliRun:
    """A calc repo holding a skill folder, and a spec that names `skills`."""
    make_repo(
        root / "source",
        {
            "calc.py": BUGGY,
            "check_calc.py": CHECK,
            ".gitignore": "__pycache__/\n",
            f"{REPO_SKILL}/SKILL.md": skill_md(),
        },
    )
    cli_run = prepare(root, backend_string, **kw)
    spec = json.loads(cli_run.spec_path.read_text())
    spec["skills"] = skills
    cli_run.spec_path.write_text(json.dumps(spec))
    return cli_run


def block(notes: str = "none") -> str:
    return (
        "Fixed.\n\nRESULT_STATUS: SUCCESS\nSUMMARY: add adds, mul multiplies.\n"
        "CHANGED_FILES: calc.py\nVERIFICATION: check_calc.py: 2 passed\n"
        f"OPEN_DECISIONS: none\nSKILL_BEHAVIOR_NOTES: {notes}\n"
    )


def test_codex_loads_named_skills_and_the_notes_become_a_candidate_learning(
    tmp_path: Path, codex: str
) -> None:
    user_skill = write_skill(tmp_path / "mine" / "tdd", name="tdd", description="Red, green, tidy.")
    steps = [resp.write_file("calc.py", FIXED), resp.say(block(NOTE))]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = skilled_run(
            tmp_path,
            backend("codex-cli", server.base_url),
            [REPO_SKILL, str(user_skill)],
        )
        run(cli_run)
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    # Codex itself listed both skills to the model: name, description, the installed file
    sent = json.dumps(requests[0].body)
    assert f"- {SKILL_NAME}: {SKILL_DESCRIPTION} (file: " in sent
    assert "- tdd: Red, green, tidy. (file: " in sent
    assert f"`{SKILL_NAME}`: {SKILL_DESCRIPTION}" in resp.user_text(requests[0].body)
    # run.json lists each skill with its content hash, as read from its folder
    info = json.loads(cli_run.file("run.json").read_text())
    listed = {s["name"]: s for s in info["skills"]}
    expected = read_skill(REPO_SKILL, cli_run.source)
    assert listed[SKILL_NAME]["sha256"] == expected.sha256
    assert listed[SKILL_NAME]["origin"] == "repo" and listed["tdd"]["origin"] == "user"
    # installed only in the run's hermetic CODEX_HOME
    installed = [e for e in cli_run.events() if e["kind"] == "skills_installed"]
    assert installed and installed[0]["skills_dir"].endswith(".codex-home/skills")
    assert "skill_changed" not in cli_run.kinds()
    # the notes are recorded, and the review recommends a candidate learning
    result = cli_run.result()
    assert result["result_contract"]["claim"]["skill_behavior_notes"] == [NOTE]
    assert result["skill_review"]["verdict"] == "CANDIDATE_LEARNING"
    review = cli_run.file("skill-review.md").read_text()
    assert "**CANDIDATE_LEARNING**" in review and NOTE in review
    assert "## Decisions you can take" in review
    shown = run_cli("summarize", str(cli_run.out))
    assert "skills CANDIDATE_LEARNING" in shown.stdout, shown.stdout


def test_claude_code_lists_the_skill_with_its_skill_tool(tmp_path: Path, claude: str) -> None:
    steps = [
        *msgs.edit_file("calc.py", "return a - b", "return a + b"),
        msgs.tool(
            "Edit",
            file_path="calc.py",
            old_string="def mul(a, b):\n    return a + b",
            new_string="def mul(a, b):\n    return a * b",
        ),
        msgs.say(block()),
    ]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = skilled_run(tmp_path, backend("claude-cli", server.origin), [REPO_SKILL])
        run(cli_run)
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    assert cli_run.result()["status"] == "passed"
    # Claude Code's own listing of the skills it loaded, beside the Skill tool
    sent = json.dumps(requests[0].body)
    assert "available for use with the Skill tool" in sent
    assert f"- {SKILL_NAME}: {SKILL_DESCRIPTION}" in sent
    assert "Skill" in {t["name"] for t in requests[0].body["tools"]}
    installed = [e for e in cli_run.events() if e["kind"] == "skills_installed"]
    assert installed[0]["skills_dir"].endswith(".claude-config/skills")
    assert cli_run.result()["skill_review"]["verdict"] == "NO_SKILL_CHANGE"
    assert "**NO_SKILL_CHANGE**" in cli_run.file("skill-review.md").read_text()
