"""Links planted in the run dir while the run goes on are never followed.

Without the OS sandbox the DoD runs as the runner's user and can write the run dir. Here it
does, at every round: each record file's name becomes a symlink to a file of ours (a
transcript, verifier.log, events, status, the review page...), one a hard link to another
file of ours, one a FIFO, and the agent CLI's per-round log names too. The run must write
its record as files of its own, end as it would have, and leave every target byte-identical,
for a root runner and for a runner that is not root (uid 65534).
"""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.attacks import held
from tests.helpers.tasks import FIXED_BOTH, calc_repo, run_cli, write, write_task
from tests.security.unprivileged import Nobody, nobody

pytestmark = pytest.mark.integration
__all__ = ["nobody"]  # a fixture

LINKED = (
    "verifier.log",
    "transcript.jsonl",
    "events.jsonl",
    "status.json",
    "response.txt",
    "hunk.md",
    "patch",
    "result.json",
    "result.md",
    "eval.md",
    "run.json",
    "seal.json",
    "agent/round-2.stdout.jsonl",
    "agent/round-2.stderr.log",
    "agent/round-2.prompt.md",
)
PRECIOUS = "a file of the runner's user: must stay exactly this\n"


def _planter(root: Path) -> str:
    """A DoD that plants the links, then judges calc.py (fails on base, passes fixed)."""
    out, targets = root / "out", root / "targets"
    targets.mkdir()
    lines = ["set -e"]
    for i, name in enumerate(LINKED):
        (targets / str(i)).write_text(PRECIOUS)
        lines.append(f"mkdir -p {out}/fix-calc.agent; ln -sfn {targets}/{i} {out}/fix-calc.{name}")
    (targets / "hard").write_text(PRECIOUS)
    lines.append(
        f"rm -f {out}/fix-calc.rounds.jsonl; ln {targets}/hard {out}/fix-calc.rounds.jsonl"
    )
    lines.append(f"rm -f {out}/fix-calc.terminal.log; mkfifo {out}/fix-calc.terminal.log")
    lines.append("exec grep -q 'a [*] b' calc.py")
    script = root / "plant.sh"
    script.write_text("\n".join(lines) + "\n")
    return f"sh {script}"


def _targets_intact(root: Path) -> None:
    targets = sorted((root / "targets").iterdir())
    held(
        "record links: every planted target is byte-identical",
        len(targets) == len(LINKED) + 1 and all(t.read_text() == PRECIOUS for t in targets),
        [t.name for t in targets if t.read_text() != PRECIOUS],
    )


def _record_is_files(root: Path) -> None:
    out = root / "out"
    for name in ("verifier.log", "events.jsonl", "status.json", "result.json", "rounds.jsonl"):
        info = (out / f"fix-calc.{name}").lstat()
        held(
            f"record links: {name} is a file of the run's own",
            stat.S_ISREG(info.st_mode) and info.st_nlink == 1,
            oct(info.st_mode),
        )
    result = json.loads((out / "fix-calc.result.json").read_text())
    held("record links: the run still passed", result["status"] == "passed", result["status"])
    log = (out / "fix-calc.verifier.log").read_text()
    held("record links: the last DoD is in verifier.log", "verdict:   PASS" in log, log[-300:])


Run = Callable[[Path], subprocess.CompletedProcess[str]]
Cli = Callable[..., subprocess.CompletedProcess[str]]


def _attack(root: Path, run: Run, cli: Cli) -> None:
    source = calc_repo(root)
    rounds = [[], [write("calc.py", FIXED_BOTH)]]
    spec = write_task(root, source, rounds, command=_planter(root), sandbox="off")
    ran = run(spec)
    held("record links: the run ends as it would have", ran.returncode == 0, ran.stderr[-2000:])
    held("record links: no traceback", "Traceback" not in ran.stderr, ran.stderr[-2000:])
    _targets_intact(root)
    _record_is_files(root)
    shown = cli("result", str(root / "out"))
    held(
        "record links: the events the link displaced make the record refused",
        shown.returncode == 5 and "events.jsonl was changed after the run" in shown.stderr,
        shown.stderr,
    )


def test_links_planted_mid_run_by_the_dod_are_never_followed(tmp_path: Path) -> None:
    _attack(tmp_path, lambda spec: run_cli("run", str(spec)), run_cli)


def test_links_planted_mid_run_are_never_followed_by_a_non_root_runner(nobody: Nobody) -> None:
    _attack(nobody.root, nobody.run, nobody.cli)


def test_an_agent_cli_round_never_writes_through_links_in_its_agent_dir(tmp_path: Path) -> None:
    """The `command` backend's rounds: its logs and prompt, planted by the first round."""
    source = calc_repo(tmp_path)
    out, targets = tmp_path / "out", tmp_path / "targets"
    targets.mkdir()
    mark = tmp_path / "planted"
    lines = [f"if [ ! -e {mark} ]; then touch {mark}"]
    for i, name in enumerate(n for n in LINKED if n.startswith("agent/")):
        (targets / str(i)).write_text(PRECIOUS)
        lines.append(f"ln -sfn {targets}/{i} {out}/fix-calc.{name}")
    agent = tmp_path / "agent.sh"
    agent.write_text("\n".join([*lines, "fi", 'echo \'{"type": "done"}\'']) + "\n")
    spec = write_task(
        tmp_path, source, [[], []], command="false", sandbox="off", backend=f"command:-- sh {agent}"
    )
    ran = run_cli("run", str(spec))
    held("record links: the CLI run ends with a verdict", ran.returncode == 1, ran.stderr[-2000:])
    changed = [t.name for t in targets.iterdir() if t.read_text() != PRECIOUS]
    held("record links: no agent log written through a link", changed == [], changed)
    logs = [out / f"fix-calc.{n}" for n in LINKED if n.startswith("agent/")]
    held(
        "record links: round 2's logs are files of the run's own",
        all(p.exists() and not p.is_symlink() for p in logs),
        [str(p) for p in logs if p.is_symlink() or not p.exists()],
    )
