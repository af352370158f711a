"""The plan's record, read from the store: `plan.status.json`, `plan.result.json`,
`plan.md` and the events in `plan.events.jsonl`.

Everything here is a view of the store (the one source of truth), rewritten whole after
every change; a crash between the store write and the view only leaves a stale view that
the next write replaces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.clock import utc_now
from code_runner.plans.export import exports
from code_runner.plans.item import item_argvs
from code_runner.plans.lock import plans_dir
from code_runner.plans.states import AttemptState, PlanStatus
from code_runner.plans.store import PlanStore

SCHEMA_VERSION = 1

_NEXT = {
    PlanStatus.READY: "run it: `code-runner plan run PLAN_FILE`",
    PlanStatus.RUNNING: "wait, or `code-runner plan status {id} --json` for details",
    PlanStatus.PAUSED: "run it again: `code-runner plan run PLAN_FILE` resumes at {next}",
    PlanStatus.NEEDS_AMENDMENT: "declare the out-of-scope paths: `code-runner plan amend {id}"
    " FILE`, then `plan approve {id} --continue`",
    PlanStatus.NEEDS_APPROVAL: "review the protected change, then `plan approve {id} --changes`",
    PlanStatus.NEEDS_HUMAN: "read the finding, then `plan approve {id} --redo`",
    PlanStatus.DONE: "export it: `code-runner plan export {id} --branch NAME`",
    PlanStatus.CANCELLED: "nothing: the plan is cancelled",
}


def record_dir(plan_id: str, settings: str | None = None) -> Path:
    """Where the plan's record lives: its `--output-dir`, else the state dir."""
    chosen = json.loads(settings or "{}").get("output_dir") if settings else None
    return Path(chosen) if chosen else plans_dir() / "records" / plan_id


def _item_state(attempts: list[Any], ledger: dict[str, Any]) -> str:
    if not attempts:
        return "pending"
    last = attempts[-1]
    state = AttemptState(last["state"])
    if state is AttemptState.COMPLETED:
        return "committed" if last["id"] in ledger else "unchanged"
    return str(state)


def plan_status(store: PlanStore, plan_id: str) -> dict[str, Any]:
    row = store.plan(plan_id)
    plan = store.revision(plan_id)
    attempts = store.attempts(plan_id)
    ledger = {r["attempt_id"]: r for r in store.ledger(plan_id)}
    findings = store.findings(plan_id)
    checkpoints = store.checkpoints(plan_id)
    status = PlanStatus(row["status"])
    nxt = store.next_item(plan_id)
    items = []
    for item in plan.items:
        mine = [a for a in attempts if a["item"] == item.id and not a["superseded"]]
        kept = next((ledger[a["id"]] for a in reversed(mine) if a["id"] in ledger), None)
        commit = kept["sha"] if kept is not None else None
        result = json.loads(mine[-1]["result"] or "{}") if mine else {}
        items.append(
            {
                "id": item.id,
                "title": item.title,
                "state": _item_state(mine, ledger),
                "commit": commit,
                "tree": kept["tree"] if kept is not None else None,
                "attempts": [
                    {
                        "id": a["id"],
                        "state": a["state"],
                        "reason": a["diagnostic"],
                        "record_dir": a["record_dir"],
                    }
                    for a in mine
                ],
                "declared": sorted({f.path for f in item.files}),  # in this revision
                "out_of_scope": result.get("out_of_scope", []),
                "protected": result.get("protected", []),
                "findings": [
                    {"kind": f["kind"], "detail": f["detail"]}
                    for f in findings
                    if f["item"] == item.id
                ],
                "dod": "none" if not item_argvs(item) else "cmd",
                "checks_unverified": [a.text for a in item.acceptance if a.type == "check"],
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "plan_id": plan_id,
        "status": status.value,
        "reason": row["status_reason"],
        "revision": row["revision"],
        "base": row["base"],
        "head": row["head"],
        "source": row["source_dir"],
        "next_item": nxt,
        "next": _NEXT[status].format(id=plan_id, next=nxt),
        "items": items,
        "checkpoints": [
            {
                "kind": c["kind"],
                "item": c["item"],
                "head": c["head"],
                "paths": json.loads(c["paths"]),
            }
            for c in checkpoints
        ],
        "exports": [_export(row) for row in exports(store, plan_id)],
        "updated_at": utc_now(),
    }


def _export(row: Any) -> dict[str, Any]:
    detail = json.loads(row["detail"] or "{}")
    return {
        "id": row["id"],
        "kind": row["kind"],
        "target": row["target"],
        "head": row["head"],
        "through": row["through_item"],
        "state": row["state"],
        "items": detail.get("items", []),
        "error": detail.get("error"),
        "recovered": detail.get("recovered"),
        "updated_at": row["updated_at"],
    }


def markdown(status: dict[str, Any]) -> str:
    lines = [
        f"# Plan {status['plan_id']}: {status['status']}",
        "",
        f"base `{status['base'][:12]}`, head `{status['head'][:12]}`, revision"
        f" r{status['revision']}. {status['reason'] or ''}",
        "",
        "| item | title | state | commit | attempts | DoD | notes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for item in status["items"]:
        notes = []
        if item["out_of_scope"]:
            notes.append("out of scope: " + ", ".join(item["out_of_scope"]))
        if item["protected"]:
            notes.append("protected: " + ", ".join(item["protected"]))
        notes += [f"finding: {f['detail']}" for f in item["findings"]]
        title = item["title"].replace("|", "\\|")
        lines.append(
            f"| {item['id']} | {title} | {item['state']} | {(item['commit'] or '')[:12]} |"
            f" {len(item['attempts'])} | {item['dod']} | {'; '.join(notes).replace('|', '/')} |"
        )
    if status["exports"]:
        lines += [
            "",
            "| export | form | target | items | state |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {e['id']} | {e['kind']} | {e['target'].replace('|', '/')} |"
            f" {', '.join(e['items'])} | {e['state']} |"
            for e in status["exports"]
        ]
    lines += ["", f"Next: {status['next']}", ""]
    return "\n".join(lines)


def write_views(store: PlanStore, plan_id: str, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    status = plan_status(store, plan_id)
    files.atomic_write_json(out / "plan.status.json", status)
    done = PlanStatus(status["status"]) is not PlanStatus.RUNNING
    if done:
        files.atomic_write_json(out / "plan.result.json", status)
    files.atomic_write_text(out / "plan.md", markdown(status))
    return status


def emit(out: Path, kind: str, **data: object) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files.append_jsonl(out / "plan.events.jsonl", {"at": utc_now(), "kind": kind, **data})
