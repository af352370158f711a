"""`code-runner replay RUN_DIR`: re-run a recorded model run from its transcript, offline.

The recorded spec runs again on the recorded base commit with the `replay` backend: the
model's answers come from the transcript, the tool calls run for real in a fresh
workspace, the DoD judges the result. The command then compares the new patch and result
with the recorded ones and exits 0 only when they are the same (timestamps, run ids and
paths aside). The source repo is never changed: apply-to-source is switched off.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
from code_runner import runner
from code_runner.agents.model.replay import find_transcript
from code_runner.errors import RecordError, UsageError
from code_runner.record import RecordPaths, RunResult, load_result, seal
from code_runner.task import validate_spec_data

_SAME_ROUND = ("agent_stop", "agent_turns", "agent_error", "score", "passed")


def comparable(result: RunResult, patch_sha256: str | None = None) -> dict[str, Any]:
    """What of a run's result a faithful replay reproduces (the rest are times, ids and
    paths). `patch_sha256`: the patch file's digest, for a result that does not name it."""
    return {
        "status": result.status.value,
        "reason": result.reason.value,
        "dod_passed": result.dod_passed,
        "error": result.error,
        "rounds": result.rounds,
        "best_score": result.best_score,
        "best_round": result.best_round,
        "patch_sha256": result.patch_sha256 or patch_sha256,
        "changed_files": [c.path for c in result.changed_files],
        "round_details": [
            {key: getattr(r, key) for key in _SAME_ROUND}
            | {
                "exit_code": r.verdict.exit_code if r.verdict else None,
                "tokens": (r.agent_usage or {}).get("total_tokens"),
            }
            for r in result.round_details
        ],
    }


def _file_sha256(path: Path) -> str:
    with path.open("rb") as f:  # in pieces: a patch may be large
        return hashlib.file_digest(f, "sha256").hexdigest()


def _one(run_dir: Path, suffix: str) -> Path:
    found = sorted(run_dir.glob(f"*{suffix}"))
    if len(found) != 1:
        raise RecordError(
            f"{run_dir} holds {len(found)} *{suffix} files; a run's output dir holds one.",
            fix="give the output dir of one recorded run (it has TASK.request.json and "
            "TASK.transcript.jsonl).",
        )
    return found[0]


@click.command("replay")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--output-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where the replay's record goes (default: RUN_DIR/replay).",
)
@click.option(
    "--source",
    type=click.Path(path_type=Path, file_okay=False),
    help="The source repo, if it moved since the recording (it must hold the base commit).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def replay_command(
    run_dir: Path, output_dir: Path | None, source: Path | None, as_json: bool
) -> int:
    """Re-run a recorded run from its transcript with no network; exit 0 iff it reproduces.

    Same tool calls, same patch, same result (timestamps aside). RUN_DIR is the output
    dir of a run made by a model backend.
    """
    run_dir = run_dir.expanduser().resolve()
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a directory.", fix="give a run's output dir.")
    request_path = _one(run_dir, ".request.json")
    task_id = request_path.name.removesuffix(".request.json")
    seal.verify(RecordPaths(run_dir, task_id), seal.SEALED)  # RecordError (5) if changed
    transcript = find_transcript(run_dir)
    try:
        request = json.loads(request_path.read_text(encoding="utf-8"))
        data = dict(request["spec"])
        base = str(request["base"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RecordError(
            f"{request_path} is not a run request ({exc}).",
            fix="give the output dir of a run recorded by code-runner.",
        ) from None
    data.update(
        backend=f"replay:{transcript}",
        output_dir=str((output_dir or run_dir / "replay").expanduser().resolve()),
        base=base,
        apply_to_source=False,
        commit_on_success=False,
    )
    if source is not None:
        data["cwd"] = str(source.expanduser().resolve())
    task = validate_spec_data(data, base_dir=run_dir, source=str(request_path))
    pre = runner.preflight(task, base_dir=run_dir)
    replayed = runner.run_task(pre)
    replay_paths = RecordPaths(task.output_dir, task.task_id)
    recorded_path = run_dir / f"{task.task_id}.result.json"
    recorded = load_result(recorded_path) if recorded_path.is_file() else None
    recorded_patch = run_dir / f"{task.task_id}.patch"
    digest = _file_sha256(recorded_patch) if recorded_patch.is_file() else None
    before = comparable(recorded, digest) if recorded else {}
    after = comparable(replayed)
    differences = sorted(k for k in before if before[k] != after.get(k))
    report = {
        "reproduced": not differences and recorded is not None,
        "differences": {k: {"recorded": before[k], "replayed": after.get(k)} for k in differences},
        "recorded_result": str(recorded_path) if recorded else None,
        "replay_result": str(replay_paths.result),
        "status": replayed.status.value,
        "reason": replayed.reason.value,
        "patch_sha256": replayed.patch_sha256,
    }
    if as_json:
        render.print_json(report)
    else:
        out = render.console()
        if not recorded:
            out.print(f"[yellow]no recorded result[/] in {run_dir}: nothing to compare with")
        elif report["reproduced"]:
            out.print(
                f"[green]reproduced[/]: {report['status']} ({report['reason']}), same patch "
                f"({str(report['patch_sha256'])[:12]}) and same result"
            )
        else:
            out.print(f"[red]differs[/] from the recording in: {', '.join(differences)}")
            for key in differences:
                out.print(f"  {key}: recorded {before[key]!r}, replayed {after.get(key)!r}")
        out.print(f"  replay record: {replay_paths.output_dir}")
    return 0 if report["reproduced"] else 1


__all__ = ["comparable", "replay_command"]
