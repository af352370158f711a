"""Dependency binds cannot undo the masks. A committed `.venv` / `venv` / `node_modules`
symlink pointing at HOME, the state dir or `/` shows nothing of them inside the sandbox,
before or after the agent removes the work tree's entry (the binds are decided once, before
the first command), and a dependency dir that holds a masked path (an ssh-agent socket) is
not bound at all. Proven for a root runner (in process) and for a runner that is not root
(`code-runner run` as uid 65534, whose commands share its uid and could read its 0600 key).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.agent_clis import PY
from tests.helpers.attacks import attack, call, cmd, dump, held
from tests.helpers.git import git
from tests.helpers.tasks import FIXED_BOTH, calc_repo, fingerprint, write_task
from tests.security.unprivileged import Nobody, nobody

pytestmark = pytest.mark.usefixtures("sandbox_works")
__all__ = ["nobody"]  # a fixture

NETRC = "machine api.example.com login runner password netrc-secret-4711\n"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nkey-secret-0815\n-----END OPENSSH PRIVATE KEY-----\n"
STATE_SECRET = "state-secret-2342\n"
SECRETS = ("netrc-secret-4711", "key-secret-0815", "state-secret-2342")
ALLOW = ("calc.py", "report.txt", "leak")


def _plant_secrets(home: Path, state: Path) -> None:
    (home / ".netrc").write_text(NETRC)
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh/id_ed25519").write_text(KEY)
    (home / ".ssh/id_ed25519").chmod(0o600)
    (state / "secret.txt").write_text(STATE_SECRET)


def _linked_source(root: Path, home: Path, state: Path) -> Path:
    """A source whose committed `.venv`, `node_modules` and `venv` point at HOME, the state
    dir and `/`."""
    source = calc_repo(root)
    for name, target in ((".venv", home), ("node_modules", state), ("venv", Path("/"))):
        os.symlink(target, source / name)
    git(source, "add", ".venv", "node_modules", "venv")
    git(source, "commit", "-q", "-m", "dependency links")
    return source


def _reads(home: Path, state: Path) -> list[str]:
    """Every way to the secrets through the dependency names, each reporting its exit."""
    paths = [
        ".venv/.netrc",
        ".venv/.ssh/id_ed25519",
        "node_modules/secret.txt",
        f"venv{home}/.netrc",
        f"venv{home}/.ssh/id_ed25519",
        f"venv{state}/secret.txt",
    ]
    return [f'cat {p} >> report.txt; echo "read={p}:$?" >> report.txt' for p in paths]


def _calls(home: Path, state: Path) -> list[dict[str, object]]:
    reads = _reads(home, state)
    return [
        *[cmd(c) for c in reads],  # through the committed links
        cmd("rm -f .venv node_modules venv && echo removed=0 >> report.txt"),
        *[cmd(c) for c in reads],  # where a per-command bind used to appear
        cmd("mkdir -p leak && cp -a .venv node_modules venv leak/ 2>/dev/null; true"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]


def _judge(report: str, patch: str, prefix: str) -> None:
    held(f"{prefix}: the work tree's links were removed", "removed=0" in report, report)
    for secret in SECRETS:
        held(f"{prefix}: {secret} stays out of the commands", secret not in report, report)
        held(f"{prefix}: {secret} stays out of the patch", secret not in patch, patch[-2000:])
    reads = [line for line in report.splitlines() if line.startswith("read=")]
    every_failed = bool(reads) and all(not r.endswith(":0") for r in reads)
    held(f"{prefix}: every read failed", every_failed, reads)


def test_dependency_links_show_nothing_to_a_root_runner(tmp_path: Path) -> None:
    home, state = Path(os.environ["HOME"]), Path(os.environ["CODE_RUNNER_STATE_DIR"])
    _plant_secrets(home, state)
    before = fingerprint(home), (state / "secret.txt").read_bytes()
    source = _linked_source(tmp_path, home, state)
    run = attack(tmp_path, _calls(home, state), sandbox="required", source=source, allowlist=ALLOW)
    assert run.sandboxed, dump(run)
    _judge(run.added("report.txt"), run.patch, "root runner")
    after = fingerprint(home), (state / "secret.txt").read_bytes()
    held("root runner: HOME and the state dir are byte-identical", after == before)
    assert run.result["status"] == "passed" and run.result["source_unchanged"], dump(run)


def test_dependency_links_show_nothing_to_a_runner_that_is_not_root(nobody: Nobody) -> None:
    _plant_secrets(nobody.home, nobody.state)
    source = _linked_source(nobody.root, nobody.home, nobody.state)
    spec = write_task(
        nobody.root,
        source,
        [_calls(nobody.home, nobody.state)],
        allowlist=list(ALLOW),
        command="grep -q 'a [*] b' calc.py",
        sandbox="required",
    )
    nobody.own()
    before = fingerprint(nobody.home), (nobody.state / "secret.txt").read_bytes()
    done = nobody.run(spec)
    assert done.returncode == 0, done.stdout + done.stderr
    result = nobody.result()
    assert result["sandbox"]["kind"] == "bwrap" and result["sandbox"]["host_uid"] == 65534
    patch = nobody.patch()
    report = "".join(
        line[1:] + "\n" for line in patch.splitlines() if line[:1] == "+" and "+++" not in line
    )
    _judge(report, patch, "non-root runner")
    after = fingerprint(nobody.home), (nobody.state / "secret.txt").read_bytes()
    held("non-root runner: HOME and the state dir are byte-identical", after == before)
    assert result["source_unchanged"], result


@pytest.fixture
def socket_in_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A source whose (untracked) `.venv` holds the ssh-agent socket SSH_AUTH_SOCK names."""
    source = calc_repo(tmp_path)
    tool = source / ".venv/bin/tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho tool-ok\n")
    tool.chmod(0o755)
    path = source / ".venv/agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    os.chmod(path, 0o777)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(path))
    try:
        yield source
    finally:
        server.close()


def test_a_dependency_dir_holding_a_masked_path_is_not_bound(
    tmp_path: Path, socket_in_venv: Path
) -> None:
    source = socket_in_venv
    before = fingerprint(source / ".venv/bin")
    connect = "import socket; socket.socket(socket.AF_UNIX).connect('.venv/agent.sock')"
    abs_connect = connect.replace(".venv", f"{source}/.venv")
    calls = [
        cmd(f'{PY} -c "{connect}"; echo "agent=$?" >> report.txt'),
        cmd(f'{PY} -c "{abs_connect}"; echo "agent_abs=$?" >> report.txt'),
        cmd('test -e .venv/bin/tool; echo "tool=$?" >> report.txt'),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox="required", source=source)
    report = run.added("report.txt")
    held("the socket is unreachable through the bind", "agent=0" not in report, dump(run))
    held("the socket is unreachable at its own path", "agent_abs=0" not in report, report)
    held("the dir holding it was not bound", "tool=1" in report, report)
    held("the dependency dir is byte-identical", fingerprint(source / ".venv/bin") == before)
    assert run.result["status"] == "passed", dump(run)
