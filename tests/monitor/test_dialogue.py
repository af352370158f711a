"""The person's answers: what each does is handed back to the loop, and recorded."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from code_runner.monitor import ExperimentRecord, PlainUI, build_spec
from code_runner.monitor.alerts import Alert, AlertKind, AlertPolicy
from code_runner.monitor.dialogue import Dialogue, EarlyStop, NewSpec, Situation, Stop
from code_runner.monitor.spec import MIN_INTERVAL_ENV, ExperimentSpec


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ExperimentSpec:
    monkeypatch.setenv(MIN_INTERVAL_ENV, "0.05")
    options = {"command": ("true",), "cwd": str(tmp_path), "timeout": "100s"}
    return build_spec({}, options, source="test")


def _dialogue(tmp_path: Path) -> tuple[Dialogue, io.StringIO, ExperimentRecord]:
    said = io.StringIO()
    record = ExperimentRecord(tmp_path / "run")
    ui = PlainUI(Console(file=said), Console(file=said))
    return Dialogue(ui, record, AlertPolicy()), said, record


def _now(spec: ExperimentSpec, eta_s: float | None = None) -> Situation:
    return Situation(spec=spec, elapsed_s=50.0, eta_s=eta_s, diagnosis=lambda: "the diagnosis")


def _alert(kind: AlertKind) -> Alert:
    return Alert(kind, check_no=3, elapsed_s=50.0, detail="something")


def test_without_an_alert_a_and_d_do_nothing(tmp_path: Path, spec: ExperimentSpec) -> None:
    dialogue, said, _ = _dialogue(tmp_path)
    assert dialogue.hear("A", _now(spec)) is None
    assert dialogue.hear("D", _now(spec)) is None
    assert "No alert is waiting" in said.getvalue() and not dialogue.answers


def test_kill_and_adjust_work_at_any_time(tmp_path: Path, spec: ExperimentSpec) -> None:
    dialogue, _said, _ = _dialogue(tmp_path)
    assert dialogue.hear("C", _now(spec)) is None
    reply = dialogue.hear("timeout=2h", _now(spec))
    assert isinstance(reply, NewSpec) and reply.spec.timeout_s == 7200
    assert isinstance(dialogue.hear("B", _now(spec)), Stop)
    assert [(a.alert_kind, a.action) for a in dialogue.answers] == [
        (None, "adjust"),
        (None, "adjusted"),
        (None, "kill"),
    ]


def test_a_diagnosis_keeps_the_alert_open(tmp_path: Path, spec: ExperimentSpec) -> None:
    dialogue, _said, _ = _dialogue(tmp_path)
    dialogue.offer(_alert(AlertKind.STALL_SUSPECTED), repeated=False)
    assert dialogue.hear("D", _now(spec)) is None
    assert dialogue.pending is not None  # still waiting for A, B or C
    assert isinstance(dialogue.hear("B", _now(spec)), Stop)
    assert [a.action for a in dialogue.answers] == ["show_diagnosis", "kill"]


def test_kill_and_early_stop_are_replies_for_the_loop(tmp_path: Path, spec: ExperimentSpec) -> None:
    dialogue, _, record = _dialogue(tmp_path)
    dialogue.offer(_alert(AlertKind.STALL_SUSPECTED), repeated=False)
    assert dialogue.hear("b", _now(spec)) == Stop("killed by the user")
    assert dialogue.pending is None
    dialogue.offer(_alert(AlertKind.METRIC_PLATEAU), repeated=False)
    assert isinstance(dialogue.hear("D", _now(spec)), EarlyStop)
    assert [a.action for a in dialogue.answers] == ["kill", "early_stop"]
    answers = [
        json.loads(line)
        for line in record.events_path.read_text().splitlines()
        if json.loads(line)["kind"] == "answer"
    ]
    assert [a["note"] for a in answers] == ["", "sent SIGINT to the command"]


def test_adjust_takes_the_next_line_as_settings(tmp_path: Path, spec: ExperimentSpec) -> None:
    dialogue, said, _ = _dialogue(tmp_path)
    dialogue.offer(_alert(AlertKind.STALL_SUSPECTED), repeated=False)
    assert dialogue.hear("C", _now(spec)) is None and dialogue.awaiting_adjust
    reply = dialogue.hear("stall_checks=7 nonsense", _now(spec))
    assert reply is None and "Settings unchanged" in said.getvalue()
    dialogue.offer(_alert(AlertKind.STALL_SUSPECTED), repeated=True)
    dialogue.hear("C", _now(spec))
    reply = dialogue.hear("stall_checks=7", _now(spec))
    assert isinstance(reply, NewSpec) and reply.spec.stall_checks == 7
    assert dialogue.answers[-1].action == "adjusted"


def test_extend_timeout_fits_the_eta(tmp_path: Path, spec: ExperimentSpec) -> None:
    dialogue, _, _ = _dialogue(tmp_path)
    dialogue.offer(_alert(AlertKind.SLOW_PROGRESS), repeated=False)
    assert dialogue.hear("D", _now(spec, eta_s=None)) is None
    dialogue.offer(_alert(AlertKind.SLOW_PROGRESS), repeated=True)
    reply = dialogue.hear("D", _now(spec, eta_s=100.0))
    # elapsed 50 + 1.5 x ETA 100 + two checks of 30 s + the 10 s kill grace
    assert isinstance(reply, NewSpec) and reply.spec.timeout_s == pytest.approx(270.0)
    assert [a.note for a in dialogue.answers] == [
        "no ETA; timeout unchanged",
        "timeout extended to 270 s",
    ]


def test_diagnosis_is_shown_on_demand(tmp_path: Path, spec: ExperimentSpec) -> None:
    dialogue, said, _ = _dialogue(tmp_path)
    dialogue.offer(_alert(AlertKind.RESOURCE_ALERT), repeated=False)
    assert dialogue.hear("D", _now(spec)) is None
    assert "the diagnosis" in said.getvalue()
