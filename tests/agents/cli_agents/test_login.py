"""`auth = "inherit"`: the user's own CLI login, copied alone into the hermetic home.

The e2e tests give each real CLI a login file that holds a key (Codex's auth.json, Claude
Code's .credentials.json) and show on the scripted server that the CLI sent that key, not
the one in the environment; the record names the mode and never the key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from code_runner.agents.cli_agents.login import AuthMode, copy_login, remove_login
from code_runner.agents.cli_agents.settings import CliKind, resolve
from code_runner.errors import PreflightError, UsageError
from code_runner.testing import anthropic_messages as msgs
from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.agent_clis import FIXED, KEY, backend, prepare, run, success_block
from tests.helpers.tasks import run_cli

LOGIN_KEY = "sk-from-the-login-file-5a5a5a"
CODEX_LOGIN = {"OPENAI_API_KEY": LOGIN_KEY, "tokens": None, "last_refresh": None}
CLAUDE_LOGIN = {
    "claudeAiOauth": {
        "accessToken": LOGIN_KEY,
        "refreshToken": "sk-refresh-not-used",
        "expiresAt": 4102444800000,
        "scopes": ["user:inference"],
        "subscriptionType": "pro",
    }
}


def _signed_in(folder: Path, name: str, content: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(content))
    (folder / "config.toml").write_text('model = "not-copied"\n')  # never copied
    (folder / "settings.json").write_text('{"hooks": {}}\n')  # never copied
    return folder


def test_auth_is_key_by_default_and_inherit_needs_a_login_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve(CliKind.CODEX, None).auth == "key"
    assert resolve(CliKind.CLAUDE, "auth=inherit").auth == "inherit"
    with pytest.raises(UsageError, match="auth="):
        resolve(CliKind.CODEX, "auth=token")
    with pytest.raises(UsageError, match="auth="):
        resolve(CliKind.COMMAND, "auth=inherit -- true")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(PreflightError, match="does not exist") as info:
        copy_login(CliKind.CODEX, tmp_path)
    assert "codex login" in (info.value.fix or "")


def test_only_the_login_file_is_copied_0600_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _signed_in(tmp_path / "user-codex", "auth.json", CODEX_LOGIN)
    monkeypatch.setenv("CODEX_HOME", str(user))
    home = tmp_path / "hermetic"
    home.mkdir()
    copy = copy_login(CliKind.CODEX, home)
    assert [p.name for p in home.iterdir()] == ["auth.json"]
    assert copy.stat().st_mode & 0o777 == 0o600
    assert json.loads(copy.read_text()) == CODEX_LOGIN
    remove_login(copy)
    assert list(home.iterdir()) == []


def test_doctor_says_which_login_each_cli_would_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_HOME", str(_signed_in(tmp_path / "c", "auth.json", CODEX_LOGIN)))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-doctor")
    done = run_cli("doctor", "--json")
    report = json.loads(done.stdout)["agent_clis"]
    codex, claude = report["codex"]["login"], report["claude"]["login"]
    assert codex["auth"] == AuthMode.KEY and codex["uses"] == "$OPENAI_API_KEY (not set)"
    assert codex["login_present"] is True and codex["login_file"].endswith("c/auth.json")
    assert claude["ready"] is True and claude["login_present"] is False
    assert LOGIN_KEY not in done.stdout and "sk-ant-doctor" not in done.stdout
    shown = run_cli("doctor").stdout
    assert "with auth=inherit: your sign-in" in shown and "(present)" in shown
    # what keeps each CLI's tools from a named skill
    assert "skills: read-only: the CLI's own sandbox (workspace-write)" in shown
    assert "skills: read-only: bind mounts (bubblewrap)" in shown


@pytest.mark.e2e
def test_codex_sends_the_key_of_the_inherited_login(
    tmp_path: Path, codex: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _signed_in(tmp_path / "user-codex", "auth.json", CODEX_LOGIN)
    monkeypatch.setenv("CODEX_HOME", str(user))
    before = (user / "auth.json").read_bytes()
    steps = [
        resp.shell('stat -c "%a %n" "$CODEX_HOME"/auth.json; ls "$CODEX_HOME"'),
        resp.write_file("calc.py", FIXED),
        resp.say(success_block()),
    ]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("codex-cli", server.base_url, auth="inherit")))
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    assert cli_run.result()["status"] == "passed"
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {LOGIN_KEY}"}
    listing = resp.tool_outputs(requests[1].body)[0]
    assert "600 " in listing and "config.toml" not in listing
    info = json.loads(cli_run.file("run.json").read_text())
    assert info["agent"]["auth"]["mode"] == "inherit"
    assert info["agent"]["auth"]["login_file"] == str(user / "auth.json")
    _no_key_in_record(cli_run.out)
    assert (user / "auth.json").read_bytes() == before


@pytest.mark.e2e
def test_claude_code_sends_the_token_of_the_inherited_login(
    tmp_path: Path, claude: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _signed_in(tmp_path / "user-claude", ".credentials.json", CLAUDE_LOGIN)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(user))
    steps = [
        *msgs.edit_file("calc.py", "return a - b", "return a + b"),
        msgs.tool(
            "Edit",
            file_path="calc.py",
            old_string="def mul(a, b):\n    return a + b",
            new_string="def mul(a, b):\n    return a * b",
        ),
        msgs.say(success_block()),
    ]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("claude-cli", server.origin, auth="inherit")))
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    assert cli_run.result()["status"] == "passed"
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {LOGIN_KEY}"}
    assert not any(r.headers.get("x-api-key") == KEY for r in requests)
    info = json.loads(cli_run.file("run.json").read_text())
    assert info["agent"]["auth"]["mode"] == "inherit"
    _no_key_in_record(cli_run.out)


def _no_key_in_record(out: Path) -> None:
    for path in out.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert LOGIN_KEY.encode() not in path.read_bytes(), path
            assert path.name not in ("auth.json", ".credentials.json"), path
    assert os.environ.get("CR_TEST_CLI_KEY") == KEY  # the key variable was there, unused
