"""Network attacks: with `network: false` (the default) curl, a Python socket and bash's
/dev/tcp all fail against a server the test runs on 127.0.0.1, and the server sees no
connection; with `network: true` the same commands reach it (so the check can see)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.attacks import attack, call, cmd, dump, held
from tests.helpers.network import Listener
from tests.helpers.tasks import FIXED_BOTH, PY

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_works")]


def _calls(port: int) -> list[dict[str, object]]:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), 3).close()"
    return [
        cmd(f'curl -sS -m 3 http://127.0.0.1:{port}/ -o /dev/null; echo "curl=$?" >> report.txt'),
        cmd(f'{PY} -c "{connect}"; echo "python=$?" >> report.txt'),
        cmd(f"bash -c ': > /dev/tcp/127.0.0.1/{port}'; echo \"devtcp=$?\" >> report.txt"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]


def test_no_network_by_default(tmp_path: Path, listener: Listener) -> None:
    run = attack(tmp_path, _calls(listener.port), sandbox="required")
    report = dict(line.split("=", 1) for line in run.added("report.txt").split())
    for client in ("curl", "python", "devtcp"):
        held(f"{client} cannot connect", report.get(client, "0") != "0", report)
    held("the server saw no connection", listener.accepted == 0, listener.accepted)
    assert run.result["sandbox"]["network"] == "off" and run.result["status"] == "passed"


def test_network_true_lets_the_same_commands_through(tmp_path: Path, listener: Listener) -> None:
    run = attack(tmp_path, _calls(listener.port), sandbox="required", network=True)
    report = dict(line.split("=", 1) for line in run.added("report.txt").split())
    assert report["python"] == "0" and report["devtcp"] == "0", dump(run)
    assert listener.accepted >= 2
    assert run.result["sandbox"]["network"] == "on"
