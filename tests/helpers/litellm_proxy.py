"""A real LiteLLM proxy (`litellm[proxy]` from PyPI) on 127.0.0.1, in front of a scripted
server: the gateway people put between code-runner and their providers.

scripts/bootstrap installs it in its own environment (.tools/litellm), pinned, so its many
dependencies never meet code-runner's. `CODE_RUNNER_LITELLM_BIN` names another one. A proxy
that is not installed fails the test under CI (CI=true) and skips it elsewhere, always with
the command that installs it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.programs import installed_program

REPO = Path(__file__).resolve().parents[2]
BIN_ENV = "CODE_RUNNER_LITELLM_BIN"
MASTER_KEY = "sk-litellm-master-5e1f0c"
MODEL = "scripted-model"
_INSTALL = "./scripts/bootstrap --tests (pip install of litellm[proxy] into .tools/litellm)"
_START_S = 90.0


def litellm_program() -> str:
    """The proxy's `litellm` command, or fail (CI) / skip (elsewhere) saying how to get it."""
    candidate = os.environ.get(BIN_ENV) or str(REPO / ".tools" / "litellm" / "bin" / "litellm")
    return installed_program(candidate, "the LiteLLM proxy", _INSTALL)


@dataclass(frozen=True)
class Proxy:
    base_url: str  # OpenAI-compatible root, ending in /v1
    log: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(upstream: str, prices: tuple[float, float]) -> str:
    """No database: a key other than the master key gets 400 "No connected db."."""
    price_in, price_out = (p / 1e6 for p in prices)
    return (
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream}\n"
        "      api_key: sk-upstream-unused\n"
        f"      input_cost_per_token: {price_in!r}\n"
        f"      output_cost_per_token: {price_out!r}\n"
        "general_settings:\n"
        f"  master_key: {MASTER_KEY}\n"
    )


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the LiteLLM proxy exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    pytest.fail(f"the LiteLLM proxy did not answer in {_START_S:g} s:\n{log.read_text()[-3000:]}")


@contextmanager
def litellm_proxy(upstream: str, work: Path, *, prices: tuple[float, float]) -> Iterator[Proxy]:
    """The proxy on a free loopback port, forwarding `MODEL` to `upstream` (a /v1 root);
    `prices` are USD per million input and output tokens. Stopped whole on exit."""
    program = litellm_program()
    work.mkdir(parents=True, exist_ok=True)
    config = work / "litellm.yaml"
    config.write_text(_config(upstream, prices))
    log = work / "litellm.log"
    port = _free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # never fetch the price list from the net
        "LITELLM_TELEMETRY": "False",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("DATABASE_URL", None)
    argv = [program, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=work,
            start_new_session=True,
        )
    try:
        _wait_until_up(f"http://127.0.0.1:{port}/health/liveliness", proc, log)
        yield Proxy(base_url=f"http://127.0.0.1:{port}/v1", log=log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
