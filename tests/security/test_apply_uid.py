"""A root runner's apply DoD runs as a uid of its own, with the user's root-owned repo bound
read-write through an id-mapped view, so nothing in the repo changes owner.

A correct fix carries an import-time payload that fires when the DoD (pytest) imports it in
the source: it chowns, chmods and rewrites a tracked file the patch leaves alone, reads a
root-only file the sandbox can see and a 0600 key under HOME, calls setuid(0), and makes
set-user-ID files by chmod and by open's mode. Each fails and its target is unchanged; the
apply still commits, and the DoD's legitimate byproducts (`__pycache__`, `.pytest_cache`)
belong to root, as the repo's other files do, not to the sandbox's uid.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers.attacks import attack, call, held
from tests.helpers.tasks import FIXED_BOTH, PY, calc_repo

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_works")]

# the tests, with the byproducts a test run leaves: bytecode and a cache dir (pytest's own
# start-up would make each of the run's three DoDs a second slower)
DOD = (
    f"env -u PYTHONDONTWRITEBYTECODE {PY} -c 'import test_calc as t; t.test_add(); t.test_mul()'"
    " && mkdir -p .pytest_cache/v && echo '[]' > .pytest_cache/v/lastfailed"
)

PAYLOAD = """

def _payload():
    import json, os
    tried = {{"uid": os.getuid()}}

    def attempt(name, action):
        try:
            action()
            tried[name] = "done"
        except Exception as exc:
            tried[name] = type(exc).__name__

    def read(name, path):
        with open(path) as f:
            tried[name + "_text"] = f.read()

    def made(path, mode):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        os.chmod(path, mode)

    attempt("chown", lambda: os.chown("test_calc.py", 4321, 4321))
    attempt("chmod", lambda: os.chmod("test_calc.py", 0o777))
    attempt("write", lambda: open("test_calc.py", "a").write("# tampered"))
    attempt("read_secret", lambda: read("secret", {secret!r}))
    attempt("read_key", lambda: read("key", {key!r}))
    attempt("setuid", lambda: os.setuid(0))
    attempt("suid_chmod", lambda: made("suid-by-chmod", 0o4755))
    attempt("sgid_chmod", lambda: made("sgid-by-chmod", 0o2755))
    attempt("suid_open", lambda: os.close(os.open("suid-by-open", os.O_CREAT, 0o4755)))
    with open("report-{mark}.json", "w") as f:
        json.dump(tried, f)


_payload()
"""


def _walk(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".git" not in p.relative_to(root).parts]


def test_the_apply_dod_of_a_root_owned_repo_runs_as_a_uid_of_its_own(
    tmp_path: Path, visible_dir: Path
) -> None:
    if os.geteuid() != 0:  # a runner that is not root: test_apply_walls covers it
        return
    secret = visible_dir / "root-only.key"
    secret.write_text("ROOT-ONLY-SECRET\n")
    secret.chmod(0o600)
    key = Path(os.environ["HOME"]) / f".code-runner-attack-key-{uuid.uuid4().hex[:8]}"
    key.write_text("HOME-KEY-SECRET\n")
    key.chmod(0o600)
    mark = uuid.uuid4().hex[:12]
    source = calc_repo(tmp_path)
    for name, value in (("user.name", "Repo Owner"), ("user.email", "owner@example.invalid")):
        subprocess.run(["git", "-C", str(source), "config", name, value], check=True)
    tests = source / "test_calc.py"
    tests_before = (tests.read_bytes(), tests.lstat().st_mode, tests.lstat().st_uid)
    fix = FIXED_BOTH + PAYLOAD.format(secret=str(secret), key=str(key), mark=mark)
    try:
        run = attack(
            tmp_path,
            [call("write_file", path="calc.py", content=fix)],
            sandbox="required",
            source=source,
            allowlist=("calc.py",),
            command=DOD,
            apply_to_source=True,
            commit_on_success=True,
        )
    finally:
        key.unlink(missing_ok=True)
    result = run.result
    held("the apply committed", bool(result["source_commit"]), result.get("source_apply_error"))
    finished = [e for e in run.events if e["kind"] == "dod_finished" and e["label"] == "source"]
    runs_as = finished[-1].get("runs_as", {})
    held(
        "the record says the DoD ran through an id-mapped view",
        "id-mapped" in runs_as.get("how", ""),
        runs_as,
    )
    held("as a host uid that is not root", runs_as.get("host_uid", 0) != 0, runs_as)
    moved = [e for e in run.events if e["kind"] == "source_byproducts_moved"]
    roots = [source, *(Path(e["moved_to"]) for e in moved)]
    reports = [p for root in roots for p in root.rglob(f"report-{mark}.json")]
    held("the payload ran in the source's DoD", len(reports) == 1, roots)
    tried = json.loads(reports[0].read_text())
    held("the DoD's uid is not root", tried["uid"] != 0, tried)
    for name in ("chown", "chmod", "write", "read_secret", "read_key", "setuid"):
        held(f"{name} failed", tried[name] != "done", tried)
    held("no root-only secret read", "ROOT-ONLY-SECRET" not in json.dumps(tried), tried)
    held("no HOME key read", "HOME-KEY-SECRET" not in json.dumps(tried), tried)
    held(
        "test_calc.py keeps its bytes, mode and owner",
        (tests.read_bytes(), tests.lstat().st_mode, tests.lstat().st_uid) == tests_before,
    )
    everything = [p for root in roots for p in _walk(root)]
    set_id = [p for p in everything if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]
    held("no set-ID file was made", not set_id and tried["suid_open"] != "done", set_id)
    held("set-ID by chmod refused", tried["suid_chmod"] != "done" != tried["sgid_chmod"], tried)
    caches = [p for p in everything if p.name in ("__pycache__", ".pytest_cache")]
    held(
        "the DoD's byproducts were written",
        {p.name for p in caches} == {"__pycache__", ".pytest_cache"},
        caches,
    )
    owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in everything}
    held("every file the DoD made is root's, as the repo's are", owners == {(0, 0)}, owners)
