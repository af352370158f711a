"""The executor inside a resident sandbox: runs one command at a time, fed over a socket.

This file is never imported to run: its source is handed to the sandbox's Python as
`python3 -I -S -c SOURCE FD DIR...` (nothing on disk it could be swapped for, no site or
environment read), with FD a socket to the runner. Standard library only.

Per command, it receives `{"nonce", "argv", "cwd"}` and the command's stdout and stderr
(descriptors of the runner's own files, passed over the socket), starts the command in a
session of its own, and waits for it, or for `{"kill": grace_s}` from the runner (a
timeout, the output cap). When the command ends, everything else in the sandbox's PID
namespace is killed and reaped (it is the namespace's subreaper) before the reply; after
it, while the runner reads the output, each DIR (the private `/tmp` and the other scratch
mounts) is emptied and System V IPC objects are removed, before the next request is read,
so the next command starts clean. The command is started by vfork (no code of ours runs
in the child: see `_OomPreference`). The reply echoes the nonce, which no command
can read: the executor is not dumpable (no ptrace, no `/proc/PID/fd` or `mem` of it), and
its socket is never inherited.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_SWEEP_ROUNDS = 200
_MAX_DEPTH = 64


_IPC_RMID = 0
_IPC = (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl"))
_LIBC = ctypes.CDLL(None, use_errno=True)


def _harden() -> None:
    _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _remove_ipc() -> None:
    """Remove the System V shared memory, semaphores and queues commands left (the sandbox
    has an IPC namespace of its own, so every one listed is a command's)."""
    for kind, call in _IPC:
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                if kind == "sem":
                    _LIBC.semctl(int(fields[1]), 0, _IPC_RMID)
                else:
                    getattr(_LIBC, call)(int(fields[1]), _IPC_RMID, None)


def _ancestors() -> set[int]:
    """This process and every ancestor visible in the namespace (never killed)."""
    keep = {os.getpid()}
    pid = os.getppid()
    while pid > 0 and pid not in keep:
        keep.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return keep


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _sweep(keep: set[int]) -> int:
    """Kill and reap every process of the namespace but `keep`; how many there were."""
    seen: set[int] = set()
    for _ in range(_SWEEP_ROUNDS):
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep]
        if not others:
            break
        for pid in others:
            seen.add(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap()
        time.sleep(0.001)
    return len(seen)


def _empty(path: str, dev: int, depth: int) -> None:
    """Remove what is in `path` on device `dev`; never cross into another mount."""
    try:
        entries = list(os.scandir(path))
    except PermissionError:
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_dev != dev:
            continue  # a mount point (the work tree, a read-only bind): never touched
        if stat.S_ISDIR(st.st_mode):
            if depth < _MAX_DEPTH:
                with contextlib.suppress(OSError):
                    os.chmod(entry.path, 0o700)
                _empty(entry.path, dev, depth + 1)
            with contextlib.suppress(OSError):
                os.rmdir(entry.path)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _wipe(dirs: list[str]) -> None:
    for path in dirs:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and os.access(path, os.W_OK):
            _empty(path, st.st_dev, 0)


class _OomPreference:
    """Commands go before the executor under a memory cgroup (`oom_score_adj` 1000).

    The executor raises its own score to 1000 just before it starts a command and lowers it
    back to its own right after: the command inherits 1000 at the fork, so nothing it forks
    first misses it, and the start needs no code in the child (`preexec_fn` would rule out
    vfork: a fork of the whole executor per command, most of its cost). The file is opened
    before the executor becomes non-dumpable (then it is the kernel's, not ours to open) and
    is never inherited. Where it cannot be opened or written both ways (tried once here),
    each child sets its own score before exec (`_first_to_go`), as a slower start."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.own = b"0"
        with contextlib.suppress(OSError):
            self.fd = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
            self.own = os.pread(self.fd, 16, 0).strip() or b"0"
        if not (self.set(b"1000") and self.set(self.own)):
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def set(self, value: bytes) -> bool:
        if self.fd is None:
            return False
        try:
            os.pwrite(self.fd, value, 0)
        except OSError:
            return False
        return True


def _start(
    request: dict[str, object], fds: list[int], oom: _OomPreference
) -> subprocess.Popen[bytes] | str:
    argv = request["argv"]
    assert isinstance(argv, list)
    inherited = oom.set(b"1000")
    try:
        child = subprocess.Popen(
            [str(a) for a in argv],
            cwd=str(request["cwd"]),
            stdin=subprocess.DEVNULL,
            stdout=fds[0],
            stderr=fds[1],
            start_new_session=True,
            close_fds=True,
            preexec_fn=None if inherited else _first_to_go,
        )
    except OSError as exc:
        os.write(fds[1], f"could not start {argv[0]!r}: {exc.strerror or exc}\n".encode())
        return f"could not start {argv[0]!r}: {exc.strerror or exc}"
    finally:
        if inherited and not oom.set(oom.own):
            oom.close()  # not lowered: every later child sets its own score instead
    return child


def _first_to_go() -> None:
    """In the child before exec, where the executor could not lend its score: the child
    sets its own, made dumpable first (exec would do it anyway), or its /proc files stay
    the kernel's; every earlier command's process is already gone, so none can use the
    moment."""
    _LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    with contextlib.suppress(OSError):
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"1000")
        finally:
            os.close(fd)


def _terminate(child: subprocess.Popen[bytes], grace_s: float) -> None:
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=grace_s)
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)


def _wait(sock: socket.socket, child: subprocess.Popen[bytes]) -> bool:
    """Wait for the child's exit or a kill from the runner; False: the runner is gone."""
    pidfd = os.pidfd_open(child.pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(sock.fileno(), select.POLLIN)
        while child.poll() is None:
            ready = dict(poller.poll())
            if sock.fileno() in ready:
                data = sock.recv(4096)
                if not data:
                    _terminate(child, 0)
                    return False
                grace_s = float(json.loads(data).get("kill", 0))
                _terminate(child, grace_s)
    finally:
        os.close(pidfd)
    return True


def serve(sock: socket.socket, dirs: list[str], oom: _OomPreference) -> int:
    keep = _ancestors()
    sock.sendall(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    while True:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        if not data:
            return 0
        request = json.loads(data)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        started = _start(request, fds, oom)
        for fd in fds:
            os.close(fd)
        alive = True
        code: int | None = 127
        if not isinstance(started, str):
            alive = _wait(sock, started)
            code = started.returncode
        killed = _sweep(keep)  # before the answer: nothing of the command runs after it
        if alive:
            reply = {"nonce": request["nonce"], "returncode": code, "killed": killed}
            sock.sendall(json.dumps(reply).encode())
        # after the answer, in parallel with the runner: the next request stays in the
        # socket until this is done (nothing outside the sandbox sees these)
        _wipe(dirs)
        _remove_ipc()
        if not alive:
            return 0


def main(argv: list[str]) -> int:
    oom = _OomPreference()  # before `_harden`: its file is ours to open only until then
    _harden()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(argv[1]))
    os.set_inheritable(sock.fileno(), False)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return serve(sock, argv[2:], oom)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
