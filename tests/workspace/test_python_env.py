"""The DoD runs the workspace's code with the project's own environment.

Real projects, real virtualenvs and real editable installs (three forms, src and flat
layouts), through real `code-runner run`, `apply --check` and `apply`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from code_runner.workspace.python_env import discover
from tests.helpers.apply_runs import source_state
from tests.helpers.git import git, make_repo
from tests.helpers.projects import (
    DOD,
    FIXED,
    PY,
    TEST,
    WRONG,
    editable_project,
    make_venv,
    module_path,
    poetry_project,
    uv_project,
)
from tests.helpers.tasks import fingerprint, load_result, run_cli, write, write_task

pytestmark = pytest.mark.integration

FORMS = [("src", "pth"), ("flat", "finder"), ("src", "egg-link"), ("flat", "egg-link")]


def _task(root: Path, source: Path, layout: str, rounds: list[Any], **extra: Any) -> Path:
    return write_task(
        root,
        source,
        rounds,
        allowlist=[module_path(layout)],
        command=DOD,
        **extra,
    )


@pytest.mark.parametrize(("layout", "form"), FORMS)
def test_the_editable_install_is_found_in_its_form(
    tmp_path: Path, tools_dir: Path | None, layout: str, form: str
) -> None:
    source = editable_project(tmp_path, layout=layout, form=form, tools_dir=tools_dir)
    found = discover(source, environ={})
    assert found.origin == ".venv"
    assert form in [e.form for e in found.editable]
    assert any(line.startswith("project import: editable install") for line in found.describe())


@pytest.mark.parametrize(("layout", "form"), FORMS)
def test_a_correct_patch_passes_and_applies(
    tmp_path: Path, tools_dir: Path | None, layout: str, form: str
) -> None:
    source = editable_project(tmp_path, layout=layout, form=form, tools_dir=tools_dir)
    spec = _task(tmp_path, source, layout, [[write(module_path(layout), FIXED)]], sandbox="off")
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_result(tmp_path / "out")["status"] == "passed"
    check = run_cli("apply", "--check", str(tmp_path / "out"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "would pass" in check.stdout
    applied = run_cli("apply", str(tmp_path / "out"))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (source / module_path(layout)).read_text() == FIXED


@pytest.mark.parametrize(("layout", "form"), FORMS)
def test_an_uncommitted_source_change_is_never_seen(
    tmp_path: Path, tools_dir: Path | None, layout: str, form: str
) -> None:
    source = editable_project(tmp_path, layout=layout, form=form, tools_dir=tools_dir)
    (source / module_path(layout)).write_text(FIXED)  # the fix, uncommitted, in the source
    spec = _task(tmp_path, source, layout, [[]], sandbox="off")
    done = run_cli("run", str(spec))
    result = load_result(tmp_path / "out")
    assert done.returncode != 0, done.stdout
    assert result["status"] != "already_satisfied"
    assert result["status"] == "failed", result


@pytest.mark.parametrize(("layout", "form"), FORMS[:2])
def test_a_wrong_patch_fails_and_check_shows_the_dods_words(
    tmp_path: Path, tools_dir: Path | None, layout: str, form: str
) -> None:
    """A wrong patch fails its run, which `apply --check` refuses; a patch that passed its
    run but is wrong on the source's HEAD (the test there wants 2; the run's wanted 3) is
    one `apply --check` says would fail, with the DoD's own assertion, under the sandbox;
    and `apply` puts the source back."""
    source = editable_project(tmp_path, layout=layout, form=form, tools_dir=tools_dir)
    module = module_path(layout)
    wrong = [[write(module, WRONG)]]
    for where in ("failed", "passed"):
        (tmp_path / where).mkdir()
    spec = _task(tmp_path / "failed", source, layout, wrong, sandbox="auto")
    assert run_cli("run", str(spec)).returncode == 1
    assert load_result(tmp_path / "failed" / "out")["status"] == "failed"
    refused = run_cli("apply", "--check", str(tmp_path / "failed" / "out"))
    assert refused.returncode == 2 and "did not pass its DoD" in refused.stderr, refused.stderr
    # the run's HEAD wants 3, so the wrong patch passes there; then HEAD wants 2 again
    (source / "test_value.py").write_text(TEST.replace("== 2", "== 3"))
    git(source, "commit", "-qam", "want 3")
    spec = _task(tmp_path / "passed", source, layout, wrong, sandbox="auto")
    assert run_cli("run", str(spec)).returncode == 0
    (source / "test_value.py").write_text(TEST)
    git(source, "commit", "-qam", "want 2")
    out = tmp_path / "passed" / "out"
    check = run_cli("apply", "--check", str(out))
    assert check.returncode == 1, check.stdout + check.stderr
    assert "would fail" in check.stdout and "the DoD said:" in check.stdout, check.stdout
    assert "assert 3 == 2" in check.stdout, check.stdout
    before = source_state(source)
    applied = run_cli("apply", str(out))
    assert applied.returncode == 1 and "rolled back" in applied.stdout, applied.stdout
    assert source_state(source) == before


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_an_environment_outside_the_repo_works(
    tmp_path: Path, tools_dir: Path | None, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "envs" / "tinypkg"
    source = editable_project(tmp_path, layout="src", form="pth", tools_dir=tools_dir, env_at=env)
    monkeypatch.setenv("VIRTUAL_ENV", str(env))
    before = fingerprint(env)
    _passes_in_run_and_check(tmp_path, source, sandbox)
    assert fingerprint(env) == before  # the environment is used, never written


def test_check_shows_the_dods_own_error_text(tmp_path: Path, tools_dir: Path | None) -> None:
    source = editable_project(tmp_path, layout="src", form="pth", tools_dir=tools_dir)
    spec = _task(tmp_path, source, "src", [[write(module_path("src"), FIXED)]], sandbox="off")
    assert run_cli("run", str(spec)).returncode == 0
    # HEAD moves on: the test now wants 5, so the patch would no longer pass
    (source / "test_value.py").write_text(
        "from tinypkg import value\n\n\ndef test_value():\n    assert value() == 5\n"
    )
    git(source, "commit", "-qam", "want 5")
    check = run_cli("apply", "--check", str(tmp_path / "out"))
    assert check.returncode == 1, check.stdout + check.stderr
    assert "would fail" in check.stdout
    assert "the DoD said:" in check.stdout
    assert "assert 2 == 5" in check.stdout


def test_a_venv_dir_named_venv_is_found(tmp_path: Path, tools_dir: Path | None) -> None:
    source = tmp_path / "p"
    source.mkdir()
    make_venv(source / "venv", None)
    found = discover(source, environ={"VIRTUAL_ENV": "/nonexistent"})
    assert found.origin == "venv"
    assert found.python == source / "venv" / "bin" / "python"


@pytest.mark.parametrize(("layout", "form"), FORMS)
def test_under_the_sandbox_the_workspace_is_imported(
    tmp_path: Path, tools_dir: Path | None, layout: str, form: str
) -> None:
    source = editable_project(tmp_path, layout=layout, form=form, tools_dir=tools_dir)
    (source / module_path(layout)).write_text(WRONG)  # uncommitted: never seen
    rounds = [[], [write(module_path(layout), FIXED)]]
    done = run_cli("run", str(_task(tmp_path, source, layout, rounds, sandbox="auto")))
    result = load_result(tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert result["status"] == "passed"
    assert result["rounds"] == 2  # round 1 (no change) failed: the source's copy was not seen
    assert result["sandbox"]["kind"] == "bwrap"


def test_a_copy_in_the_base_interpreter_never_wins_under_the_sandbox(
    tmp_path: Path, tools_dir: Path | None
) -> None:
    """The source lies under a dir the sandbox hides (/tmp), so `site` skips its editable
    path entry and the shim puts it back: where `site` would have, before the base
    interpreter's site packages that the `.venv` sees, which hold a `click` of their own
    (code-runner depends on it). The project here is a `click` too: its own must win."""
    source = make_repo(
        tmp_path / "source",
        {
            "pyproject.toml": '[project]\nname = "click"\nversion = "0.1"\n'
            '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n',
            "src/click/__init__.py": "def value():\n    return 1\n",
            ".gitignore": ".venv/\n*.egg-info/\n",
        },
    )
    python = make_venv(source / ".venv", tools_dir)
    pip = [PY, "-m", "pip", "--python", str(python), "install", "-q", "--no-index"]
    pip += ["--no-build-isolation", "--no-deps", "-e", "."]
    subprocess.run(pip, cwd=source, check=True, capture_output=True)
    git(source, "update-index", "-q", "--refresh")
    command = "python -c 'import click; assert click.value() == 2, click.__file__'"
    rounds = [[write("src/click/__init__.py", "def value():\n    return 2\n")]]
    spec = write_task(
        tmp_path, source, rounds, allowlist=["src/click/__init__.py"], command=command
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    result = load_result(tmp_path / "out")
    assert result["status"] == "passed" and result["rounds"] == 1, result
    # round 0 failed on the workspace's own copy (its path is the assertion's message)
    assert "/wt/src/click/__init__.py" in result["round_details"][0]["verdict"]["stderr_tail"]


def test_dry_run_shows_what_the_dod_will_see(tmp_path: Path, tools_dir: Path | None) -> None:
    source = editable_project(tmp_path, layout="src", form="pth", tools_dir=tools_dir)
    spec = _task(tmp_path, source, "src", [[]], sandbox="off")
    done = run_cli("dry-run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"DoD sees: interpreter: {source / '.venv' / 'bin' / 'python'}" in done.stdout
    assert f"DoD sees: environment: {source / '.venv'} (.venv)" in done.stdout
    assert "DoD sees: project import: editable install (pth" in done.stdout
    assert "mapped to the workspace" in done.stdout


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_node_modules_tools_reach_the_dod(tmp_path: Path, sandbox: str) -> None:
    source = make_repo(
        tmp_path / "source",
        {"calc.py": "x = 1\n", ".gitignore": "node_modules/\n"},
    )
    tool = source / "node_modules" / ".bin" / "check-x"
    tool.parent.mkdir(parents=True)
    tool.write_text('#!/bin/sh\ngrep -q "x = 2" calc.py && test -n "$NODE_PATH"\n')
    tool.chmod(0o755)
    spec = write_task(
        tmp_path,
        source,
        [[write("calc.py", "x = 2\n")]],
        command="check-x",
        sandbox=sandbox,
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_result(tmp_path / "out")["status"] == "passed"


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_venv_dir_in_the_repo_works_in_run_check_and_apply(
    tmp_path: Path, tools_dir: Path | None, sandbox: str
) -> None:
    venv = tmp_path / "source" / "venv"
    source = editable_project(tmp_path, layout="src", form="pth", tools_dir=tools_dir, env_at=venv)
    assert discover(source, environ={}).origin == "venv"
    before = fingerprint(venv)
    _passes_in_run_and_check(tmp_path, source, sandbox)  # run, apply --check and apply
    assert fingerprint(venv) == before  # the source's venv/ is used, never written


# --- the environments people have: conda, poetry, uv -------------------------------------
# One project per kind, both sandbox modes on it: building an environment is the slow part.

VENV_DOD = ".venv/bin/python -m pytest -q -p no:cacheprovider test_value.py"


def _passes_in_run_and_check(root: Path, source: Path, sandbox: str, command: str = DOD) -> None:
    """A correct patch passes in `run`, `apply --check` and `apply` while an uncommitted
    source-only change (which would fail) is never seen."""
    where = root / sandbox
    where.mkdir()
    (source / module_path("src")).write_text(WRONG)
    rounds = [[write(module_path("src"), FIXED)]]
    spec = write_task(
        where, source, rounds, allowlist=[module_path("src")], command=command, sandbox=sandbox
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_result(where / "out")["status"] == "passed"
    git(source, "checkout", "--", module_path("src"))  # apply refuses an overlapping change
    check = run_cli("apply", "--check", str(where / "out"))
    assert check.returncode == 0 and "would pass" in check.stdout, check.stdout + check.stderr
    applied = run_cli("apply", str(where / "out"))  # the DoD again, in the source
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (source / module_path("src")).read_text() == FIXED
    git(source, "checkout", "--", module_path("src"))


def _found_with_the_editable_install(source: Path, origin: str) -> None:
    found = discover(source)
    assert found.origin == origin and found.python is not None
    assert [p for e in found.editable for p in e.paths] == [source / "src"]


def test_a_conda_prefix_is_the_dods_environment(
    tmp_path: Path, tools_dir: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """conda's layout: an environment under `envs/` with `conda-meta/`, active through
    CONDA_PREFIX only (no VIRTUAL_ENV)."""
    env = tmp_path / "miniconda3" / "envs" / "tinypkg"
    source = editable_project(tmp_path, layout="src", form="pth", tools_dir=tools_dir, env_at=env)
    (env / "conda-meta").mkdir()
    (env / "conda-meta" / "history").write_text("==> 2026-12-01 12:00:00 <==\n# cmd: create\n")
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("CONDA_PREFIX", str(env))
    _found_with_the_editable_install(source, "CONDA_PREFIX")
    for sandbox in ("auto", "off"):
        _passes_in_run_and_check(tmp_path, source, sandbox)


def test_a_poetry_environment_outside_the_repo_is_the_dods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """poetry keeps the environment in its cache dir; `poetry run` / `poetry shell` make it
    the active VIRTUAL_ENV; the project is installed as a `tinypkg.pth` path entry."""
    env = tmp_path / "cache" / "pypoetry" / "virtualenvs" / "tinypkg-Qx3fK2pL-py3.11"
    source = poetry_project(tmp_path, env)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setenv("VIRTUAL_ENV", str(env))
    _found_with_the_editable_install(source, "VIRTUAL_ENV")
    for sandbox in ("auto", "off"):
        _passes_in_run_and_check(tmp_path, source, sandbox)


def test_a_uv_managed_venv_with_and_without_the_sandbox(
    tmp_path: Path, tools_dir: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`uv venv` + `uv pip install -e .`, and a DoD that names `.venv/bin/python`: under the
    sandbox the source's `.venv` is bound read-only into the workspace; without it, it is
    linked there for the DoD. Either way the editable install resolves to the workspace, in
    `run` and in `apply --check`."""
    source = uv_project(tmp_path, tools_dir)
    assert "uv = " in (source / ".venv" / "pyvenv.cfg").read_text()
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    _found_with_the_editable_install(source, ".venv")
    for sandbox in ("auto", "off"):
        _passes_in_run_and_check(tmp_path, source, sandbox, command=VENV_DOD)
        out = tmp_path / sandbox / "out"
        assert ".venv" not in (out / "fix-calc.patch").read_text()
