"""The dashboard as a Starlette app: pages rendered on the server, live parts over SSE.

Every URL that names a run goes through `roots.Roots.resolve`; a name that is not a run
under a configured root is a 404 that says no more than that. Reading is done by the
`*_view` modules through `record` and `monitor`; the buttons call `actions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import ChainableUndefined, Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import code_runner.web.actions as actions
import code_runner.web.batch_view as batch_view
import code_runner.web.exec_view as exec_view
import code_runner.web.plan_actions as plan_actions
import code_runner.web.plan_view as plan_view
import code_runner.web.stream as stream
import code_runner.web.task_view as task_view
from code_runner.errors import UsageError
from code_runner.record.summary import parse_since
from code_runner.web.catalog import Catalog, Kind, RunEntry, after, exec_label, read_json
from code_runner.web.roots import OutsideRoots, Roots
from code_runner.web.security import Guard, GuardMiddleware

STATIC_DIR = Path(__file__).parent / "static"
MAX_COMPARE = 12
MAX_CACHED_ROWS = 50_000


@dataclass(frozen=True)
class Filters:
    status: str = ""
    kind: str = ""
    since: str = ""

    @classmethod
    def of(cls, request: Request) -> Filters:
        q = request.query_params
        return cls(q.get("status", "")[:40], q.get("kind", "")[:10], q.get("since", "")[:40])

    def keep(self, entries: list[RunEntry]) -> list[RunEntry]:
        moment: datetime | None = None
        if self.since:
            try:
                moment = parse_since(self.since)
            except UsageError:
                moment = None
        return [
            e
            for e in entries
            if (not self.status or e.status == self.status)
            and (not self.kind or e.kind.value == self.kind)
            and (moment is None or after(e.started_at, moment))
        ]


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("code_runner.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=ChainableUndefined,  # a key an older record lacks shows as nothing
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = _duration
    env.filters["mib"] = lambda n: f"{(n or 0) / 2**20:.1f} MiB"
    env.globals["dumps"] = exec_view.dumps
    return env


def _duration(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


class Dashboard:
    """The routes over one set of roots and one guard."""

    def __init__(self, roots: Roots, guard: Guard) -> None:
        self.roots = roots
        self.guard = guard
        self.catalog = Catalog(roots)
        self.env = _environment()
        self._rows: dict[RunEntry, Markup] = {}

    def rows(self, entries: list[RunEntry]) -> list[Markup]:
        """Each run's row of the runs table, rendered once per change of the run."""
        if len(self._rows) > MAX_CACHED_ROWS:
            self._rows.clear()
        template = self.env.get_template("run_row.html")
        found = []
        for entry in entries:
            row = self._rows.get(entry)
            if row is None:
                row = self._rows[entry] = Markup(template.render(e=entry))  # noqa: S704 - autoescaped
            found.append(row)
        return found

    def page(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(
            csrf=self.guard.csrf, roots=self.roots.dirs, **context
        )
        return HTMLResponse(html, status_code=status_code)

    # --- the runs page --------------------------------------------------------------

    def _listing(self, request: Request) -> dict[str, Any]:
        entries = self.catalog.entries()
        filters = Filters.of(request)
        kept = filters.keep(entries)
        return {
            "runs": kept,
            "rows": self.rows(kept),
            "total": len(entries),
            "filters": filters,
            "statuses": sorted({e.status for e in entries}),
            "kinds": [k.value for k in Kind],
        }

    async def runs(self, request: Request) -> Response:
        listing = await asyncio.to_thread(self._listing, request)
        return self.page("runs.html", **listing)

    async def runs_table(self, request: Request) -> Response:
        listing = await asyncio.to_thread(self._listing, request)
        return self.page("runs_table.html", **listing)

    async def runs_stream(self, request: Request) -> Response:
        def signature() -> object:
            return [(e.key, e.status, e.duration_s) for e in self.catalog.entries()]

        return _sse(stream.changes(signature, disconnected=request.is_disconnected))

    # --- a task run -------------------------------------------------------------------

    def _task_paths(self, request: Request) -> Any:
        try:
            return task_view.locate_task(
                self.roots, request.path_params["root"], request.path_params["rel"]
            )
        except OutsideRoots:
            raise HTTPException(404, "no such run under the configured roots") from None

    async def task(self, request: Request) -> Response:
        paths = self._task_paths(request)
        view = await asyncio.to_thread(task_view.load_task, paths)
        return self.page("task.html", run=view, key=request.path_params)

    async def task_stream(self, request: Request) -> Response:
        paths = self._task_paths(request)
        offset = _offset(request)

        def finished() -> bool:
            return bool(read_json(paths.status).get("terminal"))

        def snapshot() -> object:
            status = read_json(paths.status)
            return {k: status.get(k) for k in ("state", "step", "round", "best_score")}

        return _sse(
            stream.follow(
                paths.events,
                offset,
                finished=finished,
                disconnected=request.is_disconnected,
                snapshot=snapshot,
            )
        )

    async def task_action(self, request: Request) -> Response:
        paths = self._task_paths(request)
        name = request.path_params["action"]
        if name not in actions.TASK_ACTIONS:
            raise HTTPException(404, "no such action")
        done = await asyncio.to_thread(actions.task_action, name, paths)
        return self.page("action_output.html", done=done)

    # --- an exec run and Compare -------------------------------------------------------

    def _run_dir(self, request: Request) -> Path:
        try:
            return exec_view.locate_exec(
                self.roots, request.path_params["root"], request.path_params["rel"]
            )
        except OutsideRoots:
            raise HTTPException(404, "no such run under the configured roots") from None

    async def exec_page(self, request: Request) -> Response:
        view = await asyncio.to_thread(exec_view.load_exec, self._run_dir(request))
        return self.page("exec.html", run=view, key=request.path_params)

    async def exec_data(self, request: Request) -> Response:
        view = await asyncio.to_thread(exec_view.load_exec, self._run_dir(request))
        data = await asyncio.to_thread(exec_view.chart_data, view)
        return JSONResponse(data)

    async def exec_stream(self, request: Request) -> Response:
        run_dir = self._run_dir(request)

        def finished() -> bool:
            return bool(read_json(run_dir / "status.json").get("finished"))

        def snapshot() -> object:
            return read_json(run_dir / "status.json")

        return _sse(
            stream.follow(
                run_dir / "events.jsonl",
                _offset(request),
                finished=finished,
                disconnected=request.is_disconnected,
                snapshot=snapshot,
            )
        )

    async def exec_stop(self, request: Request) -> Response:
        run_dir = self._run_dir(request)
        done = await asyncio.to_thread(actions.stop_exec, run_dir, _by(request))
        return self.page("action_output.html", done=done)

    async def exec_answer(self, request: Request) -> Response:
        run_dir = self._run_dir(request)
        form = await request.form()
        option, alert, settings = (str(form.get(k) or "")[:200] for k in ("option", "alert", "set"))
        done = await asyncio.to_thread(
            actions.answer_exec, run_dir, option, alert, settings, _by(request)
        )
        return self.page("action_output.html", done=done)

    async def exec_pending(self, request: Request) -> Response:
        view = await asyncio.to_thread(exec_view.load_exec, self._run_dir(request))
        return self.page("exec_pending.html", run=view, key=request.path_params)

    def _keys(self, request: Request, name: str) -> list[tuple[int, str]]:
        found = []
        for raw in request.query_params.getlist(name)[:MAX_COMPARE]:
            number, _, rel = raw.partition("/")
            try:
                found.append((int(number), rel))
            except ValueError:
                raise HTTPException(404, "no such run under the configured roots") from None
        return found

    async def compare(self, request: Request) -> Response:
        try:
            run_dirs = [
                exec_view.locate_exec(self.roots, n, r) for n, r in self._keys(request, "run")
            ]
            batch_dirs = [
                batch_view.locate_batch(self.roots, n, r) for n, r in self._keys(request, "batch")
            ]
        except OutsideRoots:
            raise HTTPException(404, "no such run under the configured roots") from None
        batches = [
            await asyncio.to_thread(batch_view.load_batch, self.roots, d) for d in batch_dirs
        ]
        for batch in batches:  # each batch's exec items, overlaid with the chosen runs
            for item in batch.items:
                if item.exec_key is not None and len(run_dirs) < MAX_COMPARE * 4:
                    with contextlib.suppress(OutsideRoots):
                        key = item.exec_key
                        run_dirs.append(exec_view.locate_exec(self.roots, key.root, key.rel))
        run_dirs = list(dict.fromkeys(run_dirs))
        columns, rows = await asyncio.to_thread(exec_view.compare_rows, run_dirs)
        labels = [exec_label(run_dir) for run_dir in run_dirs]
        if len(rows) == len(labels):
            rows = [{**row, "run": label} for row, label in zip(rows, labels, strict=True)]
        series = {}
        for run_dir, label in zip(run_dirs, labels, strict=True):
            series[label] = await asyncio.to_thread(exec_view.metric_points, run_dir)
        entries = self.catalog.entries()
        execs = [e for e in entries if e.kind is Kind.EXEC]
        all_batches = [e for e in entries if e.kind is Kind.BATCH]
        chosen = {f"{k.root}/{k.rel}" for k in (self.roots.key_of(d) for d in run_dirs) if k}
        chosen |= {f"{b.key.root}/{b.key.rel}" for b in batches}
        return self.page(
            "compare.html",
            columns=columns,
            rows=rows,
            series=series,
            execs=execs,
            chosen=chosen,
            batches=batches,
            all_batches=all_batches,
        )

    async def batch(self, request: Request) -> Response:
        try:
            batch_view.locate_batch(
                self.roots, request.path_params["root"], request.path_params["rel"]
            )
        except OutsideRoots:
            raise HTTPException(404, "no such run under the configured roots") from None
        key = f"{request.path_params['root']}/{request.path_params['rel']}"
        return RedirectResponse(f"/compare?batch={quote(key)}", status_code=303)

    # --- a plan -----------------------------------------------------------------------------

    def _plan_dir(self, request: Request) -> Path:
        try:
            return plan_view.locate_plan(
                self.roots, request.path_params["root"], request.path_params["rel"]
            )
        except OutsideRoots:
            raise HTTPException(404, "no such run under the configured roots") from None

    async def plan(self, request: Request) -> Response:
        view = await asyncio.to_thread(plan_view.load_plan, self.roots, self._plan_dir(request))
        ids = {name: str(uuid.uuid4()) for name in plan_actions.PLAN_ACTIONS}
        return self.page("plan.html", run=view, key=request.path_params, action_ids=ids)

    async def plan_action(self, request: Request) -> Response:
        record_dir = self._plan_dir(request)
        name = request.path_params["action"]
        if name not in plan_actions.PLAN_ACTIONS:
            raise HTTPException(404, "no such action")
        data, filename = b"", "plan.json"
        async with request.form(max_files=1, max_fields=10) as form:
            action_id = str(form.get("action_id") or "")[:40]
            branch = str(form.get("branch") or "")[:200]
            through = str(form.get("through") or "")[:60]
            upload = form.get("plan_file")
            if name == "amend" and (upload is None or isinstance(upload, str)):
                raise HTTPException(400, "choose a plan file to amend with")
            if upload is not None and not isinstance(upload, str):
                data = await upload.read(plan_actions.MAX_PLAN_FILE_BYTES + 1)
                filename = upload.filename or filename
        call: Callable[[], actions.ActionOutput]
        if name == "amend":
            call = partial(plan_actions.amend, record_dir, filename, data, action_id)
        elif name == "resume":
            call = partial(plan_actions.resume, record_dir)
        elif name == "export":
            call = partial(plan_actions.export_branch, record_dir, branch, through, action_id)
        else:
            call = partial(plan_actions.gate_action, record_dir, name, action_id)
        done = await asyncio.to_thread(call)
        headers = {"HX-Refresh": "true"} if name == "resume" and done.ok else {}
        response = self.page("action_output.html", done=done)
        response.headers.update(headers)
        return response

    async def plan_stream(self, request: Request) -> Response:
        record_dir = self._plan_dir(request)

        def finished() -> bool:
            status = read_json(record_dir / "plan.status.json").get("status")
            return str(status) not in plan_view.LIVE_STATES

        return _sse(
            stream.follow(
                record_dir / "plan.events.jsonl",
                _offset(request),
                finished=finished,
                disconnected=request.is_disconnected,
            )
        )

    async def not_found(self, request: Request, exc: Exception) -> Response:
        code = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        return self.page("error.html", status_code=code, code=code, detail=detail)


def _by(request: Request) -> str:
    """Who sent a request, as the record names them: the server's user and the client."""
    client = request.client.host if request.client else "?"
    return f"{actions.who()} from {client}"


def _offset(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("offset") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


def _sse(frames: Any) -> StreamingResponse:
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


Handler = Callable[[Request], Awaitable[Response]]


def create_app(roots: list[Path], *, guard: Guard) -> Starlette:
    """The dashboard over `roots`, behind `guard`."""
    d = Dashboard(Roots.of(roots), guard)
    run = "{root:int}/{rel:path}"
    routes = [
        Route("/", d.runs),
        Route("/runs/table", d.runs_table),
        Route("/stream/runs", d.runs_stream),
        Route(f"/task/{run}", d.task),
        Route(f"/stream/task/{run}", d.task_stream),
        Route("/act/task/{action}/" + run, d.task_action, methods=["POST"]),
        Route(f"/exec/{run}", d.exec_page),
        Route(f"/data/exec/{run}", d.exec_data),
        Route(f"/stream/exec/{run}", d.exec_stream),
        Route(f"/act/exec/stop/{run}", d.exec_stop, methods=["POST"]),
        Route(f"/act/exec/answer/{run}", d.exec_answer, methods=["POST"]),
        Route(f"/part/exec/pending/{run}", d.exec_pending),
        Route(f"/plan/{run}", d.plan),
        Route(f"/stream/plan/{run}", d.plan_stream),
        Route("/act/plan/{action}/" + run, d.plan_action, methods=["POST"]),
        Route("/compare", d.compare),
        Route(f"/batch/{run}", d.batch),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(GuardMiddleware, guard=guard)],
        exception_handlers={HTTPException: d.not_found, 404: d.not_found},
    )


__all__ = ["Dashboard", "create_app"]
