"""What does the model loop itself cost per model turn?

A 20-turn scripted trajectory (each turn one `run_command`, then a closing answer) runs
through the whole `openai` backend: the real SDK over real HTTP/SSE to the scripted
server on 127.0.0.1, the toolbox, events and the transcript. For each turn the loop's own
overhead is the time between two requests reaching the server, minus the server's time
answering the first, minus the tool subprocesses' time in between. The same trajectory's
round (all turns) is also set against running its 20 commands directly, in the same run.

    python bench/loop.py [--turns 20] [--repeat 3]

Target: under 5 ms of loop overhead per turn (median). Besides the wall-clock figure (which
a busy machine inflates) it prints the loop's CPU time per turn outside tool calls, split
into the model call (SDK, HTTP, SSE parsing, transcript) and the loop's own logic.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from code_runner import files, proc, runner
from code_runner.agents.model.client import OpenAIChatClient
from code_runner.agents.model.loop import ModelLoopAgent
from code_runner.task import validate_spec_data
from code_runner.testing.chat_completions import ChatCompletions, Turn, call
from code_runner.testing.scripted_server import ScriptedServer
from code_runner.tools import Toolbox

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import GIT_ENV  # bench/, beside this file

COMMAND = "python3 -c 'import calc'"
DOD = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"


def make_repo(repo: Path) -> Path:
    repo.mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True)
    return repo


ROUND_CPU_S: list[float] = []
TOOL_CPU_S: list[float] = []
MODEL_CPU_S: list[float] = []


def _timed_round(original: Any) -> Any:
    """The loop's own CPU time: this thread only (not the server's threads, not the tools'
    subprocesses), so it is not inflated when the machine is busy."""

    def run_round(self: ModelLoopAgent, *args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            ROUND_CPU_S.append(time.thread_time() - started)

    return run_round


def _cpu_into(original: Any, into: list[float]) -> Any:
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            into.append(time.thread_time() - started)

    return timed


ModelLoopAgent.run_round = _timed_round(ModelLoopAgent.run_round)  # type: ignore[method-assign]
Toolbox.call = _cpu_into(Toolbox.call, TOOL_CPU_S)  # type: ignore[method-assign]
OpenAIChatClient.complete = _cpu_into(OpenAIChatClient.complete, MODEL_CPU_S)  # type: ignore[method-assign]


def one_run(root: Path, turns: int) -> dict[str, Any]:
    TOOL_CPU_S.clear()
    MODEL_CPU_S.clear()
    source = make_repo(root / "source")
    steps = [
        Turn(tool_calls=[call("run_command", command=f"{COMMAND} # {i}")]) for i in range(turns)
    ]
    with ScriptedServer(ChatCompletions(), [*steps, Turn(content="done")]) as server:
        config = root / "config.toml"
        config.write_text(
            f"[budget]\nturns_per_round = {turns + 5}\n[backends.bench]\nbase_url = "
            f'"{server.base_url}"\nmodel = "m"\napi_key_env = ""\n'
        )
        os.environ["CODE_RUNNER_CONFIG"] = str(config)
        task = validate_spec_data(
            {
                "task_id": "loop",
                "title": "loop bench",
                "prompt": "run the command",
                "backend": "bench",
                "cwd": str(source),
                "output_dir": str(root / "out"),
                "allowlist": ["calc.py"],
                "definition_of_done": {"command": DOD, "assertion": "exit_code == 0"},
                "max_rounds": 1,
            },
            base_dir=root,
            source="bench",
        )
        pre = runner.preflight(task, base_dir=root)
        runner.run_task(pre)
        requests = server.stream_requests()
    events = files.read_jsonl(root / "out" / "loop.events.jsonl")
    tool_s = [
        e["details"]["duration_s"]
        for e in events
        if e["kind"] == "tool_result" and e["name"] == "run_command"
    ]
    overheads = [
        (requests[i + 1].received_at - requests[i].received_at) - requests[i].server_s - tool_s[i]
        for i in range(turns)
    ]
    round_s = requests[-1].received_at + requests[-1].server_s - requests[0].received_at
    started = time.monotonic()
    for i in range(turns):  # the same commands, run directly, one after another
        proc.run(
            proc.shell_argv(f"{COMMAND} # {i}"), cwd=source, env=dict(os.environ), timeout_s=60
        )
    direct_s = time.monotonic() - started
    return {
        "overheads_s": overheads,
        "round_s": round_s,
        "direct_s": direct_s,
        "cpu_per_turn_s": (ROUND_CPU_S[-1] - sum(TOOL_CPU_S)) / (turns + 1),
        "tool_cpu_per_call_s": sum(TOOL_CPU_S) / len(TOOL_CPU_S),
        "model_call_cpu_s": sum(MODEL_CPU_S) / len(MODEL_CPU_S),
        "tool_s": sum(tool_s),
        "server_s": sum(r.server_s for r in requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CODE_RUNNER_STATE_DIR"] = str(Path(tmp, "state"))
        for index in range(args.repeat):
            runs.append(one_run(Path(tmp, f"run{index}"), args.turns))
    per_turn = sorted(o for run in runs for o in run["overheads_s"])
    first_turns = [run["overheads_s"][0] for run in runs]
    round_s = statistics.median(r["round_s"] for r in runs)
    direct_s = statistics.median(r["direct_s"] for r in runs)
    report = {
        "turns": args.turns,
        "repeat": args.repeat,
        "loop_overhead_ms_per_turn_median": round(statistics.median(per_turn) * 1000, 2),
        "loop_overhead_ms_per_turn_p90": round(per_turn[int(len(per_turn) * 0.9)] * 1000, 2),
        "loop_overhead_ms_first_turn_median": round(statistics.median(first_turns) * 1000, 2),
        "loop_cpu_ms_per_turn_median (outside tool calls)": round(
            statistics.median(r["cpu_per_turn_s"] for r in runs) * 1000, 2
        ),
        "of which model call cpu_ms (SDK, HTTP, SSE, transcript)": round(
            statistics.median(r["model_call_cpu_s"] for r in runs) * 1000, 2
        ),
        "of which the loop's own logic cpu_ms (prompt, budget, dispatch, events)": round(
            statistics.median(r["cpu_per_turn_s"] - r["model_call_cpu_s"] for r in runs) * 1000,
            2,
        ),
        "tool_call_cpu_ms_median (toolbox, sandbox, proc; not the loop)": round(
            statistics.median(r["tool_cpu_per_call_s"] for r in runs) * 1000, 2
        ),
        "round_s_median": round(round_s, 3),
        "direct_commands_s_median": round(direct_s, 3),
        "round_vs_direct_ratio": round(round_s / direct_s, 2),
        "server_s_median": round(statistics.median(r["server_s"] for r in runs), 3),
        "target_ms_per_turn": 5.0,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
