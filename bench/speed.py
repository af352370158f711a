"""Speed at the limit: each figure of the speed table against its floor, measured in this run.

Every row times code-runner and its floor interleaved (ours, floor, ours, floor, ...) so
machine noise hits both alike, and prints the medians and their ratio:

- `proc.run` of `true` (no sandbox) against a bare fork/exec/wait of it, with a crowd of
  idle processes on the machine (`--crowd`), so a scan of every process would show; and
  the same as a run's command runs (its environment names the run: it joins a leaf of the
  run's cgroup, emptied when it ends and kept for the run's next command; `run_leaf.py`
  measures that join with the runner idle between commands, as in a run);
- one sandboxed command (the model's `run_command` call of `true` through the Toolbox and
  the run's sandbox, as an agent's command runs) against the same argv (`bash -c true`)
  by a bare fork/exec/wait;
- a whole turn with one sandboxed command (a real run over the scripted model server),
  against the sandboxed command alone and the model call alone;
- a cold `code-runner --help` against `python -c "import click, code_runner"`;
- one model call over loopback (the client as a run uses it, SDK and all) against httpx
  with a kept-alive connection doing the same request and decoding each chunk's JSON;
- a whole task (clone, DoD on base, one scripted edit, audit, DoD on the patch, export)
  against the same git work by hand, at each `--sizes` file count on tmpfs;
- the time to the first round (`workspace.create` and the sandbox opened) at each size,
  as an overlay over the checkout cache and as the clone it falls back to, against the
  same `clone --shared --no-checkout` and `checkout` by hand (`--tmp` for where: tmpfs
  by default, a directory on disk to measure there).

    python bench/speed.py [--repeat 15] [--sizes 1000,20000,100000] [--crowd 1500] [--only ROW]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import overhead  # bench/overhead.py: the task and its floor
from bench_env import executable, file_counts, pair, positive_int
from sandbox_overhead import _workspace

from code_runner import proc, sandbox, workspace
from code_runner.agents.model.client import OpenAIChatClient
from code_runner.agents.model.transcript import Transcript
from code_runner.config import OpenAIBackend
from code_runner.events import ListSink
from code_runner.proc import tracking
from code_runner.repo import git
from code_runner.task.paths import Allowlist
from code_runner.testing.chat_completions import ChatCompletions, Turn, call
from code_runner.testing.scripted_server import ScriptedServer
from code_runner.tools import Toolbox

ROWS: list[tuple[str, float, float, str]] = []  # what, ours (s), floor (s), target
PROC_SAMPLES = 10  # pairs per repeat in the proc.run rows


def _row(what: str, ours: float, floor: float, target: str) -> None:
    ROWS.append((what, ours, floor, target))
    print(
        f"{what:58} {ours * 1000:9.2f} ms {floor * 1000:9.2f} ms {ours / floor:6.2f}x  {target}",
        flush=True,
    )


@contextmanager
def _crowd(count: int) -> Iterator[None]:
    """`count` idle processes that are not ours (re-parented to init), for the row's life;
    each killed by its pid at the end."""
    script = f"for i in $(seq {count}); do sleep 3600 </dev/null >/dev/null 2>&1 & echo $!; done"
    out = subprocess.run(
        ["setsid", "bash", "-c", script], check=True, capture_output=True, text=True
    ).stdout
    pids = [int(pid) for pid in out.split()]
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def row_proc_run(repeat: int, crowd: int) -> None:
    env = dict(os.environ)
    env.pop(proc.RUN_ID_ENV, None)
    # as a run's command (DoD, agent command with the sandbox off) runs: its environment
    # names the run, so it joins a cgroup leaf of the run, emptied at its end
    in_run = {**env, proc.RUN_ID_ENV: f"speed-{os.getpid()}"}
    tracked = proc.describe_tracking() if tracking.hierarchy() is not None else None
    with _crowd(crowd):
        count = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
        _proc_run_row(f"proc.run of true, {count} processes on the machine", env, repeat)
        _session_cost(env, repeat)
        if tracked is None:
            print(f"{'':58} in a run: not measured, no writable cgroup here")
        else:
            _proc_run_row("  the same in a run (its own cgroup leaf)", in_run, repeat)
            print(f"{'':58} tracking: {tracked}")


def _session_cost(env: dict[str, str], repeat: int) -> None:
    """What the session of its own that `proc.run` gives a command costs by itself: a bare
    fork/exec with `setsid` against one without (where the kernel groups each session for
    the scheduler, `setsid` makes a new group, and the child waits for CPU in it)."""
    alone, floor = pair(
        lambda: subprocess.run(["true"], cwd="/", env=env, check=True, start_new_session=True),
        lambda: subprocess.run(["true"], cwd="/", env=env, check=True),
        repeat * PROC_SAMPLES,
    )
    try:
        autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        autogroup = "absent"
    print(
        f"{'':58} of which its own session: a bare fork/exec with setsid is "
        f"{(alone - floor) * 1000:+.2f} ms (sched_autogroup_enabled: {autogroup})"
    )


def _proc_run_row(what: str, env: dict[str, str], repeat: int) -> None:
    def ours() -> None:
        proc.run(["true"], cwd="/", env=env, timeout_s=30)

    def floor() -> None:
        subprocess.run(["true"], cwd="/", env=env, check=True)

    # a call is a few ms and the machine is shared: a median of `repeat` pairs would be
    # noise, so the row takes `PROC_SAMPLES` times as many (a second or two)
    samples = repeat * PROC_SAMPLES
    wall_ours, wall_floor = pair(ours, floor, samples)
    cpu = []
    for fn in (ours, floor):
        started = time.process_time()
        for _ in range(samples):
            fn()
        cpu.append((time.process_time() - started) / samples)
    _row(what, wall_ours, wall_floor, "<= floor + 1 ms")
    print(f"{'':58} over the floor: {(wall_ours - wall_floor) * 1000:.2f} ms ({samples} pairs)")
    print(
        f"{'':58} the runner's own CPU per call: {cpu[0] * 1000:.2f} ms "
        f"(bare: {cpu[1] * 1000:.2f} ms; load does not inflate it)"
    )


def row_sandboxed(repeat: int) -> None:
    """`true` as an agent's command runs: the model's `run_command` call through the
    Toolbox (validation, the command tool, the run's sandbox, the rendered reply), against
    the same argv by a bare fork/exec/wait; then `Session.run` alone (the sandbox's part)
    and a sandbox started for each command."""
    found = sandbox.probe()
    if not found.ok:
        print(f"sandboxed command: not measured, the sandbox does not work here: {found.reason}")
        return
    with tempfile.TemporaryDirectory(prefix="speed-sandbox-") as scratch:
        ws = _workspace(Path(scratch))
        env = ws.env()
        argv = proc.shell_argv("true")
        session = sandbox.open_session(
            ws, env=env, network=False, limits=sandbox.DEFAULT_LIMITS, cpu_s=60, name="speed"
        )
        with session:
            box = Toolbox(
                ws.work_tree,
                allowlist=Allowlist.parse(["a.txt"]),
                source_dir=ws.source_dir,
                env=env,
                events=ListSink(),
                wrap_argv=session.wrap,
                launch=session.run,
            )

            def tool() -> None:
                result = box.call("run_command", {"command": "true"})
                if not result.ok:
                    raise SystemExit(f"the sandboxed command failed: {result.content}")

            def bare() -> None:
                subprocess.run(argv, cwd=ws.work_tree, env=env, check=True)

            ours, floor = pair(tool, bare, repeat)
            part, floor_part = pair(
                lambda: session.run(argv, cwd=ws.work_tree, env=env, timeout_s=30), bare, repeat
            )
            # the path without a resident sandbox: a sandbox started for each command
            alone, floor_alone = pair(
                lambda: proc.run(session.wrap(argv), cwd=ws.work_tree, env=env, timeout_s=30),
                bare,
                max(5, repeat // 2),
            )
            executor = session.executor_posture()
        ws.release()
    _row("one sandboxed command (tool path) vs bare fork/exec", ours, floor, "<= 2x")
    _row("  Session.run alone (the sandbox's part)", part, floor_part, "")
    _row("  the same, a sandbox per command (before)", alone, floor_alone, "(was 11.3x)")
    print(f"{'':58} executor: {executor}")


def _client(server: ScriptedServer, root: Path) -> OpenAIChatClient:
    settings = OpenAIBackend(base_url=server.base_url, model="m", retries=0)
    return OpenAIChatClient(settings, api_key="k", transcript=Transcript(root / "t.jsonl"))


def _history(exchanges: int) -> list[dict[str, Any]]:
    """A conversation of `exchanges` tool calls, each with a 400-byte result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(exchanges):
        command = {"name": "run_command", "arguments": '{"command": "ls -la src"}'}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{n}", "type": "function", "function": command}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 400})
    return messages


def row_model_call(repeat: int, history: int = 0) -> None:
    messages = _history(history)
    turn = Turn(tool_calls=[call("run_command", command="true")])
    with (
        tempfile.TemporaryDirectory(prefix="speed-model-") as scratch,
        ScriptedServer(ChatCompletions(), [turn] * (3 * repeat + 2)) as server,
    ):
        client = _client(server, Path(scratch))
        body = client.body(messages, [])
        http = httpx2.Client(base_url=server.base_url)

        def floor() -> None:
            # what any client must do with the answer: read the whole body (the connection
            # is kept) and decode each chunk's JSON, the only way to read its content
            with http.stream("POST", "/chat/completions", json=body) as response:
                for line in response.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        json.loads(line[6:])

        ours, floor_s = pair(
            lambda: client.complete(messages, [], deadline=None, tag={"turn": 0}),
            floor,
            repeat,
        )
        # the caller's own CPU per call (the server is another thread): load barely moves it
        cpu = []
        for fn in (lambda: client.complete(messages, [], deadline=None, tag={"turn": 0}), floor):
            started = time.thread_time()
            for _ in range(repeat // 2):
                fn()
            cpu.append((time.thread_time() - started) / (repeat // 2))
        http.close()
        # the client's connections: one per call before the reuse, one for all after
        connections = getattr(server, "connections", 0) - 1  # 0: an older server
    what = "one model call over loopback vs httpx kept alive"
    _row(what + (f", {history} calls before" if history else ""), ours, floor_s, "<= 1.2x")
    print(
        f"{'':58} the client's own CPU per call: {cpu[0] * 1000:.2f} ms "
        f"(httpx: {cpu[1] * 1000:.2f} ms, {cpu[0] / cpu[1]:.2f}x)"
    )
    calls = 1 + repeat + repeat // 2
    print(f"{'':58} connections opened by the client for {calls} calls: {connections}")


def row_turn(turns: int) -> None:
    """A real run: `turns` model turns, each one sandboxed `true`, against a bare command;
    then the same run with a sandbox per command (`CODE_RUNNER_SANDBOX_RESIDENT=off`)."""
    resident: list[float] = []
    per_command: list[float] = []
    for _ in range(3):  # interleaved, as `_pair` does
        resident.append(_turn(turns))
        os.environ[sandbox.RESIDENT_ENV] = "off"
        try:
            per_command.append(_turn(turns))
        finally:
            os.environ.pop(sandbox.RESIDENT_ENV, None)
    ours, before = statistics.median(resident), statistics.median(per_command)
    bare = [0.0] * 9
    for i in range(9):
        started = time.perf_counter()
        subprocess.run(proc.shell_argv("true"), check=True)
        bare[i] = time.perf_counter() - started
    floor = statistics.median(bare)
    _row("whole turn with one sandboxed command vs bare command", ours, floor, "(see mini)")
    _row("  the same turn, a sandbox per command (before)", before, floor, "")
    _row("  the turn: resident sandbox vs a sandbox per command", ours, before, "")


def _turn(turns: int) -> float:
    """The median time per turn of one run of `turns` turns, each a sandboxed `true`."""
    with tempfile.TemporaryDirectory(prefix="speed-turn-") as scratch:
        root = Path(scratch)
        source = overhead.make_repo(root / "repo", 10)
        # a different command each turn: a repeated one is answered without running it
        steps = [Turn(tool_calls=[call("run_command", command=f"true {i}")]) for i in range(turns)]
        with ScriptedServer(ChatCompletions(), [*steps, Turn(content="done")]) as server:
            config = root / "config.toml"
            config.write_text(
                f"[budget]\nturns_per_round = {turns + 5}\n[backends.speed]\nbase_url = "
                f'"{server.base_url}"\nmodel = "m"\napi_key_env = ""\n'
            )
            os.environ["CODE_RUNNER_CONFIG"] = str(config)
            from code_runner import runner
            from code_runner.task import validate_spec_data

            task = validate_spec_data(
                {
                    "task_id": "turns",
                    "title": "turns",
                    "prompt": "run true",
                    "backend": "speed",
                    "cwd": str(source),
                    "output_dir": str(root / "out"),
                    "allowlist": ["calc.py"],
                    "definition_of_done": {"command": "false", "assertion": "exit_code == 0"},
                    "max_rounds": 1,
                },
                base_dir=root,
                source="speed",
            )
            outcome = runner.run_task(runner.preflight(task, base_dir=root))
            os.environ.pop("CODE_RUNNER_CONFIG", None)
            kind = (outcome.sandbox or {}).get("kind")
            if len(server.stream_requests()) != turns + 1 or kind != "bwrap":
                raise SystemExit(f"the turn run did not pass sandboxed: {outcome}")
            requests = server.stream_requests()
            gaps = [b.received_at - a.received_at for a, b in itertools.pairwise(requests)]
    return statistics.median(gaps[1:])  # the first gap holds round 0's DoD


def row_help(repeat: int, mini: str | None) -> None:
    py = sys.executable
    ours, floor = pair(
        lambda: subprocess.run(
            [py, "-m", "code_runner", "--help"], check=True, stdout=subprocess.DEVNULL
        ),
        lambda: subprocess.run([py, "-c", "import click, code_runner"], check=True),
        repeat,
    )
    _row("cold code-runner --help vs import click, code_runner", ours, floor, "<= 0.33x mini")
    if mini:
        peer, _ = pair(
            lambda: subprocess.run([mini, "--help"], check=True, stdout=subprocess.DEVNULL),
            lambda: None,
            max(3, repeat // 3),
        )
        _row("cold code-runner --help vs mini --help", ours, peer, "<= 0.33x")


def row_task(repeat: int, sizes: list[int], tmp: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="speed-task-", dir=tmp) as scratch:
        root = Path(scratch)
        os.environ["CODE_RUNNER_STATE_DIR"] = str(root / "state")
        counter = iter(range(100_000))
        for files in sizes:
            repo = overhead.make_repo(root / f"r{files}", files)
            ours, floor = pair(
                lambda: overhead.time_runner(root, repo, next(counter)),  # noqa: B023
                lambda: overhead.time_floor(root, repo),  # noqa: B023
                repeat,
            )
            _row(f"task vs the same git work by hand, {files} files, tmpfs", ours, floor, "<= 1.3x")


def row_create(repeat: int, sizes: list[int], tmp: str | None) -> None:
    """Time to the first agent round: the workspace made and the sandbox opened on it (as a
    root runner does: its tree the sandbox uid's), then released, against the same clone and
    checkout by hand, at each size: the overlay over the checkout cache (its first build
    printed apart), and the clone it falls back to (`CODE_RUNNER_WORKSPACE=clone`)."""
    for files in sizes:
        with tempfile.TemporaryDirectory(prefix="speed-create-", dir=tmp) as scratch:
            root = Path(scratch)
            os.environ["CODE_RUNNER_STATE_DIR"] = str(root / "state")
            repo = overhead.make_repo(root / "r", files)
            _create_rows(root, repo, files, repeat, tmp or "the default tmp")


def _create_rows(root: Path, repo: Path, files: int, repeat: int, where: str) -> None:
    source = git.open_source(repo)
    head = source.out("rev-parse", "HEAD")
    counter = iter(range(100_000))
    kinds: set[str] = set()

    def create() -> None:
        identity = sandbox.new_identity() if os.geteuid() == 0 else None
        extra: dict[str, Any] = {"owner": (identity.uid, identity.gid)} if identity else {}
        ws = workspace.create(source, head, run_id=f"speed{next(counter)}", **extra)
        kinds.add(getattr(ws, "kind", "clone"))
        session = sandbox.open_session(
            ws,
            env=ws.env(),
            network=False,
            limits=sandbox.DEFAULT_LIMITS,
            cpu_s=60,
            name="speed",
            **({"identity": identity} if identity else {}),
        )
        session.open()
        session.close()
        ws.release()

    def by_hand() -> None:
        ws = root / "floor-ws"
        overhead.git(
            root,
            "clone",
            "-q",
            "--shared",
            "--no-checkout",
            f"--separate-git-dir={ws / 'git'}",
            str(repo),
            str(ws / "wt"),
        )
        overhead.git(ws / "wt", "checkout", "-q", "--detach", "HEAD")
        shutil.rmtree(ws)

    started = time.perf_counter()
    create()  # the first one builds the checkout cache's entry
    first = time.perf_counter() - started
    ours, floor = pair(create, by_hand, repeat)
    kind = "/".join(sorted(kinds))
    _row(f"workspace ({kind}) + sandbox open, {files} files", ours, floor, "< 0.5 s")
    print(f"{'':58} the first, building the cache: {first * 1000:.0f} ms; on {where}")
    os.environ["CODE_RUNNER_WORKSPACE"] = "clone"
    try:
        kinds.clear()
        ours, floor = pair(create, by_hand, repeat)
    finally:
        os.environ.pop("CODE_RUNNER_WORKSPACE")
    _row(f"workspace ({'/'.join(sorted(kinds))}) + sandbox open, {files} files", ours, floor, "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=positive_int, default=15, help="pairs per row (tasks: 1/3)"
    )
    parser.add_argument(
        "--sizes", type=file_counts, default="1000,20000,100000", help="file counts of the task"
    )
    parser.add_argument(
        "--crowd", type=positive_int, default=1500, help="idle processes for proc.run"
    )
    parser.add_argument("--turns", type=positive_int, default=24)
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="earlier tool calls in the model row's conversation (0: one user message)",
    )
    parser.add_argument(
        "--mini",
        type=executable,
        default=shutil.which("mini"),
        help="mini-swe-agent's `mini` (a throwaway venv: pip install mini-swe-agent)",
    )
    parser.add_argument(
        "--only", choices=["proc", "sandbox", "turn", "help", "model", "task", "create"]
    )
    default_tmp = "/dev/shm" if os.path.isdir("/dev/shm") else None
    parser.add_argument("--tmp", default=default_tmp, help="where task and create rows work")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="speed-state-") as state:
        os.environ["CODE_RUNNER_STATE_DIR"] = state
        print(f"{'what':58} {'ours':>12} {'floor':>12} {'ratio':>7}  target")
        rows: dict[str, Callable[[], None]] = {
            "proc": lambda: row_proc_run(args.repeat * 4, args.crowd),
            "sandbox": lambda: row_sandboxed(args.repeat * 2),
            "turn": lambda: row_turn(args.turns),
            "help": lambda: row_help(args.repeat, args.mini),
            "model": lambda: row_model_call(args.repeat * 4, args.history),
            "task": lambda: row_task(max(3, args.repeat // 5), args.sizes, args.tmp),
            "create": lambda: row_create(max(3, args.repeat // 3), args.sizes, args.tmp),
        }
        for name, fn in rows.items():
            if args.only in (None, name):
                fn()
    return 0


if __name__ == "__main__":
    sys.exit(main())
