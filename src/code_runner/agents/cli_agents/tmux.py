"""Run an agent CLI in a tmux pane a person can attach to, on a tmux server of its own.

Every run gets its own server socket (`tmux -S SOCKET`, never the user's default server,
so concurrent runs never share one) and each round one session, `agent`, whose pane runs
a small launcher script: it waits until the pane is piped to `terminal.log`, runs the CLI
with stdin from /dev/null, copies its stdout and stderr into the record (so the
supervisor reads exactly what a direct run would give it) and onto the screen, and
writes the CLI's exit code to a file. `{task_id}.tmux.json` beside the record says where
the socket is: `code-runner attach RUN_DIR` reads it.

Killing: the tmux server and everything in the pane inherit the run's process token,
and the runner is a child subreaper, so `proc.kill_tokened` finds the whole tree even
though tmux daemonizes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from code_runner import proc
from code_runner.errors import EnvironmentProblem
from code_runner.files import atomic_write_json, atomic_write_text, touch

SESSION = "agent"
_TMUX_TIMEOUT_S = 10.0
_EXIT_WAIT_S = 1.0


def tmux_program(env: Mapping[str, str] | None = None) -> str | None:
    path = env.get("PATH") if env else None
    return shutil.which("tmux", path=path) or shutil.which("tmux")


def socket_path(key: str) -> Path:
    """A short socket path (a Unix socket path must fit in ~104 bytes), private to us."""
    base = Path(tempfile.gettempdir()) / f"code-runner-tmux-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    os.chmod(base, 0o700)
    return base / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.sock"


@dataclass(frozen=True)
class PaneFiles:
    """The files one round's pane uses; all live in the record's agent dir."""

    script: Path
    go: Path
    exit_code: Path
    stdout: Path
    stderr: Path
    terminal_log: Path
    info: Path
    result_file: Path | None = None  # interactive: the worker's final block goes here
    prompt: Path | None = None  # interactive: the prompt the launcher pastes into the UI


def _launcher(
    argv: tuple[str, ...], cwd: Path, files: PaneFiles, banner: str, tmux: str = "tmux"
) -> str:
    q = shlex.quote
    command = " ".join(q(part) for part in argv)
    if files.result_file is not None:
        return _interactive_launcher(command, cwd, files, banner, tmux)
    return (
        "#!/bin/bash\n"
        "# code-runner: runs one round of an agent CLI in this tmux pane.\n"
        f"until [ -e {q(str(files.go))} ]; do sleep 0.05; done\n"
        f"cd -- {q(str(cwd))} || exit 126\n"
        f"printf '%s\\n' {q(banner)}\n"
        f"{command} < /dev/null 2> >(tee -a {q(str(files.stderr))} >&2) "
        f"| tee -a {q(str(files.stdout))}\n"
        "code=${PIPESTATUS[0]}\n"
        "wait $! 2>/dev/null\n"
        f"printf '%s\\n' \"$code\" > {q(str(files.exit_code))}.tmp && "
        f"mv -f {q(str(files.exit_code))}.tmp {q(str(files.exit_code))}\n"
    )


def _interactive_launcher(command: str, cwd: Path, files: PaneFiles, banner: str, tmux: str) -> str:
    """The CLI on the pane's own terminal (its UI), ended through its sentinel file."""
    from code_runner.agents.cli_agents.interactive import launcher_tail

    assert files.result_file is not None and files.prompt is not None
    q = shlex.quote
    before, after = launcher_tail(tmux, files.result_file, files.prompt, files.terminal_log)
    return (
        "#!/bin/bash\n"
        "# code-runner: runs one interactive round of an agent CLI in this tmux pane.\n"
        f"until [ -e {q(str(files.go))} ]; do sleep 0.05; done\n"
        f"cd -- {q(str(cwd))} || exit 126\n"
        f"printf '%s\\n' {q(banner)}\n"
        f"{before}{command}\n"
        f"{after}"
        f"printf '%s\\n' \"$code\" > {q(str(files.exit_code))}.tmp && "
        f"mv -f {q(str(files.exit_code))}.tmp {q(str(files.exit_code))}\n"
    )


class TmuxPane:
    """A CLI running in the pane of a private tmux server. Same interface as a child."""

    def __init__(
        self, tmux: str, socket: Path, files: PaneFiles, env: dict[str, str], token: str
    ) -> None:
        self.tmux = tmux
        self.socket = socket
        self.files = files
        self.env = env
        self.token = token
        self.pane_pid: int | None = None
        self.started = time.monotonic()

    @classmethod
    def start(
        cls,
        argv: tuple[str, ...],
        *,
        cwd: Path,
        env: Mapping[str, str],
        files: PaneFiles,
        socket: Path,
        banner: str,
        info: Mapping[str, Any],
    ) -> TmuxPane:
        tmux = tmux_program(env)
        if tmux is None:
            raise EnvironmentProblem(
                "tmux is not installed, so the agent CLI cannot run in a tmux pane.",
                fix="install tmux (`apt-get install tmux`) or run without --tmux.",
            )
        proc.become_subreaper()  # tmux daemonizes: its server must stay in our tree
        token = uuid.uuid4().hex
        pane_env = {**env, proc.TOKEN_ENV: token}
        pane_env.pop("TMUX", None)
        for path in (files.go, files.exit_code, socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        atomic_write_text(files.script, _launcher(argv, cwd, files, banner, tmux))
        for name in (files.stdout, files.stderr, files.terminal_log):
            touch(name)  # the shell appends by name: a link planted there is replaced first
        pane = cls(tmux, socket, files, pane_env, token)
        bash = shutil.which("bash", path=env.get("PATH")) or "/bin/bash"
        pane._tmux(
            "new-session", "-d", "-s", SESSION, "-x", "200", "-y", "50",
            "-c", str(cwd), bash, "--noprofile", "--norc", str(files.script),
        )  # fmt: skip
        pane._tmux("set-option", "-t", SESSION, "remain-on-exit", "off")
        log = shlex.quote(str(files.terminal_log))
        pane._tmux("pipe-pane", "-o", "-t", SESSION, f"exec cat >> {log}")
        shown = pane._tmux("display-message", "-p", "-t", SESSION, "#{pane_pid}")
        with contextlib.suppress(ValueError):
            pane.pane_pid = int(shown.strip())
        atomic_write_json(
            files.info,
            {
                **info,
                "socket": str(socket),
                "session": SESSION,
                "pane_pid": pane.pane_pid,
                "terminal_log": str(files.terminal_log),
                "attach": f"tmux -S {shlex.quote(str(socket))} attach -t {SESSION}",
            },
            durable=False,
        )
        touch(files.go)
        return pane

    def _tmux(self, *args: str, check: bool = True) -> str:
        result = proc.capture(
            [self.tmux, "-S", str(self.socket), "-f", "/dev/null", *args],
            cwd=None,
            env=self.env,
            timeout_s=_TMUX_TIMEOUT_S,
        )
        if check and not result.ok:
            self.kill(0.5)
            raise EnvironmentProblem(
                f"tmux {args[0]} failed (exit {result.exit_code}): "
                + result.stderr.decode("utf-8", "replace").strip()[-500:],
                fix="check that tmux works here (`tmux -V`; `code-runner doctor`), or run "
                "without --tmux.",
            )
        return result.stdout.decode("utf-8", "replace")

    @property
    def pid(self) -> int | None:
        return self.pane_pid

    def _pane_alive(self) -> bool:
        if self.pane_pid is None:
            return False
        try:
            return psutil.Process(self.pane_pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def exit_code(self) -> int | None:
        """The CLI's exit code once its pane finished; 129 if the pane died without one."""
        code = self._read_exit()
        if code is not None:
            return code
        if self._pane_alive():
            return None
        deadline = time.monotonic() + _EXIT_WAIT_S
        while time.monotonic() < deadline:
            code = self._read_exit()
            if code is not None:
                return code
            time.sleep(0.05)
        return 129  # the pane was closed (a person, a crash) before the CLI finished

    def _read_exit(self) -> int | None:
        try:
            return int(self.files.exit_code.read_text().strip())
        except (OSError, ValueError):
            return None

    def kill(self, grace_s: float) -> int:
        """End the pane, the CLI in it, and the tmux server; remove the socket."""
        with proc.signals_deferred():
            proc.capture(
                [self.tmux, "-S", str(self.socket), "kill-server"],
                cwd=None,
                env=self.env,
                timeout_s=_TMUX_TIMEOUT_S,
            )
            killed = proc.kill_tokened(self.token, grace_s=grace_s)
            for path in (self.socket, self.files.go):
                with contextlib.suppress(OSError):
                    path.unlink()
            return killed


__all__ = ["SESSION", "PaneFiles", "TmuxPane", "socket_path", "tmux_program"]
