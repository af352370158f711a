"""Skill files are never writable by the worker unless the allowlist names them.

The real Codex and Claude Code CLIs, told by a scripted model to write, chmod, move and
delete every copy of a named skill: the work tree's (a skill of the source repo), the copy
installed in the CLI's home, and the source repo's own; and to rename, remount and unmount
the installed skills dir. Codex's own sandbox holds the copies outside its work tree;
Claude Code (no OS sandbox, its Bash running as root here) runs where they are read-only
mounts. Each attack must fail and leave its target byte-identical; the work tree's copy is
dropped by the audit, and the skill review asks a person to look (REVIEW_REQUIRED). When
the allowlist names the skill, the change is the task's, lands in the patch, and still
needs that review.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from code_runner.testing import anthropic_messages as msgs
from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import ScriptedServer
from tests.agents.cli_agents.test_skills import REPO_SKILL, block, skilled_run
from tests.helpers.agent_clis import FIXED, CliRun, backend, run
from tests.helpers.attacks import held
from tests.helpers.skills import SKILL_NAME, skill_md

pytestmark = pytest.mark.e2e


def _scribble(source: Path, home_var: str) -> str:
    """Write, chmod, move and delete every copy of the skill; rename and remount the CLI's
    skills dir. `DID ...` is printed for each step that worked."""
    installed = f"${home_var}/skills"
    targets = [
        f"{REPO_SKILL}/SKILL.md",
        f"{installed}/{SKILL_NAME}/SKILL.md",
        shlex.quote(str(source / REPO_SKILL / "SKILL.md")),
    ]
    steps: list[tuple[str, str]] = []
    for t in targets:
        steps += [
            (f"write {t}", f'printf "evil\\n" >> "{t}"'),
            (f"chmod {t}", f'chmod 0666 "{t}"'),
            (f"move {t}", f'mv "{t}" "{t}.moved"'),
            (f"delete {t}", f'rm "{t}"'),
        ]
    steps += [
        (f"rename {installed}", f'mv "{installed}" "{installed}.old"'),
        (f"remount {installed}", f'mount -o remount,rw,bind "{installed}"'),
        (f"unmount {installed}", f'umount -l "{installed}"'),
    ]
    return "; ".join(f'{cmd} 2>/dev/null && echo "DID {what}"' for what, cmd in steps) + "; true"


def _did(output: str, *where: str) -> list[str]:
    done = [line for line in output.splitlines() if line.startswith("DID ")]
    return [line for line in done if any(w in line for w in where)]


def _held_everywhere(cli_run: CliRun, output: str, home: str) -> None:
    """The source's copy and the installed copy held; the work tree's was dropped."""
    source = cli_run.source
    held(
        "change the source repo's skill",
        not _did(output, str(source))
        and (source / REPO_SKILL / "SKILL.md").read_text() == skill_md()
        and cli_run.source_unchanged(),
        output,
    )
    held(
        "change the installed skill",
        not _did(output, "/skills") and "skill_changed" not in cli_run.kinds(),
        output,
    )
    result = cli_run.result()
    dropped = [d["path"] for d in result["dropped_changes"]]
    held(
        "change the work tree's skill",
        f"{REPO_SKILL}/SKILL.md" in dropped and REPO_SKILL not in cli_run.patch(),
        dropped,
    )
    installed = next(e for e in cli_run.events() if e["kind"] == "skills_installed")
    assert installed["skills_dir"].endswith(f"{home}/skills")
    assert result["status"] == "passed"
    assert result["skill_review"]["verdict"] == "REVIEW_REQUIRED"
    review = cli_run.file("skill-review.md").read_text()
    assert "dropped by the audit" in review and "**REVIEW_REQUIRED**" in review


def test_a_codex_worker_cannot_change_a_named_skill(tmp_path: Path, codex: str) -> None:
    steps = [
        resp.shell(_scribble(tmp_path / "source", "CODEX_HOME")),
        resp.write_file("calc.py", FIXED),
        resp.say(block()),
    ]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = skilled_run(tmp_path, backend("codex-cli", server.base_url), [REPO_SKILL])
        run(cli_run)
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    # Codex's own sandbox keeps the skill folders read-only
    _held_everywhere(cli_run, "\n".join(resp.tool_outputs(requests[1].body)), ".codex-home")


def test_a_claude_code_worker_cannot_change_a_named_skill(tmp_path: Path, claude: str) -> None:
    steps = [
        msgs.bash(_scribble(tmp_path / "source", "CLAUDE_CONFIG_DIR")),
        *msgs.write_file("calc.py", FIXED),
        msgs.say(block()),
    ]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = skilled_run(tmp_path, backend("claude-cli", server.origin), [REPO_SKILL])
        run(cli_run)
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    output = "\n".join(msgs.tool_results(requests[1].body))
    assert "DID write" in output, output  # Bash ran (as root): the work tree's copy took it
    # no OS sandbox of its own: it ran where the skill folders are read-only mounts
    _held_everywhere(cli_run, output, ".claude-config")
    frozen = next(e for e in cli_run.events() if e["kind"] == "skills_installed")["read_only"]
    assert str(cli_run.source / REPO_SKILL) in frozen


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
