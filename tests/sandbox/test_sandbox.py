"""The sandbox's parts on real files and real processes: the profile argv, what is masked
and bound, the hand-over of the work tree, the probe, and the mode decision."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner import sandbox
from code_runner.errors import PreflightError
from code_runner.sandbox import mounts
from code_runner.sandbox.limits import DEFAULT_LIMITS
from code_runner.sandbox.profile import Bind, Profile, Programs, SandboxUser, sandbox_env

PROGRAMS = Programs(bwrap="/usr/bin/bwrap", prlimit="/usr/bin/prlimit", setpriv="/usr/bin/setpriv")


def _profile(tmp_path: Path, **changes: object) -> Profile:
    wt = tmp_path / "ws/wt"
    fields: dict[str, object] = {
        "programs": PROGRAMS,
        "work_tree": wt,
        "git_dir": tmp_path / "ws/git",
        "read_only": (Bind(Path("/opt/tool"), tmp_path / "tool"),),
        "masked_dirs": (Path("/tmp"), Path("/root"), tmp_path),
        "masked_files": (Path("/etc/shadow"),),
        "env": sandbox_env({"PATH": "/usr/bin", "OPENAI_API_KEY": "sk-x"}, wt),
        "limits": DEFAULT_LIMITS,
        "cpu_s": 60,
    }
    fields.update(changes)
    return Profile(**fields)  # type: ignore[arg-type]


def _after(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def test_unprivileged_profile_is_the_one_that_held(tmp_path: Path) -> None:
    argv = _profile(tmp_path).wrap(["bash", "-c", "true"])
    for flag in (
        "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
        "--new-session", "--clearenv",
    ):  # fmt: skip
        assert flag in argv, flag
    assert _after(argv, "--uid") == ["1000"] and _after(argv, "--gid") == ["1000"]
    assert _after(argv, "--cap-drop") == ["ALL"]
    assert "--share-net" not in argv
    assert argv[argv.index("--ro-bind") : argv.index("--ro-bind") + 3] == ["--ro-bind", "/", "/"]
    assert "/tmp" in _after(argv, "--tmpfs") and "/root" in _after(argv, "--tmpfs")
    wt = str(tmp_path / "ws/wt")
    assert _after(argv, "--bind") == [wt]
    assert f"{wt}/.git" in _after(argv, "--ro-bind") and str(tmp_path / "ws/git") in argv
    tmpfs = _after(argv, "--tmpfs")
    assert str(tmp_path) not in tmpfs  # beneath /tmp: one mask covers it
    assert argv.index("--bind") > argv.index("--tmpfs")  # masks come before binds
    assert argv[-3:] == ["bash", "-c", "true"]
    assert "--fsize=536870912" in argv and "--cpu=60" in argv
    names = _after(argv, "--setenv")
    assert "OPENAI_API_KEY" not in names and names.count("HOME") == 1
    assert "/etc/shadow" in argv


def test_network_true_shares_the_network(tmp_path: Path) -> None:
    assert "--share-net" in _profile(tmp_path, network=True).wrap(["true"])


def test_root_profile_drops_to_the_runs_own_uid_before_the_user_namespace(tmp_path: Path) -> None:
    argv = _profile(tmp_path, identity=SandboxUser(2_000_000_123, 2_000_000_123)).wrap(["true"])
    outer_end = argv.index("/usr/bin/setpriv")
    outer, inner = argv[:outer_end], argv[outer_end:]
    assert "--unshare-user" not in outer and "--unshare-net" in outer
    assert _after(outer, "--cap-add") == ["CAP_SETUID", "CAP_SETGID"]
    assert inner[:4] == [
        "/usr/bin/setpriv",
        "--reuid=2000000123",
        "--regid=2000000123",
        "--clear-groups",
    ]
    assert "--disable-userns" in inner and _after(inner, "--cap-drop") == ["ALL"]
    assert _after(inner, "--uid") == ["1000"]


def test_parents_on_a_tmpfs_are_made_traversable(tmp_path: Path) -> None:
    argv = _profile(tmp_path).wrap(["true"])
    dirs = _after(argv, "--dir")
    assert str(tmp_path / "ws") in dirs
    index = argv.index("--dir", argv.index(str(tmp_path / "ws")) - 2)
    assert argv[index - 2 : index] == ["--perms", "0755"]


def test_cgroup_join_comes_first(tmp_path: Path) -> None:
    argv = _profile(tmp_path, cgroup_join=("/bin/sh", "-c", "x", "y")).wrap(["true"])
    assert argv[:4] == ["/bin/sh", "-c", "x", "y"] and argv[4] == "/usr/bin/bwrap"


# -- what is hidden and what is shown again ---------------------------------------------


def test_private_dirs_are_masked_but_never_system_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(os.environ["HOME"])
    assert home in mounts.masked_dirs()
    monkeypatch.setenv("HOME", "/")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/usr")
    masked = {str(p) for p in mounts.masked_dirs()}
    assert "/" not in masked and "/usr" not in masked


def test_toolchain_binds_never_expose_a_private_dir(tmp_path: Path) -> None:
    mask = tmp_path / "mask"
    home = mask / "home"
    for path in (home / "bin", mask / "tools/bin", mask / ".pyenv/shims", mask / ".pyenv/versions"):
        path.mkdir(parents=True)
    path_var = os.pathsep.join(
        [str(home / "bin"), str(mask / "tools/bin"), str(mask / ".pyenv/shims"), str(home), "rel"]
    )
    binds = mounts.toolchain_binds({"PATH": path_var}, [mask], [home])
    dests = {b.dest for b in binds}
    assert home / "bin" in dests and mask / "tools/bin" in dests
    assert mask / ".pyenv" in dests  # a shims dir brings its tool's root
    assert home not in dests and mask not in dests
    assert all(not (home == b.source or home.is_relative_to(b.source)) for b in binds)


def test_dependencies_are_bound_only_where_the_work_tree_has_none(tmp_path: Path) -> None:
    source, wt = tmp_path / "src", tmp_path / "wt"
    (source / ".venv/bin").mkdir(parents=True)
    (source / "node_modules").mkdir()
    wt.mkdir()
    binds = mounts.dependency_binds(source, wt, [])
    assert {b.dest for b in binds} == {wt / ".venv", wt / "node_modules"}
    os.symlink("/etc", wt / ".venv")  # the agent's symlink: never bound onto
    (wt / "node_modules").mkdir()
    (wt / "node_modules/own").write_text("tracked\n")
    assert mounts.dependency_binds(source, wt, []) == []


def test_alternates_are_bound_read_only(tmp_path: Path) -> None:
    objects = tmp_path / "elsewhere/objects"
    objects.mkdir(parents=True)
    info = tmp_path / "git/objects/info"
    info.mkdir(parents=True)
    (info / "alternates").write_text(f"{objects}\n# comment\n/does/not/exist\n")
    assert mounts.alternates_binds(tmp_path / "git") == [Bind(objects, objects)]


# -- handing the work tree over --------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files away")
def test_hand_over_owns_the_tree_but_not_what_symlinks_point_at(tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    (wt / "a/b").mkdir(parents=True)
    (wt / "a/b/f.py").write_text("x\n")
    (wt / ".git").write_text("gitdir: /x\n")
    host = tmp_path / "host.txt"
    host.write_text("host\n")
    os.symlink(host, wt / "a/link")
    who = SandboxUser(2_000_000_321, 2_000_000_321)
    changed = sandbox.hand_over(wt, who)
    assert changed == 5  # wt, a, a/b, a/b/f.py, a/link
    for path in (wt, wt / "a", wt / "a/b", wt / "a/b/f.py"):
        assert (path.stat().st_uid, path.stat().st_gid) == (who.uid, who.gid)
    assert os.lstat(wt / "a/link").st_uid == who.uid
    assert host.stat().st_uid == 0 and (wt / ".git").stat().st_uid == 0
    assert sandbox.hand_over(wt, who) == 0


# -- the probe and the decision --------------------------------------------------------


def test_probe_passes_in_ci() -> None:
    """CI must exercise the sandbox, not the fallback (`.ci/run` sets CI=true)."""
    found = sandbox.probe()
    if os.environ.get("CI") != "true" and not found.ok:
        pytest.skip(f"not CI, and the sandbox does not work here: {found.reason}")
    assert found.ok, found.to_dict()
    report = found.to_dict()
    assert report["limits"]["file_size"].startswith("rlimit")
    assert set(report["limits"]) >= {"enforced_by", "processes", "memory", "cpu_time"}


def test_a_broken_bwrap_fails_the_probe_and_decides_the_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODE_RUNNER_BWRAP", "/bin/false")
    found = sandbox.run_probe()
    assert not found.ok and "bwrap could not start a sandbox" in found.reason
    auto = sandbox.decide(sandbox.SandboxMode.AUTO, found)
    assert not auto.use and "probe failed" in auto.reason
    assert auto.posture()["kind"] == "none"
    with pytest.raises(PreflightError) as raised:
        sandbox.decide(sandbox.SandboxMode.REQUIRED, found)
    assert "sandbox: required" in raised.value.render() and "Fix:" in raised.value.render()
    off = sandbox.decide(sandbox.SandboxMode.OFF, found)
    assert not off.use and off.probe is None


@pytest.fixture
def open_scratch() -> Iterator[Path]:
    """A scratch workspace any uid can reach (pytest's own tmp dir is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="code-runner-unpriv-"))
    try:
        root.chmod(0o755)
        for name in ("wt", "git"):
            (root / name).mkdir()
        (root / "wt/.git").write_text(f"gitdir: {root / 'git'}\n")
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_the_unprivileged_profile_holds_for_a_non_root_runner(open_scratch: Path) -> None:
    """The single-bwrap profile a non-root runner uses, run by a non-root user for real."""
    found = sandbox.probe()
    if found.programs is None:
        pytest.skip(found.reason)
    nobody = 65534
    os.chown(open_scratch / "wt", nobody, nobody)
    profile = Profile(
        programs=found.programs,
        work_tree=open_scratch / "wt",
        git_dir=open_scratch / "git",
        read_only=(),
        masked_dirs=(Path("/root"), Path("/home"), Path("/run")),
        masked_files=(),
        env=sandbox_env({"PATH": "/usr/bin:/bin"}, open_scratch / "wt"),
        limits=DEFAULT_LIMITS,
        cpu_s=30,
        process_rlimit=False,
    )
    script = (
        "grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs):' /proc/self/status; "
        "echo ok > inside.txt && echo wrote; ( : > /etc/x ) 2>/dev/null && echo root-writable; "
        "unshare --user true 2>/dev/null && echo userns; ls /root | wc -l"
    )
    argv = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups"]
    result = subprocess.run(
        [*argv, *profile.wrap(["/bin/sh", "-c", script])],
        cwd=open_scratch / "wt",
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    if "No permissions to create" in result.stderr or "setting up uid map" in result.stderr:
        pytest.skip(f"unprivileged user namespaces are off here: {result.stderr.strip()}")
    out = result.stdout
    assert "Uid:\t1000\t1000" in out and "CapEff:\t0000000000000000" in out, result
    assert "CapBnd:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert "wrote" in out and "root-writable" not in out and "userns" not in out
    assert out.strip().endswith("0")  # /root is an empty tmpfs
    assert (open_scratch / "wt/inside.txt").stat().st_uid == nobody
    assert stat.S_ISREG((open_scratch / "wt/.git").stat().st_mode)


def test_wrap_runs_a_one_off_command_with_extra_read_only_binds(tmp_path: Path) -> None:
    if not sandbox.probe().ok:
        pytest.skip(sandbox.probe().reason)
    ws_root = tmp_path / "ws"
    for name in ("wt", "git"):
        (ws_root / name).mkdir(parents=True)
    (ws_root / "wt/.git").write_text(f"gitdir: {ws_root / 'git'}\n")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "data.txt").write_text("shared data\n")

    class Ws:
        work_tree = ws_root / "wt"
        git_dir = ws_root / "git"
        source_dir = tmp_path / "no-source"

    argv = sandbox.wrap(
        ["/bin/sh", "-c", f"cat {extra}/data.txt > copy.txt; echo x > {extra}/data.txt"],
        workspace=Ws(),
        network=False,
        extra_ro_binds=[Bind(extra, extra)],
        env={"PATH": "/usr/bin:/bin"},
    )
    result = subprocess.run(argv, cwd=Ws.work_tree, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert (Ws.work_tree / "copy.txt").read_text() == "shared data\n"
    assert (extra / "data.txt").read_text() == "shared data\n"


def test_limits_never_exceed_the_runners_own_hard_limits() -> None:
    """Nothing inside may raise a limit, so asking above the runner's hard one is capped."""
    code = (
        "from code_runner.sandbox.limits import rlimit_argv, ResourceLimits; "
        "print(rlimit_argv('prlimit', ResourceLimits(file_size_mb=4096), cpu_s=9, "
        "processes=False, address_space=False))"
    )
    import sys

    out = subprocess.run(
        ["bash", "-c", f'ulimit -f 1000 && "{sys.executable}" -c "{code}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--fsize=1024000" in out and "--cpu=9" in out
