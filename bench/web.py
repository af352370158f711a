"""The dashboard's two numbers: the runs page over 1,000 runs, and how long an event takes
from `events.jsonl` to the browser.

1. One real task run (`code-runner demo`) and one real exec run are made, then copied into
   1,000 run dirs (800 task, 200 exec). A real `code-runner serve` answers `GET /`: the first
   request reads every record, later ones only what changed. Target: under 200 ms.
2. A copy of the task record is marked running; its page is opened in Chromium (headless,
   Playwright); events are appended to its `events.jsonl` one at a time, and the browser
   notes (MutationObserver) when each row appears. Target: under 500 ms.

    python bench/web.py [--runs 1000] [--events 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

PY = sys.executable
CHROMIUM = "/usr/bin/chromium"
METRICS = "import math\nfor i in range(50):\n    print(f'epoch {i} loss={math.exp(-i/10):.4f}')\n"


def _make_records(base: Path) -> tuple[Path, Path]:
    """(a finished task run's output dir, a finished exec run dir), made by the real CLI."""
    env = os.environ | {"CODE_RUNNER_MIN_INTERVAL_S": "0.05", "NO_COLOR": "1"}
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run([PY, "-m", "code_runner", "demo", "--dir", str(base / "demo")], **quiet)
    found = sorted((base / "demo").rglob("*.result.json"))
    if not found:
        raise SystemExit("the demo made no run record")
    (base / "metrics.py").write_text(METRICS)
    subprocess.run(
        [
            *(PY, "-m", "code_runner", "exec", "--yes", "--interval", "0.1"),
            *("--run-dir", str(base / "exec"), "--cwd", str(base), "--", PY, "metrics.py"),
        ],
        check=True,
        **quiet,
    )
    return found[0].parent, base / "exec"


def _serve(root: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [PY, "-m", "code_runner", "serve", "--runs", str(root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.split("code-runner dashboard: ", 1)[1].strip()


def _get_ms(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        response.read()
    return (time.perf_counter() - started) * 1000


def runs_page(base: Path, task_dir: Path, exec_dir: Path, count: int) -> None:
    root = base / "many"
    for i in range(count):
        source = exec_dir if i % 5 == 4 else task_dir
        shutil.copytree(source, root / f"run-{i:04d}", ignore=shutil.ignore_patterns("*.lock"))
    process, url = _serve(root)
    try:
        cold = _get_ms(url)
        warm = [_get_ms(url) for _ in range(20)]
        with urllib.request.urlopen(url, timeout=60) as response:
            rows = response.read().decode().count('<tr class="kind-')
    finally:
        process.terminate()
        process.wait()
    print(f"runs page, {rows} runs: first request {cold:.0f} ms (reads every record)")
    print(
        f"runs page, {rows} runs: median {statistics.median(warm):.0f} ms, "
        f"max {max(warm):.0f} ms over 20 requests (target < 200 ms)"
    )


def event_latency(base: Path, task_dir: Path, events: int) -> None:
    root = base / "live"
    live = root / "out"
    shutil.copytree(task_dir, live, ignore=shutil.ignore_patterns("*.lock"))
    status_path = next(live.glob("*.status.json"))
    status = json.loads(status_path.read_text())
    status.update(state="agent", terminal=False, step="round 1: agent")
    status_path.write_text(json.dumps(status))
    task_id = status_path.name.removesuffix(".status.json")
    events_path = live / f"{task_id}.events.jsonl"
    process, url = _serve(root)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox"], headless=True
            )
            page = browser.new_page()
            page.goto(f"{url}task/0/out/{task_id}")
            page.wait_for_timeout(1000)  # the stream is open
            page.evaluate(
                "() => { window.seen = []; new MutationObserver(() => {"
                " document.querySelectorAll('#events tr.fresh:not([data-t])').forEach(r => {"
                " r.dataset.t = '1'; window.seen.push(Date.now()); }); })"
                ".observe(document.querySelector('#events tbody'), {childList: true}); }"
            )
            written: list[float] = []
            for i in range(events):
                line = {"kind": "bench", "seq": 10_000 + i, "round": 1, "summary": f"event {i}"}
                with events_path.open("a") as handle:
                    written.append(time.time() * 1000)
                    handle.write(json.dumps(line) + "\n")
                time.sleep(0.2)
            page.wait_for_function(f"() => window.seen.length >= {events}", timeout=10_000)
            seen: list[float] = page.evaluate("() => window.seen")
            browser.close()
    finally:
        process.terminate()
        process.wait()
    latency = [s - w for s, w in zip(seen, written, strict=True)]
    print(
        f"event to browser, {events} events: median {statistics.median(latency):.0f} ms, "
        f"max {max(latency):.0f} ms (target < 500 ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--events", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        base = Path(tmp)
        task_dir, exec_dir = _make_records(base)
        runs_page(base, task_dir, exec_dir, args.runs)
        event_latency(base, task_dir, args.events)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
