"""File attacks through full runs: paths that leave the workspace, symlinks to host files,
`.git` in every spelling, over-long and control-character names. The file tools run on the
host, so every one must refuse by itself, sandbox or not; commands that plant the same
names must never get them into the patch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.attacks import MODES, attack, call, cmd, dump, held
from tests.helpers.tasks import FIXED_BOTH, PY, fingerprint

pytestmark = pytest.mark.integration

FILE_TOOLS = ("read_file", "write_file", "edit_file")
OUTSIDE = [
    "../host.txt",
    "calc.py/../../host.txt",
    "../../../../../../etc/passwd",
    "/etc/passwd",
    "//etc/passwd",
    "~/.bashrc",
    "~root/.profile",
    "/proc/self/environ",
    "/proc/self/root/etc/shadow",
    "/proc/self/cwd/calc.py",
    "C:/Windows/win.ini",
    "\\etc\\passwd",
]
GIT_NAMES = [
    ".git",
    ".git/config",
    ".GIT/config",
    ".Git/HEAD",
    ".git./config",
    ".git /config",
    ".git:config",
    "git~1/config",
    "GIT~1/config",
    ".g\u200cit/config",
    "\u200b.git/config",
    "sub/.git/hooks/pre-commit",
    ".gitmodules",
]
BAD_NAMES = [
    "sub/" + "a/" * 2100 + "x.py",
    "sub/" + "n" * 300 + ".py",
    "sub/a\x1b[31m.py",
    "sub/a\nb.py",
    "sub/a\rb.py",
    "sub/\x00.py",
    "sub/\u202egnp.py",
    "sub/a\u2066b.py",
    "sub/a\u200db.py",
    "sub/a\x7f.py",
]


def file_call(tool: str, path: str) -> dict[str, Any]:
    if tool == "read_file":
        return call(tool, path=path)
    if tool == "write_file":
        return call(tool, path=path, content="pwned\n")
    return call(tool, path=path, start_line=1, end_line=1, content="pwned")


@pytest.mark.parametrize("mode", MODES)
def test_paths_and_names_refused_by_every_file_tool(
    tmp_path: Path, mode: str, etc_file: Path
) -> None:
    host = tmp_path / "host.txt"
    host.write_text("host secret\n")
    paths = OUTSIDE + GIT_NAMES + BAD_NAMES
    calls = [call("read_file", path="calc.py")]  # so STALE is never why an edit fails
    calls += [file_call(tool, p) for p in paths for tool in FILE_TOOLS]
    calls.append(call("write_file", path="calc.py", content=FIXED_BOTH))
    watched = [host, etc_file, Path("/etc/passwd")]
    before = [p.read_bytes() for p in watched]
    source = tmp_path / "source"
    run = attack(tmp_path, calls, sandbox=mode)
    results = run.tool_results[1:-1]
    assert len(results) == len(paths) * len(FILE_TOOLS)
    for index, result in enumerate(results):
        path, tool = paths[index // 3], FILE_TOOLS[index % 3]
        held(f"{tool} {path[:40]!r}", result["error"] == "PERMISSION", result)
    held("host files intact", [p.read_bytes() for p in watched] == before)
    assert run.result["status"] == "passed", dump(run)
    assert run.patch.count("diff --git") == 1 and "calc.py" in run.patch
    assert run.result["source_unchanged"] and source.exists()


@pytest.mark.parametrize("mode", MODES)
def test_symlinks_to_host_files_and_swaps_between_calls(
    tmp_path: Path, mode: str, etc_file: Path
) -> None:
    before = etc_file.read_bytes()
    plant = f"import os; os.symlink('{etc_file}', 'link.txt'); os.symlink('/etc', 'sub')"
    swap = f"import os; os.rename('calc.py', 'calc.bak'); os.symlink('{etc_file}', 'calc.py')"
    calls = [  # planted with Python: what is tested here is the file tools, not the policy
        cmd(f'{PY} -c "{plant}"'),
        *[file_call(tool, "link.txt") for tool in FILE_TOOLS],
        call("write_file", path=f"sub/{etc_file.name}", content="pwned\n"),
        call("write_file", path="sub/code-runner-new-file", content="pwned\n"),
        call("read_file", path="calc.py"),
        cmd(f'{PY} -c "{swap}"'),  # swapped after the read
        call("edit_file", path="calc.py", start_line=1, end_line=1, content="pwned"),
        call("write_file", path="calc.py", content="pwned\n"),
        call("read_file", path="calc.py"),
    ]
    run = attack(tmp_path, calls, sandbox=mode, allowlist=("calc.py", "link.txt", "sub"))
    results = run.tool_results
    assert results[0]["details"]["exit_code"] == 0, dump(run)
    for index in [1, 2, 3, 4, 5, 8, 9, 10]:
        held(f"symlink call {index}", results[index]["error"] == "PERMISSION", results[index])
    held("host file intact", etc_file.read_bytes() == before)
    held("no file made through the directory link", not Path("/etc/code-runner-new-file").exists())
    dropped = {d["path"] for d in run.result["dropped_changes"] if d["refused"]}
    held("symlinks never reach the patch", {"link.txt", "sub", "calc.py"} <= dropped, dropped)
    assert "120000" not in run.patch and "link.txt" not in run.patch


@pytest.mark.parametrize("mode", MODES)
def test_git_names_planted_by_commands_never_reach_the_patch(tmp_path: Path, mode: str) -> None:
    names = [".GIT", ".Git", "git~1", "GIT~1", ".git.", ".git ", ".g\\u200cit", "\\u200b.git"]
    names += ["sub/.git", "sub/.GIT", "sub/git~1"]
    plant = (
        f'{PY} -c "import os; names = {names!r}; '
        "[os.makedirs(d, exist_ok=True) or open(d + '/config', 'w').write('[core]') "
        "for d in names]; "
        "open('.gitmodules', 'w').write('[submodule x]\\n\\tpath = x\\n\\turl = ../evil\\n'); "
        "open('sub/ok.txt', 'w').write('fine')\""
    )
    calls = [
        cmd(plant),
        call("search_code", pattern="repositoryformatversion"),  # in the real git config
        call("search_code", pattern="gitdir", glob=".git"),  # the pointer file's text
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    source = tmp_path / "source"
    run = attack(tmp_path, calls, sandbox=mode, allowlist=("calc.py", "sub"))
    before = fingerprint(source)
    assert run.tool_results[0]["details"]["exit_code"] == 0, dump(run)
    for result in run.tool_results[1:3]:
        held("search never reads git's own files", result["details"].get("matches", 0) == 0, result)
    patched = [
        line.split(" b/", 1)[1] for line in run.patch.splitlines() if line.startswith("diff --git")
    ]
    held("only plain files in the patch", sorted(patched) == ["calc.py", "sub/ok.txt"], patched)
    held("no .gitmodules", ".gitmodules" not in run.patch)
    assert run.result["status"] == "passed", dump(run)
    assert fingerprint(source) == before


@pytest.mark.parametrize("mode", MODES)
def test_bad_names_made_by_commands_are_dropped(tmp_path: Path, mode: str) -> None:
    names = ["a\\nb.py", "a\\x1b[31m.py", "\\u202egnp.py", "a\\u200db.py", "n" * 250 + ".py"]
    deep = "d/" * 1100  # a chain far deeper than Python's recursion limit, over 2 KiB long
    plant = (
        f"{PY} -c \"import os; os.makedirs('sub'); os.chdir('sub'); "
        f"[open(n, 'w').write('x') for n in {names!r}]; "
        "open('ok.py', 'w').write('fine'); "
        f"[(os.mkdir('d'), os.chdir('d')) for _ in range({deep.count('/')})]; "
        "open('x', 'w').write('deep')\""
    )
    calls = [cmd(plant), call("write_file", path="calc.py", content=FIXED_BOTH)]
    run = attack(tmp_path, calls, sandbox=mode, allowlist=("calc.py", "sub"))
    assert run.tool_results[0]["details"]["exit_code"] == 0, dump(run)
    patched = [line for line in run.patch.splitlines() if line.startswith("diff --git")]
    names = sorted(line.split(" b/", 1)[1] for line in patched)
    held("only the long-but-legal name and ok.py join calc.py", names[0] == "calc.py", names)
    for name in names:
        held(
            f"no control/bidi/over-long name {name[:30]!r}", name.isprintable() and len(name) < 4096
        )
    assert "sub/ok.py" in names and run.result["status"] == "passed"
