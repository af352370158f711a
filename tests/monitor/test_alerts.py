"""Alert options and the repeat-once-then-quiet policy."""

from __future__ import annotations

from code_runner.monitor.alerts import Action, AlertKind, AlertPolicy, Episode, choose, options_for


def test_four_options_with_a_type_specific_one() -> None:
    keys = [o.key for o in options_for(AlertKind.METRIC_PLATEAU)]
    assert keys == ["A", "B", "C", "D"]
    assert options_for(AlertKind.METRIC_PLATEAU)[3].action is Action.EARLY_STOP
    assert options_for(AlertKind.SLOW_PROGRESS)[3].action is Action.EXTEND_TIMEOUT
    assert choose(AlertKind.STALL_SUSPECTED, " b ") is Action.KILL
    assert choose(AlertKind.STALL_SUSPECTED, "continue") is Action.CONTINUE
    assert choose(AlertKind.STALL_SUSPECTED, "z") is None


def test_repeat_once_after_two_checks_then_quiet_until_cleared() -> None:
    policy = AlertPolicy()
    kind = AlertKind.STALL_SUSPECTED
    said = [policy.on_check(kind, True, n) for n in range(1, 8)]
    assert said == [Episode.SHOWN, None, Episode.REPEATED, None, None, None, None]
    assert policy.on_check(kind, False, 8) is None
    assert policy.on_check(kind, True, 9) is Episode.SHOWN  # a new episode


def test_an_answer_silences_the_repeat() -> None:
    policy = AlertPolicy()
    kind = AlertKind.RESOURCE_ALERT
    assert policy.on_check(kind, True, 1) is Episode.SHOWN
    policy.answered(kind)
    assert [policy.on_check(kind, True, n) for n in (2, 3, 4)] == [None, None, None]
