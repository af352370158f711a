"""Where each file of a task's run record lives, named once (`RecordPaths`)."""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from code_runner import dirs, files


@dataclass(frozen=True)
class RecordPaths:
    output_dir: Path
    task_id: str

    def record_files(self) -> dict[str, str]:
        """The record's files by name, as result.json lists them."""
        paths = self
        names: tuple[str, ...] = ("request", "status", "events", "rounds", "response")
        names += ("result", "patch", "hunk", "verifier_log")
        found = {name: str(getattr(paths, name)) for name in names}
        if paths.transcript.exists():
            found["transcript"] = str(paths.transcript)
        return found

    def file(self, suffix: str) -> Path:
        return self.output_dir / f"{self.task_id}.{suffix}"

    @property
    def reserve(self) -> Path:
        """Disk space held while the run works, so its last status fits on a full disk."""
        return self.file("reserve")

    @property
    def request(self) -> Path:
        return self.file("request.json")

    @property
    def status(self) -> Path:
        return self.file("status.json")

    @property
    def events(self) -> Path:
        return self.file("events.jsonl")

    @property
    def rounds(self) -> Path:
        return self.file("rounds.jsonl")

    @property
    def response(self) -> Path:
        return self.file("response.txt")

    @property
    def result(self) -> Path:
        return self.file("result.json")

    @property
    def patch(self) -> Path:
        return self.file("patch")

    @property
    def hunk(self) -> Path:
        return self.file("hunk.md")

    @property
    def verifier_log(self) -> Path:
        return self.file("verifier.log")

    @property
    def run_info(self) -> Path:
        """Who ran what where: backend, command line (secrets redacted), sandbox posture."""
        return self.file("run.json")

    @property
    def result_md(self) -> Path:
        """The normalized result (SUCCESS / PARTIAL / BLOCKED_NEEDS_DECISION / FAILED)."""
        return self.file("result.md")

    @property
    def eval_md(self) -> Path:
        """Scope, diff, proof and ownership review of the run."""
        return self.file("eval.md")

    @property
    def skill_review_md(self) -> Path:
        """The recommendation about the run's named skills, and a person's options."""
        return self.file("skill-review.md")

    @property
    def terminal_log(self) -> Path:
        """What an agent CLI's tmux pane showed (`--tmux` runs)."""
        return self.file("terminal.log")

    @property
    def tmux_info(self) -> Path:
        """Socket and session of the live tmux pane, for `code-runner attach`."""
        return self.file("tmux.json")

    @property
    def stop_request(self) -> Path:
        """Written by `code-runner stop`; the runner polls for it."""
        return self.file("stop")

    @property
    def agent_dir(self) -> Path:
        """An agent CLI's prompts and raw output, one set of files per round."""
        return self.file("agent")

    @property
    def lock(self) -> Path:
        """Held (flock) by the one run writing this record; a second run is refused."""
        return self.file("lock")

    @property
    def seal(self) -> Path:
        """The HMAC of each file readers trust (`record.seal`)."""
        return self.file("seal.json")

    @property
    def apply_journal(self) -> Path:
        """The apply step's journal: prior state of every source path it touches.

        In the runner's state dir, never the output dir: a journal says which paths to
        write and with which modes, so whoever can write it could choose them."""
        where = f"{self.output_dir.resolve()}\0{self.task_id}".encode("utf-8", "surrogateescape")
        key = hashlib.sha256(where).hexdigest()[:32]
        return dirs.state_dir() / "journals" / f"{self.task_id}-{key}.apply.json"

    @property
    def apply_dir(self) -> Path:
        """Saved prior bytes (`prior/N`) and moved DoD byproducts of the apply step."""
        return self.apply_journal.with_suffix("")

    @property
    def transcript(self) -> Path:
        """Every model request and response of the run (model backends only)."""
        return self.file("transcript.jsonl")


def _printable_chunks(raw: Iterator[bytes]) -> Iterator[bytes]:
    """`files.printable` over a byte stream: the agent's bytes, decoded across chunk ends,
    with every terminal escape, control and bidi character written as its escape."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    held = ""  # a CR at a chunk's end may start a CRLF
    for chunk in raw:
        text = held + decoder.decode(chunk)
        text, held = (text[:-1], "\r") if text.endswith("\r") else (text, "")
        if text:
            yield files.printable(text).encode("utf-8", "surrogateescape")
    rest = held + decoder.decode(b"", final=True)
    if rest:
        yield files.printable(rest).encode("utf-8", "surrogateescape")


def hunk_chunks(task_id: str, title: str, review: Path) -> Iterator[bytes]:
    """`hunk_markdown` for a review in a file, in pieces: the file is never read whole."""
    yield f"# {task_id}: {files.printable(title)}\n\n```diff\n".encode("utf-8", "surrogateescape")
    last = b""
    for chunk in _printable_chunks(files.read_chunks(review)):
        last = chunk
        yield chunk
    if not last:
        yield b"(no changes)\n"
    elif not last.endswith(b"\n"):
        yield b"\n"
    yield b"```\n"


def hunk_markdown(task_id: str, title: str, review: str) -> str:
    """The human review page for a patch: stat and full diff, rendered with `--text`."""
    body = files.printable(review) if review.strip() else "(no changes)\n"
    return f"# {task_id}: {files.printable(title)}\n\n```diff\n{body.rstrip()}\n```\n"
