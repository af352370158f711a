"""code-runner against mini-swe-agent: the same task, the same scripted model, side by side.

A calc repo whose test fails (`add` subtracts). The model's answers are scripted: 24 turns,
each one bash command (read the code, run the failing test, fix it with `sed`, run the test
again, look around), then a closing turn. Both agents run as their command-line tools,
cold, against the same scripted model server on 127.0.0.1 (code_runner.testing, one
server per run, `TCP_NODELAY` on): `code-runner run task.json` through its `openai`
backend (streamed chat completions), and mini-swe-agent's `mini` (yolo, exit at once)
through litellm (a plain chat completion). The two are interleaved (mini, code-runner,
mini, ...) after one warm-up each, and the medians are printed with their ratio:

- the whole run, launch to exit;
- start-up: launch to the first model request;
- per turn: the first model request to the last, over the turns between (the run's
  total minus its start-up and its finish);
- finish: the last model request to exit (code-runner: the DoD on the patch, the audit,
  the export and the record; mini: its closing `echo`, its trajectory and its exit);
- per turn less the command alone: the same commands by a bare `bash -c`, timed in the
  same run (what each agent costs around a command: model call, loop, sandbox);
- peak RSS of the largest process of each (`wait4`).

mini-swe-agent is never a dependency of code-runner: give its `mini` from a throwaway venv
(`python3 -m venv /tmp/mini && /tmp/mini/bin/pip install mini-swe-agent`).

`--light` keeps the fix and makes the other 23 commands `true N`, so a turn is the agents'
own cost around one command (the speed table's "whole turn with one sandboxed command").

    python bench/vs_mini.py --mini /tmp/mini/bin/mini [--repeat 5] [--light]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import overhead  # bench/overhead.py: the calc repo and its DoD
from bench_env import executable, positive_int

from code_runner.record.result import load_result
from code_runner.testing.chat_completions import ChatCompletions, Turn, call
from code_runner.testing.scripted_server import Raw, ScriptedServer

# Every command differs from the others: code-runner answers a repeated command from
# what it already ran, without running it again.
COMMANDS = [
    "ls -la",
    "cat calc.py",
    "cat test_calc.py",
    "python3 -m unittest -q test_calc",
    "grep -n 'a - b' calc.py",
    "wc -l calc.py test_calc.py",
    "nl -ba calc.py",
    "sed -i 's/a - b/a + b/' calc.py",
    "sed -n 2p calc.py",
    "python3 -m unittest test_calc",
    "python3 -c 'import calc; print(calc.add(2, 3))'",
    "grep -rn 'def add' --include=*.py .",
    "head -n 2 calc.py",
    "tail -n 3 test_calc.py",
    "python3 -m py_compile calc.py",
    "find . -name '*.py' -not -path './.git/*'",
    "md5sum calc.py",
    "stat -c %s calc.py",
    "cat .gitignore",
    "python3 -m unittest -v test_calc",
    "grep -c return calc.py",
    "python3 -c 'import calc; assert calc.add(-1, 1) == 0'",
    "ls -la __pycache__",
    "sort calc.py",
]
# --light: the fix, then commands that cost next to nothing (`true N`), so a turn is the
# agent's own cost around one command: the issue's "whole turn with one sandboxed command"
LIGHT = [COMMANDS[7], *(f"true {i}" for i in range(1, len(COMMANDS)))]
# one PATH for both agents and the floor: `python3` is the same binary everywhere (no
# version-manager shim on one side only)
PATH = "/usr/local/bin:/usr/bin:/bin"
PROMPT = "The test in test_calc.py fails. Fix calc.py so that it passes."
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

ONLY_OURS = (
    "code-runner, not mini: a disposable workspace over the repo (the source never "
    "written); each command in a sandbox (bwrap: its own HOME and TMPDIR, no network, "
    "cgroup limits, nothing outlives it); the DoD run on base and on the patch; an audit "
    "of every change against the allowlist; the patch exported; a record (result.json, "
    "events, the transcript) written."
)
ONLY_MINI = (
    "mini, not code-runner: each command straight in the repo, no sandbox, no workspace, "
    "no DoD or audit; its trajectory written after every step (and once more at the end); "
    "its model call is not streamed; its closing turn runs one more command (`echo "
    "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) where code-runner's closing turn is text."
)


@dataclass
class Sample:
    total_s: float
    startup_s: float
    turn_s: float
    finish_s: float
    rss_mib: float


def _completion(n: int, command: str) -> Raw:
    """One non-streamed chat completion with one `bash` tool call, as litellm reads it."""
    function = {"name": "bash", "arguments": json.dumps({"command": command})}
    tool_call = {"id": f"call_{n}", "type": "function", "function": function}
    message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    body = {
        "id": f"chatcmpl-mini-{n}",
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }
    return Raw([json.dumps(body).encode()], content_type="application/json")


def _launch(
    argv: list[str], cwd: Path, env: dict[str, str], server: ScriptedServer, log: Path
) -> Sample:
    """Run `argv` to its end; its timings against the server's request log, and its peak RSS."""
    with log.open("wb") as out:
        started = time.monotonic()
        child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        ended = time.monotonic()
    child.returncode = os.waitstatus_to_exitcode(status)
    requests = server.stream_requests()
    if child.returncode != 0 or len(requests) != len(server.steps):
        tail = log.read_text(errors="replace")[-2000:]
        raise SystemExit(
            f"{argv[0]} exited {child.returncode} after {len(requests)} model requests "
            f"(expected {len(server.steps)}); its output ends:\n{tail}"
        )
    first, last = requests[0].received_at, requests[-1].received_at
    return Sample(
        total_s=ended - started,
        startup_s=first - started,
        turn_s=(last - first) / (len(requests) - 1),
        finish_s=ended - last,
        rss_mib=usage.ru_maxrss / 1024,
    )


def _repo(root: Path, name: str) -> Path:
    """A fresh copy of the calc repo (its test failing), made before the clock starts."""
    repo = root / name
    subprocess.run(
        ["git", "clone", "-q", str(root / "repo-0"), str(repo)], check=True, capture_output=True
    )
    return repo


def run_mini(mini: str, root: Path, n: int, commands: list[str]) -> tuple[Sample, list[int]]:
    repo = _repo(root, f"mini{n}")
    steps = [_completion(i, c) for i, c in enumerate([*commands, SUBMIT])]
    with ScriptedServer(ChatCompletions(), steps) as server:
        config = root / f"mini{n}.yaml"  # JSON is YAML
        config.write_text(
            json.dumps(
                {
                    "model": {
                        "model_class": "litellm",
                        "model_name": "openai/m",
                        "cost_tracking": "ignore_errors",
                        "model_kwargs": {
                            "api_base": server.base_url,
                            "api_key": "dummy",
                            "drop_params": True,
                        },
                    },
                    "environment": {"cwd": str(repo)},
                    "agent": {"mode": "yolo", "confirm_exit": False, "cost_limit": 0},
                }
            )
        )
        env = {
            **os.environ,
            "PATH": PATH,
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": str(root / "mini-config"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price list at start
        }
        trajectory = root / f"mini{n}.traj.json"
        argv = [mini, "-y", "--exit-immediately", "-c", "mini.yaml", "-c", str(config)]
        argv += ["-t", PROMPT, "-o", str(trajectory)]
        sample = _launch(argv, repo, env, server, root / f"mini{n}.log")
    saved = json.loads(trajectory.read_text())
    exit_status = saved["info"]["exit_status"]
    observations = [m["content"] for m in saved["messages"] if m["role"] == "tool"]
    codes = [json.loads(text)["returncode"] for text in observations[: len(commands)]]
    if exit_status != "Submitted" or "a + b" not in (repo / "calc.py").read_text():
        raise SystemExit(f"mini did not fix calc.py: exit status {exit_status}")
    shutil.rmtree(repo)
    return sample, codes


def run_ours(
    code_runner: str, root: Path, n: int, commands: list[str]
) -> tuple[Sample, str, list[int]]:
    steps = [Turn(tool_calls=[call("run_command", command=c)]) for c in commands]
    with ScriptedServer(ChatCompletions(), [*steps, Turn(content="done")]) as server:
        config = root / f"ours{n}.toml"
        config.write_text(
            f"[budget]\nturns_per_round = {len(commands) + 5}\n[backends.bench]\n"
            f'base_url = "{server.base_url}"\nmodel = "m"\napi_key_env = ""\n'
        )
        out = root / f"out{n}"
        task = {
            "task_id": f"vs-mini-{n}",
            "title": "fix add",
            "prompt": PROMPT,
            "backend": "bench",
            "cwd": str(root / "repo-0"),
            "output_dir": str(out),
            "allowlist": ["calc.py"],
            "definition_of_done": {"command": overhead.DOD, "assertion": "exit_code == 0"},
            "max_rounds": 1,
        }
        spec = root / f"task{n}.json"
        spec.write_text(json.dumps(task))
        env = {**os.environ, "PATH": PATH, "CODE_RUNNER_CONFIG": str(config)}
        argv = [code_runner, "run", str(spec)]
        sample = _launch(argv, root, env, server, root / f"ours{n}.log")
    result = load_result(out / f"vs-mini-{n}.result.json")
    if result.status != "passed":
        raise SystemExit(f"code-runner did not pass: {result.status} ({result.reason})")
    sandbox = str((result.sandbox or {}).get("kind", "none"))
    events = [json.loads(line) for line in (out / f"vs-mini-{n}.events.jsonl").open()]
    codes = [
        e["details"]["exit_code"]
        for e in events
        if e["kind"] == "tool_result" and e["name"] == "run_command"
    ]
    shutil.rmtree(out)
    return sample, sandbox, codes


def run_bare(root: Path, n: int, commands: list[str]) -> float:
    """The floor of a turn's command: the same commands by a bare `bash -c` in a fresh
    clone, one after another; the mean time of one."""
    repo = _repo(root, f"bare{n}")
    started = time.perf_counter()
    for command in commands:
        argv = ["bash", "-c", command]
        env = {**os.environ, "PATH": PATH}
        subprocess.run(argv, cwd=repo, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    shutil.rmtree(repo)
    return elapsed / len(commands)


def _report(mini: list[Sample], ours: list[Sample], bare: list[float], sandbox: str) -> None:
    print(f"{'median of':34} {'code-runner':>12} {'mini':>12} {'cr/mini':>8}")
    rows = [
        ("whole run (launch to exit)", "total_s", 1000, "ms"),
        ("  start-up (to the first request)", "startup_s", 1000, "ms"),
        ("  per turn (first to last request)", "turn_s", 1000, "ms"),
        ("  finish (last request to exit)", "finish_s", 1000, "ms"),
        ("peak RSS (largest process)", "rss_mib", 1, "MiB"),
    ]
    for what, field, scale, unit in rows:
        a = statistics.median(getattr(s, field) for s in ours) * scale
        b = statistics.median(getattr(s, field) for s in mini) * scale
        print(f"{what:34} {a:9.1f} {unit:3}{b:9.1f} {unit:3}{a / b:7.2f}x")
        if field == "turn_s":
            floor = statistics.median(bare)
            a, b = a - floor * scale, b - floor * scale
            print(
                f"{'    less the command alone':34} {a:9.1f} {unit:3}{b:9.1f} {unit:3}{a / b:7.2f}x"
            )
            print(f"{'    (the command alone: bash -c)':34} {floor * scale:9.1f} {unit}")
    print(f"\ncode-runner's sandbox: {sandbox}")
    print(ONLY_OURS)
    print(ONLY_MINI)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=positive_int, default=5, help="runs of each, interleaved")
    parser.add_argument(
        "--mini",
        type=executable,
        default=shutil.which("mini"),
        help="mini-swe-agent's `mini` (a throwaway venv: pip install mini-swe-agent)",
    )
    parser.add_argument(
        "--light", action="store_true", help="the fix, then 23 turns of `true N` (no work)"
    )
    default_tmp = "/dev/shm" if os.path.isdir("/dev/shm") else None
    parser.add_argument("--tmp", default=default_tmp, help="where the repos and runs live")
    args = parser.parse_args()
    if not args.mini:
        parser.error("no `mini` on PATH: give --mini /path/to/venv/bin/mini")
    code_runner = str(Path(sys.executable).with_name("code-runner"))
    load = os.getloadavg()
    commands = LIGHT if args.light else COMMANDS
    print(f"{len(commands)} command turns + a closing turn; --repeat {args.repeat}")
    print(f"commands: {'; '.join(shlex.quote(c) for c in commands[:4])}; ...")
    with tempfile.TemporaryDirectory(prefix="vs-mini-", dir=args.tmp) as scratch:
        root = Path(scratch)
        os.environ["CODE_RUNNER_STATE_DIR"] = str(root / "state")
        overhead.make_repo(root, 0)
        # warm-up (page cache, imports, caches), and a check: each command ended alike
        _, theirs = run_mini(args.mini, root, -1, commands)
        _, _, codes = run_ours(code_runner, root, -1, commands)
        if codes != theirs:
            raise SystemExit(f"the commands' exit codes differ: code-runner {codes}, mini {theirs}")
        mini: list[Sample] = []
        ours: list[Sample] = []
        bare: list[float] = []
        sandbox = ""
        for n in range(args.repeat):
            mini.append(run_mini(args.mini, root, n, commands)[0])
            sample, sandbox, _ = run_ours(code_runner, root, n, commands)
            ours.append(sample)
            bare.append(run_bare(root, n, commands))
    after = os.getloadavg()
    _report(mini, ours, bare, sandbox)
    print(f"load average: {load[0]:.2f} at the start, {after[0]:.2f} at the end (1 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
