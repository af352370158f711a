"""`experiment_result.md`: the experiment result for a person, rendered from `result.json` only.

Rendering from the result value (never from live state) means the report and the JSON
cannot disagree, and `code-runner status RUN_DIR` can render the same text later.
"""

from __future__ import annotations

import json
from pathlib import Path

from code_runner import files
from code_runner.errors import RecordError
from code_runner.monitor.checks import mib
from code_runner.monitor.passport import passport_lines
from code_runner.monitor.result import ExperimentResult, load_result
from code_runner.monitor.summarize import TableSummary


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{sec:02d}s" if hours else f"{minutes}m{sec:02d}s"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def headline(result: ExperimentResult) -> str:
    """One line: state, exit, duration, success."""
    exit_text = "no exit code" if result.exit_code is None else f"exit {result.exit_code}"
    if result.signal is not None:
        exit_text += f", signal {result.signal}"
    verdict = "criteria met" if result.success else "criteria NOT met"
    state = result.state.value.upper()
    text = f"{state} ({exit_text}) after {_duration(result.duration_s)}; {verdict}"
    return "; ".join([text, *warnings(result)])


def warnings(result: ExperimentResult) -> list[str]:
    """What must not be missed even when the command succeeded: divergence, no metric."""
    found: list[str] = []
    diverged = next((a for a in result.alerts if a.kind == "DIVERGED"), None)
    if diverged is not None:
        values = ", ".join(f"{k} = {v}" for k, v in diverged.data.items())
        found.append(f"DIVERGED ({values})")
    if result.type == "training" and not result.metrics:
        found.append(
            "NO METRIC: nothing like `loss: 0.5` was found in the output (see --metric-regex)"
        )
    return found


def _memory(result: ExperimentResult) -> str:
    if result.checks == 0:
        return "not sampled: the command ended before the first check"
    pss = f", PSS {mib(result.peak_pss_bytes)}" if result.peak_pss_bytes is not None else ""
    return (
        f"RSS {mib(result.peak_rss_bytes)} summed over the tree{pss}, "
        f"{result.peak_processes} processes at most"
    )


def render_report(result: ExperimentResult) -> str:
    lines = [
        "# Experiment result",
        "",
        f"**{headline(result)}**",
        "",
        "| field | value |",
        "| --- | --- |",
        f"| command | `{_cell(result.display_command)}` |",
        f"| working dir | `{_cell(result.cwd)}` |",
        f"| type | {result.type} |",
        f"| state | {result.state.value} |",
        f"| exit code | {result.exit_code if result.exit_code is not None else '-'} |",
        f"| signal | {result.signal if result.signal is not None else '-'} |",
        f"| duration | {_duration(result.duration_s)} (timeout {_duration(result.timeout_s)}) |",
        f"| started / finished | {result.started_at} / {result.finished_at} |",
        f"| peak memory | {_memory(result)} |",
        f"| tree CPU time | {result.cpu_s:.1f} s |",
        f"| checks | {result.checks} every {result.interval_s:g} s |",
    ]
    if result.stop_reason:
        lines.append(f"| stopped because | {_cell(result.stop_reason)} |")
    if result.kill is not None:
        k = result.kill
        lines.append(
            f"| tree kill | {k.reason}: {k.signalled} signalled, {k.needed_sigkill} needed SIGKILL,"
            f" last gone after {k.last_gone_s:.2f} s, survivors: {len(k.survivors)} |"
        )
    if result.leftovers_killed:
        lines.append(f"| leftovers killed after exit | {result.leftovers_killed} |")
    lines += ["", "## Success criteria", ""]
    lines += ["| criterion | passed | observed |", "| --- | --- | --- |"]
    for c in result.criteria:
        lines.append(f"| `{_cell(c.text)}` | {'yes' if c.passed else 'NO'} | {_cell(c.observed)} |")
    lines += _outputs_section(result)
    lines += _metrics_section(result)
    lines += _alerts_section(result)
    lines += ["", "## Last lines of stdout", ""]
    lines += ["```text", *result.stdout_tail, "```"] if result.stdout_tail else ["(empty)"]
    lines += ["", "## Last lines of stderr", ""]
    if result.stderr_tail:
        lines += ["```text", *result.stderr_tail, "```"]
    else:
        lines.append("(stderr was empty)")
    lines += passport_lines(result)
    lines += [
        "",
        "Full output: `stdout.log`, `stderr.log`; every event: `events.jsonl`; "
        "machine-readable: `result.json`.",
        "",
    ]
    return "\n".join(lines)


def _outputs_section(result: ExperimentResult) -> list[str]:
    lines = ["", "## Expected outputs", ""]
    if not result.outputs:
        return [*lines, "(none declared; use --expect PATH)"]
    lines += ["| path | size | note |", "| --- | --- | --- |"]
    for out in result.outputs:
        if out.missing:
            lines.append(f"| `{_cell(out.pattern)}` | - | **MISSING** |")
            continue
        for f in out.files:
            lines.append(f"| `{_cell(f.path)}` | {f.size_bytes} bytes | {_brief(f.summary)} |")
        if out.truncated:
            lines.append(f"| `{_cell(out.pattern)}` | ... | more files not listed |")
    for out in result.outputs:
        for f in out.files:
            if f.summary is not None and f.summary.columns:
                lines += ["", f"### `{_cell(f.path)}`", "", *_table(f.summary)]
    return lines


def _brief(summary: TableSummary | None) -> str:
    if summary is None:
        return ""
    parts = [summary.format]
    if summary.rows is not None:
        parts.append(f"{summary.rows} rows")
    if summary.columns:
        parts.append(f"{len(summary.columns)} columns")
    if summary.note:
        parts.append(summary.note)
    return _cell(", ".join(parts))


def _table(summary: TableSummary) -> list[str]:
    lines = ["| column | type | count | missing | min | max | mean | std | distinct |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in summary.columns:
        nums = [_num(c.min), _num(c.max), _num(c.mean), _num(c.std)]
        distinct = "-" if c.distinct is None else str(c.distinct)
        cells = [_cell(c.name), c.type, str(c.count), str(c.missing), *nums, distinct]
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _metrics_section(result: ExperimentResult) -> list[str]:
    lines: list[str] = []
    if result.metrics:
        lines += ["", "## Metrics", ""]
        if result.watched_metric:
            lines += [f"Plateau check watched `{result.watched_metric}`.", ""]
        lines += ["| metric | points | first | last | min | max | trend |"]
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for m in result.metrics:
            lines.append(
                f"| {_cell(m.name)} | {m.points} | {m.first:.6g} | {m.last:.6g} | {m.min:.6g} "
                f"| {m.max:.6g} | {m.sparkline} |"
            )
        plots = list(dict.fromkeys(m.plot for m in result.metrics if m.plot))  # shared: once
        if plots:
            lines.append("")
            lines += [f"![{_cell(Path(p).stem.removeprefix('plot-'))}]({p})" for p in plots]
    if result.memory_plot:
        lines += ["", "## Memory", "", f"![memory]({result.memory_plot})"]
    if result.progress is not None:
        p = result.progress
        total = f"/{p.total:g}" if p.total else ""
        rate = f"{p.rate_per_s:.3g}/s" if p.rate_per_s is not None else "unknown rate"
        lines += ["", "## Progress", "", f"{p.done:g}{total} at {rate} (smoothed)."]
    return lines


def _alerts_section(result: ExperimentResult) -> list[str]:
    lines = ["", "## Alerts (advisory)", ""]
    if not result.alerts:
        return [*lines, "No alert was raised."]
    lines += ["| check | elapsed | alert | detail |", "| --- | --- | --- | --- |"]
    for a in result.alerts:
        kind = a.kind + (" (repeated)" if a.repeated else "")
        lines.append(f"| #{a.check_no} | {_duration(a.elapsed_s)} | {kind} | {_cell(a.detail)} |")
    if result.answers:
        lines += ["", "Answers:", ""]
        for ans in result.answers:
            note = f" ({ans.note})" if ans.note else ""
            who = "" if ans.via == "terminal" else f", via {ans.via} by {_cell(ans.by)}"
            lines.append(
                f"- at {_duration(ans.elapsed_s)}: `{_cell(ans.answer)}` to {ans.alert_kind or '-'}"
                f" -> {ans.action}{note}{who}"
            )
    return lines


def render_status(run_dir: Path) -> str:
    """Text for `code-runner status RUN_DIR`: the result if finished, else the live status."""
    if (run_dir / "result.json").exists():
        result = load_result(run_dir)
        alerts = ", ".join(sorted({a.kind for a in result.alerts})) or "none"
        return f"{headline(result)}\nalerts: {alerts}\nreport: {run_dir / 'experiment_result.md'}"
    status_path = run_dir / "status.json"
    try:
        status = json.loads(files.read_regular(status_path))
    except (OSError, json.JSONDecodeError):
        raise RecordError(
            f"{run_dir} holds no experiment record (no result.json or status.json)",
            fix="pass the --run-dir of a `code-runner exec` run",
        ) from None
    state = str(status.get("state", "?")).upper()
    text = (
        f"{state} for {_duration(float(status.get('elapsed_s', 0)))}"
        f", check #{status.get('check_no', 0)}, pid {status.get('pid', '?')}\n"
        f"updated: {status.get('updated_at', '?')}"
    )
    return text + _monitor_note(status)


def _monitor_note(status: dict[str, object]) -> str:
    """Say so when the monitor is gone: the status is no longer being refreshed."""
    monitor = status.get("monitor_pid")
    if not isinstance(monitor, int) or status.get("finished") or _pid_alive(monitor):
        return ""
    guard = status.get("watchdog_pid")
    held = (
        f"its watchdog (pid {guard}) holds the timeout"
        if isinstance(guard, int) and _pid_alive(guard)
        else "nothing holds the timeout: run `code-runner gc`"
    )
    return f"\nmonitor pid {monitor} is gone; {held}"


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
