"""`--tmux --interactive`: Claude Code's own interactive UI in the pane, a person free to steer.

Instead of `claude -p`, the pane runs `claude` (the interactive UI) on the pane's terminal,
and the launcher pastes the contract prompt into it (`tmux load-buffer` and `paste-buffer`)
once the UI is ready, then presses Enter. The worker ends by writing
its final block to a sentinel file (`$CODE_RUNNER_RESULT_FILE`) with its Bash tool; the
pane's launcher sees the file, sends `/exit` to the UI, and exits with the block's status:

    0    SUCCESS or PARTIAL
    125  BLOCKED_NEEDS_DECISION
    1    FAILED, an unknown status, or no block at all

A person can `code-runner attach RUN_DIR` and type into the UI in between. The audit, the
DoD and the result contract apply afterwards exactly as for `-p` runs: the block is a
claim, weighed against the evidence. The hermetic config dir is seeded so the UI asks
nothing a run cannot answer: onboarding done, the work tree trusted, the run's API key
(by its last 20 characters, as Claude Code keeps it) approved.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from code_runner.agents.cli_agents.translate import StreamState
from code_runner.events import EventKind, EventSink

RESULT_FILE_ENV = "CODE_RUNNER_RESULT_FILE"
EXIT_FOR = {"SUCCESS": 0, "PARTIAL": 0, "BLOCKED_NEEDS_DECISION": 125}
_KEY_SUFFIX_CHARS = 20
_PASTE_ON = "$'\\e[?2004h'"  # bash: the escape that turns bracketed paste on
_BUFFER = "code-runner-prompt"


def prompt_section(result_file: Path) -> str:
    return (
        "## Ending (interactive session)\n"
        "This is an interactive session. When you are done, write the final block below to "
        f"the file `{result_file}` (also in ${RESULT_FILE_ENV}) with your Bash tool, e.g. "
        f"`cat > {result_file} <<'EOF' ... EOF`; the session then ends by itself. Write that "
        "file only once, at the very end."
    )


def seed_config(config_dir: Path, workspace: Path, api_key: str | None) -> None:
    """The UI's global config: no onboarding, the work tree trusted, the key approved."""
    data: dict[str, object] = {
        "hasCompletedOnboarding": True,
        "projects": {
            str(workspace): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
        },
    }
    if api_key:
        data["customApiKeyResponses"] = {"approved": [api_key[-_KEY_SUFFIX_CHARS:]], "rejected": []}
    path = config_dir / ".claude.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    path.chmod(0o600)


def launcher_tail(
    tmux: str, result_file: Path, prompt_file: Path, terminal_log: Path
) -> tuple[str, str]:
    """(shell lines before the CLI: the prompt's paster and the sentinel's watcher; lines
    after: the exit mapping).

    The prompt is pasted once the UI is ready for it: when the pane's output (the terminal
    log, from this round on) has turned bracketed paste on, so a multi-line prompt arrives
    as one paste, not as lines each sent on its own, and then stayed still for a second
    (the UI done starting). Enter submits it once the UI has shown the paste; an Enter the
    UI did not answer (no new output) is pressed again, a few times at most.
    """
    q = shlex.quote
    sentinel = q(str(result_file))
    log = q(str(terminal_log))
    pane = '-t "$TMUX_PANE"'
    size = f"$(stat -c %s {log} 2>/dev/null || echo 0)"
    before = (
        f"log_from=$(( {size} + 1 ))\n"
        f"settle() {{ last=-1; while [ {size} != $last ]; do last={size}; sleep 1; done; }}\n"
        f"( until tail -c +$log_from {log} 2>/dev/null | grep -qaF {_PASTE_ON}; do sleep 0.2; "
        f"done; settle; {q(tmux)} load-buffer -b {_BUFFER} {q(str(prompt_file))} && "
        f"{q(tmux)} paste-buffer -p -d -b {_BUFFER} {pane} || exit; "
        f"for try in 1 2 3 4 5; do settle; sent={size}; {q(tmux)} send-keys {pane} Enter; "
        f"sleep 3; [ {size} != $sent ] && break; done ) &\n"
        "paster=$!\n"
        f"( until grep -qs 'RESULT_STATUS' {sentinel}; do sleep 0.2; done; sleep 1; "
        f"{q(tmux)} send-keys {pane} /exit Enter ) &\n"
        "watcher=$!\n"
    )
    cases = " ".join(f"{status}) code={code};;" for status, code in EXIT_FOR.items())
    after = (
        "kill $paster $watcher 2>/dev/null\n"
        f"status=$(grep -m1 -oE 'RESULT_STATUS:[[:space:]]*[A-Z_]+' {sentinel} 2>/dev/null "
        "| sed -E 's/.*:[[:space:]]*//')\n"
        f'case "$status" in {cases} *) code=1;; esac\n'
    )
    return before, after


class InteractiveTranslator:
    """The pane's text is for people; the final text is the sentinel file's block."""

    def __init__(self, events: EventSink, result_file: Path) -> None:
        self.events = events
        self.result_file = result_file
        self.state = StreamState(final_event=f"a block in {result_file.name}")

    def stdout_line(self, line: str) -> None:
        return None  # the UI's screen: it echoes the prompt, so no failure texts are read

    def stderr_line(self, line: str) -> None:
        return None

    def finish(self, exit_code: int | None) -> None:
        try:
            text = self.result_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        if "RESULT_STATUS" not in text:
            self.state.error = f"the worker wrote no final block to {self.result_file}"
            return
        self.state.final_seen = True
        self.state.final_ok = exit_code in (0, 125)
        self.state.final_text = text
        self.state.steps += 1
        self.events.emit(EventKind.AGENT_MESSAGE, cli="claude-interactive", text=text[-2000:])


__all__ = [
    "EXIT_FOR",
    "RESULT_FILE_ENV",
    "InteractiveTranslator",
    "launcher_tail",
    "prompt_section",
    "seed_config",
]
