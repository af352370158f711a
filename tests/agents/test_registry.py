"""The backend registry: built-in names, installed entry points, import paths, and an
unknown name answered with the choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner import agents
from code_runner.agents.cli_agents.agent import CliAgent
from code_runner.agents.scripted import ScriptedAgent
from code_runner.cli.trust_cmd import trust_repo_config
from code_runner.errors import PreflightError

_FACTORY = """
from code_runner.agents.scripted import Script, ScriptedAgent


def make(arg, *, base_dir, source_dir, name):
    agent = ScriptedAgent(Script(rounds=[]), source=f"{name}|{arg}|{base_dir}")
    return agent


not_a_factory = 42
"""


def _package(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "backend.py").write_text(_FACTORY)


def _dist(root: Path, name: str, entry_points: str) -> None:
    """A real installed distribution: a dist-info with METADATA and entry_points.txt."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{agents.ENTRY_POINT_GROUP}]\n{entry_points}\n")


def _source(agent: object) -> str:
    assert isinstance(agent, ScriptedAgent)
    return agent.source


def test_a_backend_from_an_installed_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    _package(site, "cr_thirdparty")
    _dist(site, "cr-thirdparty", "thirdparty = cr_thirdparty.backend:make")
    monkeypatch.syspath_prepend(str(site))
    assert "thirdparty" in agents.available_backends()
    agent = agents.make_agent("thirdparty:some-arg", base_dir=tmp_path)
    assert _source(agent) == f"thirdparty|some-arg|{tmp_path}"


def test_a_broken_entry_point_is_a_preflight_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    _package(site, "cr_broken")
    _dist(
        site, "cr-broken", "gone = cr_broken.missing:make\nfour2 = cr_broken.backend:not_a_factory"
    )
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(PreflightError, match="cannot be loaded") as info:
        agents.make_agent("gone", base_dir=tmp_path)
    assert info.value.fix
    with pytest.raises(PreflightError, match="is not callable"):
        agents.make_agent("four2", base_dir=tmp_path)


def test_a_full_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path / "lib", "cr_dotted")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    plain = agents.make_agent("cr_dotted.backend:make", base_dir=tmp_path)
    assert _source(plain) == f"cr_dotted.backend:make|None|{tmp_path}"
    with_arg = agents.make_agent("cr_dotted.backend:make:x:y.json", base_dir=tmp_path)
    assert _source(with_arg) == f"cr_dotted.backend:make|x:y.json|{tmp_path}"


@pytest.mark.parametrize(
    ("backend", "needle"),
    [
        ("cr_nowhere.backend:make", "module 'cr_nowhere.backend' cannot be imported"),
        ("json.decoder:nothing_here", "module 'json.decoder' has no 'nothing_here'"),
        ("json.decoder", "does not name a factory"),
        ("json.decoder:NaN", "is not callable"),
    ],
)
def test_a_bad_import_path_says_what_is_wrong(tmp_path: Path, backend: str, needle: str) -> None:
    with pytest.raises(PreflightError, match=needle) as info:
        agents.make_agent(backend, base_dir=tmp_path)
    assert info.value.fix


def test_an_unknown_name_gets_did_you_mean_and_the_choices(tmp_path: Path) -> None:
    with pytest.raises(PreflightError) as info:
        agents.make_agent("scriptd:fix.json", base_dir=tmp_path)
    assert info.value.message == "unknown backend 'scriptd'; did you mean 'scripted'?"
    assert "use one of: claude-cli, codex-cli, command, openai, replay, scripted" in (
        info.value.fix or ""
    )


def test_a_configured_backend_is_built_by_its_kind(tmp_path: Path) -> None:
    (tmp_path / "code-runner.toml").write_text(
        '[backends.mine]\nkind = "command"\ncommand = ["true"]\n'
    )
    trust_repo_config(tmp_path)
    agent = agents.make_agent("mine", base_dir=tmp_path, source_dir=tmp_path)
    assert isinstance(agent, CliAgent)
