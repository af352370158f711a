"""The set-ID filter's program: whole `sock_filter` records, ending in allow, for the machines
it knows; none for a machine it does not (the session then says set-ID files are not
refused). The attack suite (`tests/security/test_apply_uid.py`) runs it for real."""

from __future__ import annotations

import struct

from code_runner.sandbox import setid


def test_the_filter_is_whole_records_that_end_in_allow_and_only_for_known_machines() -> None:
    for machine in ("x86_64", "aarch64"):
        code = setid.program(machine)
        assert code is not None and len(code) % 8 == 0
        assert struct.unpack("<HBBI", code[-8:]) == (0x06, 0, 0, 0x7FFF0000)
        assert len(code) // 8 < 4096  # the kernel's BPF_MAXINSNS
    assert setid.program("riscv64") is None


def test_the_filter_file_holds_the_program_and_is_rewritten_when_changed() -> None:
    path = setid.filter_file()
    assert path is not None and path.read_bytes() == setid.program()
    path.write_bytes(b"stale")
    assert setid.filter_file() == path and path.read_bytes() == setid.program()
