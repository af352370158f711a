"""Attacks on the tools, performed for real. Each asserts that the call failed with the
right code AND that its target is byte-identical afterwards."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from code_runner.agents.base import RoundContext
from code_runner.agents.scripted import ScriptedAgent, load_script
from code_runner.events import EventKind, ListSink
from code_runner.task.paths import Allowlist
from code_runner.tools import Toolbox
from code_runner.tools.base import ToolErrorCode, ToolResult

pytestmark = pytest.mark.integration

FILE_TOOLS = ("read_file", "write_file", "edit_file")


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under `root` (symlinks not followed): kind and bytes or link target."""
    state: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                state[rel] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                state[rel] = ("dir", b"")
            else:
                state[rel] = ("file", path.read_bytes())
    return state


@dataclass
class Scene:
    root: Path
    ws: Path
    source: Path
    host: Path  # a host file outside the workspace the agent must never read or change
    box: Toolbox
    events: ListSink

    def call(self, name: str, **args: Any) -> ToolResult:
        return self.box.call(name, args)

    def file_call(self, tool: str, path: str) -> ToolResult:
        args: dict[str, Any] = {"path": path}
        if tool == "write_file":
            args["content"] = "pwned\n"
        elif tool == "edit_file":
            args.update(start_line=1, end_line=1, content="pwned")
        return self.box.call(tool, args)


def make_scene(tmp_path: Path, source: Path) -> Scene:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src/app.py").write_text("x = 1\n")
    (ws / ".git").mkdir()
    (ws / ".git/config").write_text("[core]\n\tbare = false\n")
    (ws / ".git/HEAD").write_text("ref: refs/heads/main\n")
    host = tmp_path / "host.txt"
    host.write_text("host secret\n")
    home_file = Path(os.environ["HOME"]) / "host.txt"
    home_file.write_text("home secret\n")
    events = ListSink()
    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}
    box = Toolbox(ws, allowlist=Allowlist.parse(["src"]), source_dir=source, env=env, events=events)
    return Scene(tmp_path, ws, source, host, box, events)


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    """The source is a plain directory: file tools never look at it."""
    source = tmp_path / "source"
    (source / "src").mkdir(parents=True)
    (source / "src/app.py").write_text("x = 1\n")
    return make_scene(tmp_path, source)


@pytest.fixture
def git_scene(tmp_path: Path, git_repo: Path) -> Scene:
    """The source is a real git repo, for attacks through commands."""
    return make_scene(tmp_path, git_repo)


def assert_refused(result: ToolResult, code: ToolErrorCode, *fragments: str) -> None:
    assert not result.ok and result.error is code, result.content
    for fragment in fragments:
        assert fragment in result.content, result.content


# -- paths that name something outside the workspace -----------------------------------

OUTSIDE_PATHS = [
    "../host.txt",
    "src/../../host.txt",
    "src/../../../../../../../etc/passwd",
    "/etc/passwd",
    "~/host.txt",
    "~root/.bashrc",
    "/proc/self/environ",
    "/proc/self/cwd/src/app.py",
    "//etc/passwd",
    "\\etc\\passwd",
    "C:/Windows/win.ini",
    "src/..",
    "./src/app.py",
]


@pytest.mark.parametrize("tool", FILE_TOOLS)
@pytest.mark.parametrize("path", OUTSIDE_PATHS)
def test_paths_outside_the_workspace(scene: Scene, tool: str, path: str) -> None:
    home_file = Path(os.environ["HOME"]) / "host.txt"
    watched = [scene.host, home_file, Path("/etc/passwd")]
    before = [p.read_bytes() for p in watched]
    environ_before = Path("/proc/self/environ").read_bytes()
    ws_before = snapshot(scene.ws)
    if tool == "edit_file":
        scene.call("read_file", path="src/app.py")  # so STALE cannot be the reason
    assert_refused(scene.file_call(tool, path), ToolErrorCode.PERMISSION)
    assert [p.read_bytes() for p in watched] == before
    assert Path("/proc/self/environ").read_bytes() == environ_before
    assert snapshot(scene.ws) == ws_before


# -- symlinks --------------------------------------------------------------------------


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_symlink_to_a_host_file(scene: Scene, tool: str) -> None:
    os.symlink(scene.host, scene.ws / "src/link.txt")
    before = scene.host.read_bytes()
    result = scene.file_call(tool, "src/link.txt")
    assert_refused(result, ToolErrorCode.PERMISSION, "symlinks are not followed")
    assert "host secret" not in result.content
    assert scene.host.read_bytes() == before
    assert os.readlink(scene.ws / "src/link.txt") == str(scene.host)


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_dangling_symlink_to_a_host_path(scene: Scene, tool: str) -> None:
    target = scene.root / "would-be-created.txt"
    os.symlink(target, scene.ws / "src/new.txt")
    assert_refused(scene.file_call(tool, "src/new.txt"), ToolErrorCode.PERMISSION, "symlink")
    assert not target.exists()


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_symlinked_directory_in_the_middle_of_a_path(scene: Scene, tool: str) -> None:
    outside = scene.root / "outside"
    outside.mkdir()
    (outside / "app.py").write_text("outside\n")
    os.symlink(outside, scene.ws / "src/pkg")
    before = snapshot(outside)
    for path in ("src/pkg/app.py", "src/pkg/new/file.py"):
        result = scene.file_call(tool, path)
        assert_refused(result, ToolErrorCode.PERMISSION, "src/pkg is a symlink")
    assert snapshot(outside) == before


def test_symlinked_workspace_root_component(scene: Scene) -> None:
    """A symlink to `/` inside the workspace cannot be used as a springboard."""
    os.symlink("/", scene.ws / "src/root")
    assert_refused(scene.call("read_file", path="src/root/etc/passwd"), ToolErrorCode.PERMISSION)
    assert_refused(
        scene.call("write_file", path="src/root/tmp/evil", content="x"), ToolErrorCode.PERMISSION
    )
    assert not Path("/tmp/evil").exists()


def test_symlink_swapped_in_between_read_and_edit(scene: Scene) -> None:
    assert scene.call("read_file", path="src/app.py").ok
    (scene.ws / "src/app.py").unlink()
    os.symlink(scene.host, scene.ws / "src/app.py")
    before = scene.host.read_bytes()
    result = scene.call("edit_file", path="src/app.py", start_line=1, end_line=1, content="evil")
    assert_refused(result, ToolErrorCode.PERMISSION, "symlinks are not followed")
    assert scene.host.read_bytes() == before
    # the same file content behind the link does not make it edit-able either
    scene.host.write_text("x = 1\n")
    result = scene.call("edit_file", path="src/app.py", start_line=1, end_line=1, content="evil")
    assert_refused(result, ToolErrorCode.PERMISSION)
    assert scene.host.read_text() == "x = 1\n"


def test_directory_swapped_for_a_symlink_between_read_and_write(scene: Scene) -> None:
    (scene.ws / "src/pkg").mkdir()
    (scene.ws / "src/pkg/mod.py").write_text("a\n")
    assert scene.call("read_file", path="src/pkg/mod.py").ok
    outside = scene.root / "outside"
    outside.mkdir()
    (outside / "mod.py").write_text("a\n")
    (scene.ws / "src/pkg").rename(scene.root / "moved-away")
    os.symlink(outside, scene.ws / "src/pkg")
    before = snapshot(outside)
    assert_refused(
        scene.call("write_file", path="src/pkg/mod.py", content="evil"), ToolErrorCode.PERMISSION
    )
    assert_refused(
        scene.call("edit_file", path="src/pkg/mod.py", start_line=1, end_line=1, content="e"),
        ToolErrorCode.PERMISSION,
    )
    assert snapshot(outside) == before


def test_workspace_itself_replaced_by_a_symlink(scene: Scene) -> None:
    scene.ws.rename(scene.root / "ws-real")
    os.symlink(scene.source, scene.ws)
    before = snapshot(scene.source)
    assert_refused(scene.call("read_file", path="src/app.py"), ToolErrorCode.PERMISSION)
    assert_refused(
        scene.call("write_file", path="src/app.py", content="evil"), ToolErrorCode.PERMISSION
    )
    assert_refused(
        scene.call("run_command", command="echo evil > README.md"), ToolErrorCode.PERMISSION
    )
    assert snapshot(scene.source) == before


# -- git's own directory, in every spelling --------------------------------------------

GIT_PATHS = [
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
    ".git\ufeff/config",
    "src/.git/hooks/post-checkout",
    "src/.GIT",
    ".gitmodules",
]


@pytest.mark.parametrize("tool", FILE_TOOLS)
@pytest.mark.parametrize("path", GIT_PATHS)
def test_git_dir_in_any_spelling(scene: Scene, tool: str, path: str) -> None:
    # even with `.git` in the allowlist, the path rules refuse it first
    box = Toolbox(
        scene.ws,
        allowlist=Allowlist(entries=(".git", ".GIT", ".gitmodules", "src", "git~1")),
        source_dir=scene.source,
        env={"PATH": os.environ["PATH"]},
        events=ListSink(),
    )
    before = snapshot(scene.ws)
    args: dict[str, Any] = {"path": path}
    if tool == "write_file":
        args["content"] = "[core]\n\thooksPath = /tmp/evil\n"
    elif tool == "edit_file":
        args.update(start_line=1, end_line=1, content="evil")
    assert_refused(box.call(tool, args), ToolErrorCode.PERMISSION)
    assert snapshot(scene.ws) == before


# -- names that are too long or carry control / bidi characters ------------------------

BAD_NAMES = [
    "src/" + "a/" * 2100 + "x.py",  # over 4096 bytes
    "src/" + "n" * 300 + ".py",  # a segment over 255 bytes
    "src/" + "é" * 200 + ".py",  # 400 bytes of UTF-8 in one segment
    "src/a\x1b[31m.py",
    "src/a\nb.py",
    "src/a\rb.py",
    "src/a\tb.py",
    "src/\x00.py",
    "src/\u202egnp.py",  # right-to-left override
    "src/a\u2066b.py",  # bidi isolate
    "src/a\u200db.py",  # zero-width joiner
    "src/a\x7f.py",
]


@pytest.mark.parametrize("tool", FILE_TOOLS)
@pytest.mark.parametrize("path", BAD_NAMES)
def test_bad_names_are_refused_and_nothing_is_created(scene: Scene, tool: str, path: str) -> None:
    before = snapshot(scene.ws)
    result = scene.file_call(tool, path)
    assert_refused(result, ToolErrorCode.PERMISSION)
    assert len(result.content) < 600  # a 4 KiB path is not echoed back whole
    assert snapshot(scene.ws) == before


# -- the allowlist ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ["src_evil/x.py", "srcx", "Src/app.py", "README.md", "x/src/a.py"])
def test_writes_outside_the_allowlist(scene: Scene, path: str) -> None:
    (scene.ws / "README.md").write_text("readme\n")
    assert scene.call("read_file", path="README.md").ok
    before = snapshot(scene.ws)
    assert_refused(
        scene.call("write_file", path=path, content="evil"), ToolErrorCode.PERMISSION, "allowlist"
    )
    assert_refused(
        scene.call("edit_file", path=path, start_line=1, end_line=1, content="evil"),
        ToolErrorCode.PERMISSION,
        "allowlist",
    )
    assert snapshot(scene.ws) == before


# -- commands aimed at the source repo -------------------------------------------------


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("git -C {source} commit --allow-empty -m evil", "git_other_repo"),
        ("git --git-dir={source}/.git update-ref refs/heads/evil HEAD", "git_other_repo"),
        ("GIT_DIR={source}/.git git status", "git_other_repo"),
        ("echo evil > {source}/README.md", "source_path"),
        ("cp src/app.py {source}/src/app.py", "source_path"),
        ("cd {source} && touch evil", "source_path"),
        ("git update-ref refs/heads/evil HEAD", "git_write"),
        ("git commit -am evil", "git_write"),
        ("git config core.hooksPath /tmp", "git_write"),
        ("rm -rf src", "rm_recursive"),
        ("rm -r -f /", "rm_recursive"),
        ("echo evil > /tmp/escape.txt", "redirect_outside_workspace"),
        ("echo evil >> ../outside.txt", "redirect_outside_workspace"),
    ],
)
def test_commands_against_the_source_are_blocked(git_scene: Scene, command: str, rule: str) -> None:
    scene = git_scene
    source_before = snapshot(scene.source)
    ws_before = snapshot(scene.ws)
    result = scene.call("run_command", command=command.format(source=scene.source))
    assert_refused(result, ToolErrorCode.BLOCKED_COMMAND, f"`{rule}`")
    assert result.data["rule"] == rule
    assert snapshot(scene.source) == source_before
    assert snapshot(scene.ws) == ws_before
    assert not Path("/tmp/escape.txt").exists()
    assert not (scene.root / "outside.txt").exists()


# -- processes -------------------------------------------------------------------------


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_timeout_kills_sleep_and_a_setsid_child(scene: Scene) -> None:
    command = (
        "setsid sleep 60 & echo $! > src/child.pid; "
        "sleep 60 & echo $! > src/sleep.pid; "
        "echo waiting; wait"
    )
    started = time.monotonic()
    result = scene.call("run_command", command=command, timeout_s=1)
    assert_refused(result, ToolErrorCode.TIMEOUT, "timed out after 1 s", "waiting")
    assert time.monotonic() - started < 10
    for name in ("child.pid", "sleep.pid"):
        pid = int((scene.ws / "src" / name).read_text())
        deadline = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid), f"{name}: pid {pid} survived the timeout"


def test_daemon_left_behind_by_a_finished_command_is_killed(scene: Scene) -> None:
    result = scene.call(
        "run_command", command="setsid nohup sleep 60 >/dev/null 2>&1 & echo $! > src/d.pid"
    )
    assert result.ok and result.data["exit_code"] == 0
    pid = int((scene.ws / "src/d.pid").read_text())
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)


def test_output_flood_is_bounded(scene: Scene) -> None:
    result = scene.call("run_command", command="yes | head -c 5000000")
    assert result.ok
    assert len(result.content) < 20_000


# -- a whole attack script through the scripted agent ----------------------------------


def test_attack_script_through_the_scripted_agent(git_scene: Scene) -> None:
    scene = git_scene
    os.symlink(scene.host, scene.ws / "src/link.txt")
    calls = [
        {"tool": "read_file", "args": {"path": "src/link.txt"}},
        {"tool": "write_file", "args": {"path": "src/link.txt", "content": "pwned"}},
        {"tool": "write_file", "args": {"path": ".git/config", "content": "pwned"}},
        {"tool": "write_file", "args": {"path": "../host.txt", "content": "pwned"}},
        {"tool": "run_command", "args": {"command": f"git -C {scene.source} commit -m x"}},
        {"tool": "run_command", "args": {"command": f"echo pwned > {scene.source}/README.md"}},
        {"tool": "search_code", "args": {"pattern": "--pre=/bin/sh"}},
        {"tool": "read_file", "args": {"path": "src/app.py"}},
    ]
    script_path = scene.root / "attack.json"
    script_path.write_text(json.dumps({"rounds": [{"calls": calls, "response": "done"}]}))
    agent = ScriptedAgent(load_script(script_path))
    source_before = snapshot(scene.source)
    ws_before = snapshot(scene.ws)
    host_before = scene.host.read_bytes()
    ctx = RoundContext(task=None, round_index=1, max_rounds=1, workspace_dir=scene.ws)  # type: ignore[arg-type]
    outcome = agent.run_round(ctx, scene.box, scene.events)
    assert outcome.response == "done"
    results = [data for kind, data in scene.events.events if kind is EventKind.TOOL_RESULT]
    assert [r["error"] for r in results] == [
        "PERMISSION",
        "PERMISSION",
        "PERMISSION",
        "PERMISSION",
        "BLOCKED_COMMAND",
        "BLOCKED_COMMAND",
        None,
        None,
    ]
    assert snapshot(scene.source) == source_before
    assert snapshot(scene.ws) == ws_before
    assert scene.host.read_bytes() == host_before
