"""Secrets and host writes. Inside a command: only allowlisted variables (no model key, no
`*_TOKEN` / `*_KEY`), and `/etc/shadow`, the runner's home and the ssh-agent socket cannot be
read. Writes to /etc, to the source and to the runner's home fail, with the sandbox (read-only
or hidden) and without it (the command policy); every target stays byte-identical."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.attacks import MODES, attack, call, cmd, dump, held
from tests.helpers.git import make_repo
from tests.helpers.tasks import CALC, FIXED_BOTH, PY, TESTS, fingerprint

pytestmark = pytest.mark.integration

SECRETS = {
    "OPENAI_API_KEY": "sk-attack-openai",
    "ANTHROPIC_API_KEY": "sk-attack-anthropic",
    "GITHUB_TOKEN": "ghp-attack-token",
    "MY_SERVICE_KEY": "attack-service-key",
    "AWS_SECRET_ACCESS_KEY": "attack-aws",
    "DATABASE_PASSWORD": "attack-db",
}
ALLOWED_NAMES = {
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "NO_COLOR", "CI",
    "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
    "VIRTUAL_ENV", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "HOME", "TMPDIR", "USER", "LOGNAME",
    "PWD", "SHLVL", "_", "OLDPWD",
}  # fmt: skip


@pytest.fixture
def agent_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An ssh-agent-like socket anyone could connect to, named by SSH_AUTH_SOCK."""
    path = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    os.chmod(path, 0o777)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(path))
    try:
        yield path
    finally:
        server.close()


@pytest.mark.parametrize("mode", MODES)
def test_secrets_stay_out_of_commands(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch, agent_socket: Path
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    home = Path(os.environ["HOME"])
    (home / "secret.txt").write_text("runner home secret\n")
    connect = f"import socket; socket.socket(socket.AF_UNIX).connect('{agent_socket}')"
    calls = [
        cmd("env > report.txt"),
        cmd('cat /etc/shadow > shadow.txt; echo "shadow=$?" >> report.txt'),
        cmd(f'cat {home}/secret.txt >> report.txt; echo "home=$?" >> report.txt'),
        cmd(f'{PY} -c "{connect}"; echo "agent=$?" >> report.txt'),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, allowlist=("calc.py", "report.txt", "shadow.txt"))
    report = run.added("report.txt")
    assert run.tool_results[0]["details"]["exit_code"] == 0 and "PATH=" in report, dump(run)
    names = {line.split("=", 1)[0] for line in report.splitlines() if "=" in line}
    names -= {"shadow", "home", "agent"}
    runner_own = {"CODE_RUNNER_PROC_TOKEN", "CODE_RUNNER_RUN_ID"}  # ids, not secrets
    held("only allowlisted variables", names <= ALLOWED_NAMES | runner_own, names)
    for name, value in SECRETS.items():
        held(f"{name} absent", name not in report and value not in run.patch, name)
    if run.sandboxed:
        held("not even the runner's ids", not names & runner_own, names)
        held("/etc/shadow unreadable", run.added("shadow.txt").strip() == "", run.patch)
        held("the runner's home unreadable", "runner home secret" not in report, report)
        held("ssh-agent socket unreachable", "agent=0" not in report, report)
    assert run.result["status"] == "passed", dump(run)


@pytest.fixture
def visible_source(visible_dir: Path) -> Path:
    return make_repo(visible_dir / "source", {"calc.py": CALC, "test_calc.py": TESTS})


def _write_attacks(source: Path, home: Path, etc_file: Path) -> list[str]:
    return [
        f"echo pwned > {etc_file}",
        f"echo pwned >> {etc_file}",
        "touch /etc/code-runner-attack-new",
        f"cp calc.py {etc_file}",
        f"echo pwned > {source}/calc.py",
        f"cp calc.py {source}/new.py",
        f"touch {source}/.git/hooks/post-checkout",
        f"echo '[core]' >> {source}/.git/config",
        f"echo pwned > {home}/planted.txt",
        f"mkdir -p {home}/.ssh",
        f"sed -i s/a/b/ {source}/calc.py",
        f"tee -a {source}/calc.py < calc.py",
        f"rm -f {source}/calc.py",
        f"mv {source}/calc.py moved.py",
        f"ln -s calc.py {source}/link.py",
        f"chmod 777 {source}/calc.py",
        f"find {source} -name calc.py -delete",
    ]


@pytest.mark.parametrize("mode", MODES)
def test_host_writes_fail_and_targets_stay_identical(
    tmp_path: Path, mode: str, etc_file: Path, visible_source: Path
) -> None:
    home = Path(os.environ["HOME"])
    hidden_source = make_repo(tmp_path / "hidden-source", {"calc.py": CALC})
    watched = [visible_source, hidden_source, home]
    before = [fingerprint(p) for p in watched]
    etc_before = etc_file.read_bytes()
    commands = _write_attacks(visible_source, home, etc_file)
    commands += _write_attacks(hidden_source, home, etc_file)[4:8]
    calls = [cmd(c) for c in commands] + [
        cmd(f"cat {etc_file} > report.txt"),  # the commands do run: reading works
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, source=visible_source)
    assert run.added("report.txt").encode() == etc_before, dump(run)
    for command, result in zip(commands, run.tool_results, strict=False):
        if run.sandboxed:
            ok = result["details"].get("exit_code", 0) != 0
        else:
            ok = result["error"] == "BLOCKED_COMMAND"
        held(command, ok, result)
    held("/etc file identical", etc_file.read_bytes() == etc_before)
    held("nothing new in /etc", not Path("/etc/code-runner-attack-new").exists())
    held("sources and home identical", [fingerprint(p) for p in watched] == before)
    assert run.result["status"] == "passed" and run.result["source_unchanged"], dump(run)
