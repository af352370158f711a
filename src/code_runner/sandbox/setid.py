"""A seccomp filter that refuses to make set-user-ID and set-group-ID files.

A DoD in the user's repo writes files the repo's owner will own (root's, for a root-owned
repo). Owning them, it could also mark one set-user-ID, and the user would later run a root
program the agent wrote. No capability guards that: an owner may always `chmod u+s`. So the
apply DoD runs under this filter (bubblewrap's `--seccomp FD`): `chmod`, `fchmod`,
`fchmodat`, `fchmodat2`, and `open`, `openat`, `creat`, `mknod`, `mknodat` with a mode that
has S_ISUID or S_ISGID fail with EPERM; `openat2` (its mode is in a struct the filter cannot
read) and `io_uring_setup` fail with ENOSYS, so libc falls back to `openat`. Calls of another
ABI (i386, x32) fail with EPERM. Everything else is allowed.

The filter is classic BPF, built here byte by byte (no libseccomp), for x86_64 and aarch64;
`program()` is None on any other machine, and the caller then says so.
"""

from __future__ import annotations

import errno
import platform
import struct
from pathlib import Path

from code_runner import dirs, files

SET_ID_BITS = 0o6000

_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def _arg(index: int) -> int:
    return 16 + 8 * index  # the low 32 bits of args[index] (little-endian)


# syscall number -> the index of its mode argument
_MODES = {
    "x86_64": {
        90: 1,  # chmod
        91: 1,  # fchmod
        268: 2,  # fchmodat
        452: 2,  # fchmodat2
        2: 2,  # open
        257: 3,  # openat
        85: 1,  # creat
        133: 1,  # mknod
        259: 2,  # mknodat
    },
    "aarch64": {52: 1, 53: 2, 452: 2, 56: 3, 33: 2},  # fchmod(at/at2), openat, mknodat
}
_REFUSED = {"x86_64": (437, 425), "aarch64": (437, 425)}  # openat2, io_uring_setup
_ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter as `struct sock_filter` records for this machine (None: not supported)."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    ops = [
        _op(_LD_ABS_W, _ARCH),
        _op(_JEQ, _ARCHES[machine], jt=1),
        _op(_RET, eperm),
        _op(_LD_ABS_W, _NR),
    ]
    if machine == "x86_64":
        ops += [_op(_JGE, _X32_BIT, jf=1), _op(_RET, eperm)]
    for nr in _REFUSED[machine]:
        ops += [_op(_JEQ, nr, jf=1), _op(_RET, enosys)]
    for nr, index in _MODES[machine].items():
        ops += [
            _op(_JEQ, nr, jf=4),
            _op(_LD_ABS_W, _arg(index)),
            _op(_JSET, SET_ID_BITS, jf=1),
            _op(_RET, eperm),
            _op(_LD_ABS_W, _NR),  # not set-id: reload the number for the next test
        ]
    ops.append(_op(_RET, _ALLOW))
    return b"".join(ops)


def filter_file() -> Path | None:
    """The filter, in a file of the state dir that the command's shell opens for bubblewrap
    (`--seccomp 3`); None where there is no filter for this machine."""
    code = program()
    if code is None:
        return None
    path = dirs.state_dir() / "sandbox" / f"no-set-id-{platform.machine()}.bpf"
    try:
        if path.read_bytes() == code:
            return path
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    files.atomic_write_bytes(path, code, durable=False)
    return path
