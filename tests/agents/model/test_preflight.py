"""Preflight of model backends (before any workspace) and what `doctor` says about them."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner.cli.boundary import run_cli as invoke
from code_runner.cli.main import cli
from code_runner.testing.chat_completions import ChatCompletions
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.git import git
from tests.helpers.model_runs import (
    KEY,
    KEY_ENV,
    fast_backend,
    model_task,
    no_workspaces,
    write_config,
)
from tests.helpers.tasks import run_cli

pytestmark = pytest.mark.e2e


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def refused(run_out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Fix:" in err
    assert not run_out.exists() and no_workspaces()  # nothing was created
    return err


def test_unknown_backend_name(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = model_task(tmp_path, server, monkeypatch, backend="codex")
    assert run.run() == 3
    err = refused(run.out, capsys)
    assert "unknown backend 'codex'" in err
    assert "scripted-llm" in err and "[backends.codex]" in err  # the choices and the fix


def test_missing_key_variable(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = model_task(tmp_path, server, monkeypatch)
    monkeypatch.delenv(KEY_ENV)
    assert run.run() == 3
    err = refused(run.out, capsys)
    assert f"${KEY_ENV}, which is not set" in err and f"export {KEY_ENV}=" in err
    assert server.requests == []


def test_unreachable_endpoint(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    run = model_task(tmp_path, server, monkeypatch, backend_settings={"base_url": dead})
    assert run.run() == 3
    err = refused(run.out, capsys)
    assert f"{dead}/models does not answer" in err and "start the server" in err


# error answers to GET /models with a key the server does not accept, as each one words it
LITELLM_NO_DB = (
    400,
    {
        "error": {
            "message": "No connected db.",
            "type": "no_db_connection",
            "param": None,
            "code": "400",
        }
    },
)
OPENAI_BAD_KEY = (
    401,
    {
        "error": {
            "message": "Incorrect API key provided",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    },
)
ANTHROPIC_BAD_KEY = (
    401,
    {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
)
GATEWAY_FORBIDDEN = (403, {"detail": "Forbidden"})
LITELLM_BAD_TOKEN = (
    400,
    {
        "error": {
            "message": "Authentication Error, Invalid proxy server token passed.",
            "type": "auth_error",
            "param": "None",
            "code": "400",
        }
    },
)


@pytest.mark.parametrize(
    ("status", "body"),
    [LITELLM_NO_DB, OPENAI_BAD_KEY, ANTHROPIC_BAD_KEY, GATEWAY_FORBIDDEN, LITELLM_BAD_TOKEN],
    ids=["litellm-no-db", "openai", "anthropic", "forbidden", "litellm-token"],
)
def test_a_refused_key_in_any_common_shape_stops_the_run_at_preflight(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: int,
    body: dict[str, object],
) -> None:
    class Guarded(ChatCompletions):
        def static_routes(self):  # type: ignore[no-untyped-def]
            return {("GET", "/v1/models"): (status, body)}

    with ScriptedServer(Guarded()) as guarded:
        run = model_task(tmp_path, guarded, monkeypatch)
        assert run.run() == 3
        assert guarded.stream_requests() == []  # no model call was spent
    err = refused(run.out, capsys)
    assert "the gateway refused the key" in err and f"HTTP {status}" in err
    assert f"${KEY_ENV}" in err and "master_key" in err  # the fix names the variable


def test_an_error_that_is_not_about_the_key_passes_preflight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server without /models (404) or that answers it oddly is still reachable."""

    class NoModels(ChatCompletions):
        def static_routes(self):  # type: ignore[no-untyped-def]
            return {("GET", "/v1/models"): (404, {"error": {"message": "Not Found"}})}

    with ScriptedServer(NoModels()) as plain:
        run = model_task(tmp_path, plain, monkeypatch)
        assert invoke(cli, ["dry-run", str(run.spec)]) == 0


def test_openai_without_a_model_and_with_the_sdk_variables(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = model_task(tmp_path, server, monkeypatch, backend="openai")
    monkeypatch.delenv("CODE_RUNNER_CONFIG")  # no config at all: the built-in `openai`
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert run.run() == 3
    assert "needs a model" in refused(run.out, capsys)
    # `openai:MODEL` goes to OPENAI_BASE_URL with OPENAI_API_KEY (here: a dry run)
    run.spec.write_text(run.spec.read_text().replace('"openai"', '"openai:gpt-test"'))
    assert invoke(cli, ["dry-run", str(run.spec)]) == 0
    probe = server.requests[-1]
    assert (probe.method, probe.path) == ("GET", "/v1/models")
    assert probe.headers["authorization"] == f"Bearer {KEY}"


def test_a_trusted_repo_config_is_read_under_the_user_config_and_validated_whole(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = model_task(tmp_path, server, monkeypatch, backend="repo-llm")
    monkeypatch.delenv("CODE_RUNNER_CONFIG")
    write_config(run.source / "code-runner.toml", {"repo-llm": fast_backend(server)})
    assert invoke(cli, ["dry-run", str(run.spec)]) == 2  # it names an endpoint: untrusted
    assert "code-runner trust" in capsys.readouterr().err
    assert invoke(cli, ["trust", str(run.source)]) == 0
    assert invoke(cli, ["dry-run", str(run.spec)]) == 0  # the trusted file is read
    (run.source / "code-runner.toml").write_text(
        "[backends.repo-llm]\nmodel = 3\nretries = -1\nsurprise = true\n"
        "[budget]\nturns_per_round = 0\n"
    )
    assert invoke(cli, ["trust", str(run.source)]) == 0
    capsys.readouterr()
    assert invoke(cli, ["dry-run", str(run.spec)]) == 2
    err = capsys.readouterr().err
    assert "code-runner.toml: 4 problems" in err
    for field in (
        "budget.turns_per_round",
        "repo-llm.model",
        "repo-llm.retries",
        "repo-llm.surprise",
    ):
        assert field in err
    git(run.source, "status", "--short")  # the source is a plain repo still


def test_doctor_lists_backends_keys_by_name_and_reachability(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(
        tmp_path / "config.toml",
        {
            "up": fast_backend(server),
            "down": {**fast_backend(server), "base_url": f"http://127.0.0.1:{closed_port()}/v1"},
            "unkeyed": {
                **fast_backend(server),
                "base_url": f"http://127.0.0.1:{closed_port()}/v1",
                "api_key_env": "CR_TEST_UNSET_KEY",
            },
            "keyless": {**fast_backend(server), "api_key_env": ""},
        },
    )
    monkeypatch.setenv("CODE_RUNNER_CONFIG", str(config))
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.delenv("CR_TEST_UNSET_KEY", raising=False)
    proc = run_cli("doctor", "--json")
    assert KEY not in proc.stdout + proc.stderr
    report = json.loads(proc.stdout)["model_backends"]
    assert report["config"] == str(config)
    backends = report["backends"]
    assert set(backends) == {"openai", "up", "down", "unkeyed", "keyless"}
    assert backends["up"] | {"problem": None} == backends["up"]
    assert (backends["up"]["key_set"], backends["up"]["reachable"]) == (True, True)
    assert (backends["down"]["key_set"], backends["down"]["reachable"]) == (True, False)
    assert "does not answer" in backends["down"]["problem"]
    # a backend whose key is not set is never contacted (no traffic to an unusable endpoint)
    assert (backends["unkeyed"]["key_set"], backends["unkeyed"]["reachable"]) == (False, None)
    assert "not contacted" in backends["unkeyed"]["problem"]
    assert backends["keyless"]["api_key_env"] is None and backends["keyless"]["key_set"] is None
    text = run_cli("doctor").stdout
    assert "up (openai, model scripted-model)" in text and f"${KEY_ENV} set" in text
    assert KEY not in text
