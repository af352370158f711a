"""`--tmux --interactive`: Claude Code's interactive UI in a real tmux pane (a real
pseudo-terminal), ended by the worker's sentinel file, with exit 0 / 125 / 1.

The prompt's paste and the exit mapping are shown with a stand-in UI in the same pane
launcher (a program that turns bracketed paste on, reads the pasted prompt, writes the
block and then waits for the `/exit` the launcher types into its terminal); the whole path
with the real Claude Code against the scripted server, whose first request carries the
pasted prompt.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from code_runner.agents.cli_agents.tmux import PaneFiles, TmuxPane
from code_runner.testing import anthropic_messages as msgs
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.agent_clis import backend, prepare, run, success_block, wait_for
from tests.helpers.tasks import run_cli

pytestmark = pytest.mark.integration

UI = r"""
import os, sys
sys.stdout.write("\x1b[?2004h")  # ready: bracketed paste on, as Claude Code's UI does
sys.stdout.flush()
pasted = []
for line in sys.stdin:  # the pane's terminal: the launcher pastes the prompt here
    pasted.append(line)
    if "\x1b[201~" in line:
        break
with open(os.environ["PASTED"], "w") as f:
    f.write("".join(pasted))
with open(os.environ["CODE_RUNNER_RESULT_FILE"], "w") as f:
    f.write(sys.argv[1])
if "RESULT_STATUS" not in sys.argv[1]:
    sys.exit(0)  # a UI a person quit before any block was written
print("block written; waiting for /exit", flush=True)
for line in sys.stdin:  # the launcher types /exit here
    if line.strip() == "/exit":
        sys.exit(0)
"""
PROMPT = "Fix calc.py.\n\n## Ending\nWrite the block, then stop.\n"


def _pane_exit(tmp_path: Path, block: str) -> int:
    files = PaneFiles(
        script=tmp_path / "launch.sh",
        go=tmp_path / "go",
        exit_code=tmp_path / "exit",
        stdout=tmp_path / "out",
        stderr=tmp_path / "err",
        terminal_log=tmp_path / "terminal.log",
        info=tmp_path / "tmux.json",
        result_file=tmp_path / "result.txt",
        prompt=tmp_path / "prompt.md",
    )
    files.terminal_log.write_text("an earlier round\x1b[?2004h\n")  # not this round's UI
    assert files.prompt is not None
    files.prompt.write_text(PROMPT)
    ui = tmp_path / "ui.py"
    ui.write_text(UI)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "CODE_RUNNER_RESULT_FILE": str(files.result_file),
        "PASTED": str(tmp_path / "pasted"),
    }
    pane = TmuxPane.start(
        (sys.executable, str(ui), block),
        cwd=tmp_path,
        env=env,
        files=files,
        socket=tmp_path / "t.sock",
        banner="test",
        info={},
    )
    try:
        wait_for(lambda: pane.exit_code() is not None, 30, "the pane to end")
        code = pane.exit_code()
    finally:
        pane.kill(0.5)
    assert code is not None
    # the prompt arrived as one bracketed paste, then Enter
    pasted = (tmp_path / "pasted").read_text().replace("\r", "\n")
    assert pasted == "\x1b[200~" + PROMPT + "\x1b[201~\n", repr(pasted)
    return code


@pytest.mark.parametrize(
    ("status", "code"),
    [("SUCCESS", 0), ("PARTIAL", 0), ("BLOCKED_NEEDS_DECISION", 125), ("FAILED", 1), ("", 1)],
)
def test_the_sentinel_block_ends_the_pane_with_its_exit_code(
    tmp_path: Path, status: str, code: int
) -> None:
    block = f"RESULT_STATUS: {status}\nSUMMARY: x\n" if status else "no block here\n"
    assert _pane_exit(tmp_path, block) == code


def test_interactive_needs_tmux_and_claude(tmp_path: Path) -> None:
    cli_run = prepare(tmp_path, f"command:-- {shlex.quote(sys.executable)} -c pass")
    done = run_cli("run", str(cli_run.spec_path), "--tmux", "--interactive")
    assert done.returncode != 0 and "needs --tmux and a claude-cli backend" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.e2e
def test_claude_code_interactive_in_the_pane_ends_through_its_sentinel(
    tmp_path: Path, claude: str
) -> None:
    block = success_block()
    write_block = f"cat > \"$CODE_RUNNER_RESULT_FILE\" <<'EOF'\n{block}EOF"
    steps = [
        msgs.say("Fix the calculator"),  # the UI's title request comes first
        *msgs.edit_file("calc.py", "return a - b", "return a + b"),
        msgs.tool(
            "Edit",
            file_path="calc.py",
            old_string="def mul(a, b):\n    return a + b",
            new_string="def mul(a, b):\n    return a * b",
        ),
        msgs.bash(write_block),
        msgs.say("Done: the block is in the result file."),
    ]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = prepare(tmp_path, backend("claude-cli", server.origin))
        run(cli_run, "--tmux", "--interactive")
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    # the prompt was pasted into the UI whole, not passed on its command line
    prompt = cli_run.file("agent/round-1.prompt.md").read_text()
    sent = [msgs.user_text(r.body) for r in requests]
    assert any(prompt.strip() in text.replace("\r", "\n") for text in sent), sent[:2]
    result = cli_run.result()
    assert result["status"] == "passed"
    assert result["result_contract"]["claimed_status"] == "SUCCESS"
    assert result["result_contract"]["mismatch"] is False
    finished = [e for e in cli_run.events() if e["kind"] == "cli_finished"][-1]
    assert finished["ending"] == "exited" and finished["exit_code"] == 0
    line = json.loads(cli_run.file("run.json").read_text())["command_line"]
    assert "-p" not in line and "--permission-mode" in line and "--" not in line
    terminal = cli_run.file("terminal.log").read_text(errors="replace")
    assert "attach to steer" in terminal
