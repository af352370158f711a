"""Real processes under `code-runner exec`: each scenario checks the state, the alerts raised
(and not raised), the record, and that nothing survives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.monitor import FAST, PY, gone, run_exec, script

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]

TRAIN = """
import time
loss = 2.0
for epoch in range(24):
    loss = max(0.5, loss * 0.75)
    print(f"epoch: {epoch} - loss: {loss:.4f} - acc: {0.5 + epoch / 100:.3f}", flush=True)
    time.sleep(0.04)
"""


def test_training_plateau_alert_metrics_and_plot(tmp_path: Path) -> None:
    name = script(tmp_path, "train.py", TRAIN)
    ran = run_exec(tmp_path, [*FAST, "--patience", "4", "--", PY, name])
    assert ran.code == 0, ran.err
    result = ran.result()
    assert result.state.value == "completed" and result.success
    assert result.type == "training"  # detected from the word and the file
    assert "METRIC_PLATEAU" in ran.alert_kinds()
    assert ran.alert_kinds().count("METRIC_PLATEAU") <= 2  # shown, repeated once, then quiet
    assert result.watched_metric == "loss"
    loss = next(m for m in result.metrics if m.name == "loss")
    assert loss.points == 24 and loss.last == 0.5 and loss.plot == "plot-loss.png"
    assert (ran.run_dir / "plot-loss.png").read_bytes()[:4] == b"\x89PNG"
    report = (ran.run_dir / "experiment_result.md").read_text()
    assert "METRIC_PLATEAU" in report and "![loss](plot-loss.png)" in report
    assert "[METRIC_PLATEAU] detected at check #" in ran.err  # no terminal: alerts to stderr
    assert "RESOURCE_ALERT" not in ran.alert_kinds()


def test_silent_hang_is_flat_and_the_timeout_kills(tmp_path: Path) -> None:
    code = "import time; print('loaded', flush=True); time.sleep(60)"
    ran = run_exec(tmp_path, [*FAST, "--timeout", "1.5", "--grace", "0.5", "--", PY, "-c", code])
    assert ran.code == 124
    assert "exceeded its timeout" in ran.err and "Fix:" in ran.err
    result = ran.result()
    assert result.state.value == "timeout" and result.exit_code == 124
    stall = next(a for a in result.alerts if a.kind == "STALL_SUSPECTED")
    assert stall.data["cpu_state"] == "flat" and "likely hung" in stall.detail
    assert result.kill is not None and result.kill.survivors == ()
    assert result.kill.last_gone_s < 0.5 + 1.0
    kinds = [e["kind"] for e in ran.events()]
    assert kinds.index("timeout") < kinds.index("tree_killed") < kinds.index("run_finished")


def test_busy_but_silent_loop_says_cpu_is_rising(tmp_path: Path) -> None:
    code = "import time\nprint('start', flush=True)\nt = time.time()\n"
    code += "while time.time() - t < 1.2: pass"
    ran = run_exec(tmp_path, [*FAST, "--stall-checks", "3", "--", PY, "-c", code])
    assert ran.code == 0
    stall = next(a for a in ran.result().alerts if a.kind == "STALL_SUSPECTED")
    assert stall.data["cpu_state"] == "rising"
    assert "busy but silent" in stall.detail and "PYTHONUNBUFFERED" in stall.detail


GROWER = """
import time
time.sleep(0.8)
blocks = []
for _ in range(6):
    blocks.append(b"x" * (25 * 1024 * 1024))
    print("allocated", len(blocks), flush=True)
    time.sleep(0.15)
time.sleep(0.4)
"""


def test_memory_grower_raises_a_resource_alert(tmp_path: Path) -> None:
    name = script(tmp_path, "grow.py", GROWER)
    ran = run_exec(tmp_path, [*FAST, "--memory-warmup", "0.4", "--", PY, name])
    assert ran.code == 0
    alert = next(a for a in ran.result().alerts if a.kind == "RESOURCE_ALERT")
    assert "PSS" in alert.detail and float(alert.data["ratio"] or 0) > 3
    assert ran.result().peak_rss_bytes > 100 * 1024 * 1024


HEAVY_START = """
import time
time.sleep(0.4)  # a slow start (imports), so the first check always sees the small process
try:
    import numpy  # noqa: F401  (an import-heavy start, as in most ML/data jobs)
except ImportError:
    pass
model = b"w" * (60 * 1024 * 1024)  # e.g. weights loaded at start
print("ready", flush=True)
time.sleep(1.4)
"""


@pytest.mark.parametrize(("warmup", "expect_alert"), [("1.1", False), ("0", True)])
def test_import_heavy_start_fires_only_without_warmup(
    tmp_path: Path, warmup: str, expect_alert: bool
) -> None:
    name = script(tmp_path, "heavy.py", HEAVY_START)
    ran = run_exec(
        tmp_path, [*FAST, "--memory-warmup", warmup, "--type", "generic", "--", PY, name]
    )
    assert ran.code == 0
    assert ("RESOURCE_ALERT" in ran.alert_kinds()) is expect_alert


DAEMONIZER = """
import os, subprocess, sys, time
pids = []
pids.append(subprocess.Popen(["setsid", "sleep", "300"]).pid)
pids.append(subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 300"]).pid)
r, w = os.pipe()
if os.fork() == 0:  # classic double fork: the grandchild is orphaned and re-parented
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode()); os.close(w)
        time.sleep(300)
    os._exit(0)
os.close(w)
pids.append(int(os.read(r, 64)))
open("pids.json", "w").write(__import__("json").dumps(pids))
print("daemons up", flush=True)
time.sleep(float(sys.argv[1]))
"""


def test_timeout_leaves_nothing_running(tmp_path: Path) -> None:
    name = script(tmp_path, "daemons.py", DAEMONIZER)
    ran = run_exec(tmp_path, [*FAST, "--timeout", "1.5", "--grace", "0.5", "--", PY, name, "300"])
    assert ran.code == 124
    pids = json.loads((tmp_path / "pids.json").read_text())
    assert len(pids) == 3
    assert all(gone(pid) for pid in pids), [p for p in pids if not gone(p)]
    kill = ran.result().kill
    assert kill is not None and kill.survivors == () and kill.needed_sigkill >= 1
    assert kill.signalled >= 4  # python, the setsid sleep, bash (exec-ed into sleep), orphan
    assert kill.last_gone_s < 0.5 + 1.0  # within the grace period plus 1 s


def test_daemons_left_after_a_normal_exit_are_cleaned_up(tmp_path: Path) -> None:
    name = script(tmp_path, "daemons.py", DAEMONIZER)
    ran = run_exec(tmp_path, [*FAST, "--grace", "0.3", "--", PY, name, "0.2"])
    assert ran.code == 0
    result = ran.result()
    assert result.state.value == "completed"
    assert result.leftovers_killed >= 3
    assert all(gone(pid) for pid in json.loads((tmp_path / "pids.json").read_text()))
    assert "leftovers_killed" in [e["kind"] for e in ran.events()]


PROGRESS = """
import sys, time
total = 110
for i in range(total + 1):
    bar = "#" * (i * 10 // total)
    sys.stderr.write(f"\\r{i * 100 // total:3d}%|{bar:<10}| {i}/{total} [00:01<00:02, 90.0it/s]")
    sys.stderr.flush()
    time.sleep(0.005 if i < 80 else 0.05)
sys.stderr.write("\\n")
"""


def test_tqdm_progress_eta_and_slow_alert(tmp_path: Path) -> None:
    name = script(tmp_path, "etl_job.py", PROGRESS)
    ran = run_exec(tmp_path, [*FAST, "--type", "etl", "--", PY, name])
    assert ran.code == 0
    result = ran.result()
    slow = next(a for a in result.alerts if a.kind == "SLOW_PROGRESS")
    assert "ETA" in slow.detail and slow.data["total"] == 110
    assert result.progress is not None and result.progress.done == 110
    assert result.stderr_tail == ("100%|##########| 110/110 [00:01<00:02, 90.0it/s]",)
    assert "STALL_SUSPECTED" not in ran.alert_kinds()  # a moving bar is activity


def test_crash_keeps_the_traceback(tmp_path: Path) -> None:
    code = "print('working', flush=True)\ndef f():\n    return 1 / 0\nf()"
    ran = run_exec(tmp_path, [*FAST, "--", PY, "-c", code])
    assert ran.code == 1
    result = ran.result()
    assert result.state.value == "crashed" and result.exit_code == 1 and not result.success
    assert result.stderr_tail[0].startswith("Traceback")
    assert result.stderr_tail[-1] == "ZeroDivisionError: division by zero"
    assert "CRASHED (exit 1)" in ran.out
    assert "ZeroDivisionError" in (ran.run_dir / "experiment_result.md").read_text()


OUTPUTS = """
import csv, json
with open("out.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["id", "value", "group"])
    for i in range(50):
        w.writerow([i, i * 0.5, "ab"[i % 2]])
with open("rows.jsonl", "w") as f:
    for i in range(7):
        f.write(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\\n")
try:
    import pyarrow as pa, pyarrow.parquet as pq
    pq.write_table(pa.table({"x": [1.0, 2.0, 3.0]}), "t.parquet")
except ImportError:
    pass
"""


def test_structured_outputs_are_summarized_and_missing_ones_flagged(tmp_path: Path) -> None:
    name = script(tmp_path, "write_outputs.py", OUTPUTS)
    args = [
        *FAST,
        "--expect",
        "out.csv",
        "--expect",
        "rows.jsonl",
        "--expect",
        "nothing.txt",
        "--success",
        "file out.csv > 100 bytes",
        "--",
        PY,
        name,
    ]
    ran = run_exec(tmp_path, args)
    assert ran.code == 1  # completed, but an expected output is missing
    result = ran.result()
    assert result.state.value == "completed" and not result.success
    by_pattern = {o.pattern: o for o in result.outputs}
    assert by_pattern["nothing.txt"].missing
    csv_summary = by_pattern["out.csv"].files[0].summary
    assert csv_summary is not None and csv_summary.rows == 50
    value = next(c for c in csv_summary.columns if c.name == "value")
    assert value.mean == pytest.approx(12.25) and value.max == 24.5
    jsonl = by_pattern["rows.jsonl"].files[0]
    assert jsonl.summary is not None and jsonl.summary.rows == 7 and jsonl.size_bytes > 0
    assert all(c.passed for c in result.criteria)
    report = (ran.run_dir / "experiment_result.md").read_text()
    assert "**MISSING**" in report and "### `out.csv`" in report


def test_parquet_output_summary(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    name = script(tmp_path, "write_outputs.py", OUTPUTS)
    ran = run_exec(tmp_path, [*FAST, "--expect", "*.parquet", "--", PY, name])
    assert ran.code == 0
    summary = ran.result().outputs[0].files[0].summary
    assert summary is not None and summary.format == "parquet" and summary.rows == 3
    assert summary.columns[0].mean == 2.0


def test_spec_file_with_a_shell_command_and_monitored_log(tmp_path: Path) -> None:
    (tmp_path / "exp.yaml").write_text(
        "command: |\n"
        "  for i in 1 2 3 4 5 6; do\n"
        '    echo "step=$i loss=0.$((9 - i))" >> train.log; sleep 0.1\n'
        "  done\n"
        "monitor: [train.log]\n"
        "type: training\n"
        "interval: 0.1\n"
        "success: ['metric loss < 0.5']\n"
    )
    ran = run_exec(tmp_path, ["--spec", str(tmp_path / "exp.yaml"), "--yes"])
    assert ran.code == 0, ran.err
    result = ran.result()
    assert result.criteria[0].observed == "last loss = 0.3"
    assert next(m for m in result.metrics if m.name == "loss").points == 6


def test_a_nan_training_run_is_reported_as_diverged(tmp_path: Path) -> None:
    body = (
        "import time\nfor epoch in range(20):\n"
        "    print(f'epoch {epoch} loss {float(\"nan\") if epoch > 2 else 0.7}', flush=True)\n"
        "    time.sleep(0.02)\n"
    )
    name = script(tmp_path, "train.py", body)
    ran = run_exec(tmp_path, [*FAST, "--type", "training", "--", PY, name])
    result = ran.result()
    assert "DIVERGED" in ran.alert_kinds()
    diverged = next(a for a in result.alerts if a.kind == "DIVERGED")
    assert diverged.data == {"loss": "nan"}
    report = (ran.run_dir / "experiment_result.md").read_text()
    assert "DIVERGED (loss = nan)" in report.splitlines()[2]  # in the headline
    assert "DIVERGED" in ran.out


def test_a_training_run_without_any_metric_says_so(tmp_path: Path) -> None:
    name = script(tmp_path, "train.py", "print('training started')\nprint('saved model.pt')\n")
    ran = run_exec(tmp_path, [*FAST, "--type", "training", "--", PY, name])
    assert ran.code == 0
    assert "NO METRIC" in ran.out
    assert "NO METRIC" in (ran.run_dir / "experiment_result.md").read_text()


def test_a_python_command_runs_unbuffered_and_the_record_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    body = "import os\nprint(os.environ.get('PYTHONUNBUFFERED'))\n"
    name = script(tmp_path, "env_probe.py", body)
    ran = run_exec(tmp_path, [*FAST, "--", PY, name])
    assert (ran.run_dir / "stdout.log").read_text() == "1\n"
    started = next(e for e in ran.events() if e["kind"] == "run_started")
    assert started["env_added"] == {"PYTHONUNBUFFERED": "1"}


def test_notify_runs_the_users_command_on_each_alert_and_at_the_end(tmp_path: Path) -> None:
    name = script(tmp_path, "hang.py", "import time\nprint('start', flush=True)\ntime.sleep(1.2)\n")
    log = tmp_path / "notes.txt"
    notify = (
        f'echo "$CODE_RUNNER_NOTIFY_EVENT|$CODE_RUNNER_ALERT|$CODE_RUNNER_STATE|'
        f'$CODE_RUNNER_NOTIFY_TEXT" >> {log}'
    )
    ran = run_exec(tmp_path, [*FAST, "--stall-checks", "2", "--notify", notify, "--", PY, name])
    assert ran.code == 0, ran.err
    notes = log.read_text().splitlines()
    assert notes[0].startswith("alert|STALL_SUSPECTED||[STALL_SUSPECTED]")
    assert notes[-1].startswith("finished||completed|COMPLETED (exit 0)")
    assert [e["exit_code"] for e in ran.events() if e["kind"] == "notified"] == [0] * len(notes)
