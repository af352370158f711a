"""The scripted backend and the backend registry."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from code_runner import agents
from code_runner.agents.base import AgentStop, RoundContext
from code_runner.agents.scripted import MAX_SCRIPT_BYTES, Script, ScriptedAgent, load_script
from code_runner.errors import PreflightError, SpecError, UsageError
from code_runner.events import EventKind, ListSink
from code_runner.task.paths import Allowlist
from code_runner.tools import Toolbox
from code_runner.tools.base import ToolResult, ToolSpec

DEMO_SCRIPT = Path(__file__).parents[2] / "src/code_runner/demo/script.json"


class Recorder:
    """A ToolRunner in front of a real toolbox that remembers what the agent asked for."""

    def __init__(self, inner: Toolbox) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.results: list[ToolResult] = []

    def specs(self) -> list[ToolSpec]:
        return self.inner.specs()

    def call(self, name: str, args: Mapping[str, Any]) -> ToolResult:
        self.calls.append((name, dict(args)))
        self.results.append(self.inner.call(name, args))
        return self.results[-1]


def write_script(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def ctx(ws: Path, round_index: int) -> RoundContext:
    return RoundContext(task=None, round_index=round_index, max_rounds=5, workspace_dir=ws)  # type: ignore[arg-type]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src/calc.py").write_text("def add(a, b):\n    return a - b\n")
    return ws


@pytest.fixture
def tools(ws: Path, tmp_path: Path) -> Recorder:
    (tmp_path / "source").mkdir()
    box = Toolbox(
        ws,
        allowlist=Allowlist.parse(["src"]),
        source_dir=tmp_path / "source",
        env={"PATH": os.environ["PATH"]},
        events=ListSink(),
    )
    return Recorder(box)


# -- load_script -----------------------------------------------------------------------


def test_load_a_valid_script(tmp_path: Path) -> None:
    path = write_script(
        tmp_path / "s.json",
        {
            "rounds": [
                {"calls": [{"tool": "read_file", "args": {"path": "a"}}], "response": "hi"},
                {},
            ]
        },
    )
    script = load_script(path)
    assert len(script.rounds) == 2
    assert script.rounds[0].calls[0].tool == "read_file"
    assert script.rounds[0].calls[0].args == {"path": "a"}
    assert script.rounds[1].calls == [] and script.rounds[1].response == ""


def test_the_demo_script_is_valid() -> None:
    assert load_script(DEMO_SCRIPT).rounds


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_script(tmp_path / "nope.json")
    assert "does not exist" in info.value.message and info.value.fix
    assert info.value.exit_code == 2


def test_bad_json_says_where(tmp_path: Path) -> None:
    path = write_script(tmp_path / "s.json", '{"rounds": [\n  {"calls": [}\n]}')
    with pytest.raises(SpecError) as info:
        load_script(path)
    assert "JSON syntax error at line 2" in info.value.message
    assert '"rounds"' in (info.value.fix or "")


def test_an_oversized_script_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    with path.open("wb") as out:
        out.truncate(MAX_SCRIPT_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(SpecError) as info:
        load_script(path)
    assert f"is at most {MAX_SCRIPT_BYTES} bytes" in info.value.message


def test_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    path = write_script(tmp_path / "s.json", '{"rounds": [], "rounds": [{}]}')
    with pytest.raises(SpecError, match="duplicate key 'rounds'; keep only one"):
        load_script(path)


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ([], ["the top level"]),
        ({}, ["rounds: is required but missing"]),
        ({"rounds": {}}, ["rounds: expected a list"]),
        ({"rounds": [{"calls": {}}]}, ["rounds[0].calls: expected a list"]),
        (
            {"rounds": [{"cals": []}]},
            ["unknown field 'rounds[0].cals'; did you mean 'rounds[0].calls'?"],
        ),
        (
            {"rounds": [{"calls": [{"args": {}}]}]},
            ["rounds[0].calls[0].tool: is required but missing"],
        ),
        ({"rounds": [{"calls": [{"tool": "read_file", "args": []}]}]}, ["rounds[0].calls[0].args"]),
        (
            {"rounds": [{"calls": [{"tool": "rm_rf", "args": {}}]}], "extra": 1},
            ["unknown tool 'rm_rf'", "read_file", "unknown field 'extra'; remove it"],
        ),
        (
            {"rounds": [{"calls": [{"tool": "read_fil", "args": {}}]}]},
            ["unknown tool 'read_fil'; did you mean 'read_file'?"],
        ),
    ],
)
def test_wrong_shapes_list_every_problem(
    tmp_path: Path, data: object, fragments: list[str]
) -> None:
    path = write_script(tmp_path / "s.json", data)
    with pytest.raises(SpecError) as info:
        load_script(path)
    rendered = info.value.render()
    for fragment in fragments:
        assert fragment in rendered, rendered
    assert "Fix: correct the script" in rendered
    assert "Traceback" not in rendered


# -- ScriptedAgent ---------------------------------------------------------------------


def test_replays_each_round_through_the_tools(ws: Path, tools: Recorder) -> None:
    script = Script.model_validate(
        {
            "rounds": [
                {
                    "calls": [
                        {"tool": "read_file", "args": {"path": "src/calc.py"}},
                        {
                            "tool": "edit_file",
                            "args": {
                                "path": "src/calc.py",
                                "start_line": 2,
                                "end_line": 2,
                                "content": "    return a + b",
                            },
                        },
                    ],
                    "response": "fixed add",
                },
                {"calls": [{"tool": "run_command", "args": {"command": "echo round2"}}]},
            ]
        }
    )
    agent = ScriptedAgent(script)
    events = ListSink()
    first = agent.run_round(ctx(ws, 1), tools, events)
    assert first.stop is AgentStop.DONE and first.response == "fixed add" and first.turns == 1
    assert (ws / "src/calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    second = agent.run_round(ctx(ws, 2), tools, events)
    assert second.stop is AgentStop.DONE
    assert [name for name, _ in tools.calls] == ["read_file", "edit_file", "run_command"]
    assert "round2" in tools.results[-1].content
    third = agent.run_round(ctx(ws, 3), tools, events)
    assert third.stop is AgentStop.NO_ACTION and third.turns == 0
    assert len(tools.calls) == 3


def test_a_refused_call_does_not_stop_the_round(ws: Path, tools: Recorder) -> None:
    script = Script.model_validate(
        {
            "rounds": [
                {
                    "calls": [
                        {"tool": "write_file", "args": {"path": "../escape", "content": "x"}},
                        {"tool": "edit_file", "args": {"path": "src/calc.py"}},
                        {"tool": "write_file", "args": {"path": "src/new.py", "content": "ok\n"}},
                    ]
                }
            ]
        }
    )
    outcome = ScriptedAgent(script).run_round(ctx(ws, 1), tools, ListSink())
    assert outcome.stop is AgentStop.DONE
    assert [r.error.value if r.error else None for r in tools.results] == [
        "PERMISSION",
        "INVALID_ARGS",
        None,
    ]
    assert (ws / "src/new.py").read_text() == "ok\n"
    assert not (ws.parent / "escape").exists()


def test_tool_events_are_recorded_by_the_toolbox(ws: Path, tmp_path: Path) -> None:
    events = ListSink()
    (tmp_path / "source").mkdir()
    box = Toolbox(
        ws,
        allowlist=Allowlist.parse(["src"]),
        source_dir=tmp_path / "source",
        env={"PATH": os.environ["PATH"]},
        events=events,
    )
    script = Script.model_validate(
        {"rounds": [{"calls": [{"tool": "read_file", "args": {"path": "nope"}}]}]}
    )
    ScriptedAgent(script).run_round(ctx(ws, 1), box, events)
    assert [kind for kind, _ in events.events] == [EventKind.TOOL_CALL, EventKind.TOOL_RESULT]
    assert events.events[1][1]["error"] == "NOT_FOUND"


# -- the registry ----------------------------------------------------------------------


def test_available_backends() -> None:
    assert "scripted" in agents.available_backends()
    assert agents.available_backends() == sorted(agents.available_backends())


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("scripted", ("scripted", None)),
        ("scripted:", ("scripted", None)),
        ("scripted:fix.json", ("scripted", "fix.json")),
        ("scripted:C:/x/fix.json", ("scripted", "C:/x/fix.json")),
        (" scripted:a b.json", ("scripted", "a b.json")),
    ],
)
def test_parse_backend(text: str, parsed: tuple[str, str | None]) -> None:
    assert agents.parse_backend(text) == parsed


def test_make_scripted_agent_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    write_script(tmp_path / "specs/fix.json", {"rounds": [{"response": "x"}]})
    agent = agents.make_agent("scripted:fix.json", base_dir=tmp_path / "specs")
    assert isinstance(agent, ScriptedAgent) and agent.name == "scripted"
    assert agent.script.rounds[0].response == "x"
    absolute = agents.make_agent(f"scripted:{tmp_path}/specs/fix.json", base_dir=Path("/"))
    assert isinstance(absolute, ScriptedAgent)


def test_unknown_backend_lists_the_choices(tmp_path: Path) -> None:
    with pytest.raises(PreflightError) as info:
        agents.make_agent("gpt-17:turbo", base_dir=tmp_path)
    assert "unknown backend 'gpt-17'" in info.value.message
    assert "scripted" in (info.value.fix or "")


@pytest.mark.parametrize("backend", ["scripted", "scripted:"])
def test_scripted_without_a_file_says_how(tmp_path: Path, backend: str) -> None:
    with pytest.raises(UsageError) as info:
        agents.make_agent(backend, base_dir=tmp_path)
    assert "needs a script file" in info.value.message
    assert "scripted:fix.json" in (info.value.fix or "")


def test_scripted_with_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        agents.make_agent("scripted:nope.json", base_dir=tmp_path)
    assert str(tmp_path / "nope.json") in info.value.message
