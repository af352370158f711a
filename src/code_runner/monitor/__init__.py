"""Experiment executor and monitor: run any command under checks, report what happened.

`code-runner exec` is the face; this package is the engine. The public surface is small:
build a spec, detect the type, run an `Experiment` into an `ExperimentRecord`, read a result back.
"""

from code_runner.monitor.compare import compare_runs, render_compare_csv, render_compare_table
from code_runner.monitor.detach import start_detached
from code_runner.monitor.detect import Detection, detect_type
from code_runner.monitor.experiment import Experiment
from code_runner.monitor.launch import check_launchable
from code_runner.monitor.listing import ExperimentLine, collect_experiments, experiment_totals
from code_runner.monitor.orphans import Orphan, collect_orphans
from code_runner.monitor.record import ExperimentRecord, check_run_dir, default_run_dir
from code_runner.monitor.report import render_report, render_status
from code_runner.monitor.result import ExperimentResult, load_result
from code_runner.monitor.spec import (
    ExperimentSpec,
    ExperimentType,
    build_spec,
    load_experiment_spec,
)
from code_runner.monitor.state import ExperimentState
from code_runner.monitor.stop import StopRequest, request_stop
from code_runner.monitor.ui import PlainUI, TerminalUI, choose_ui
from code_runner.monitor.validate import (
    RunVerdict,
    Validation,
    judge_runs,
    recorded_spec,
    render_validation,
)

__all__ = [
    "Detection",
    "Experiment",
    "ExperimentLine",
    "ExperimentRecord",
    "ExperimentResult",
    "ExperimentSpec",
    "ExperimentState",
    "ExperimentType",
    "Orphan",
    "PlainUI",
    "RunVerdict",
    "StopRequest",
    "TerminalUI",
    "Validation",
    "build_spec",
    "check_launchable",
    "check_run_dir",
    "choose_ui",
    "collect_experiments",
    "collect_orphans",
    "compare_runs",
    "default_run_dir",
    "detect_type",
    "experiment_totals",
    "judge_runs",
    "load_experiment_spec",
    "load_result",
    "recorded_spec",
    "render_compare_csv",
    "render_compare_table",
    "render_report",
    "render_status",
    "render_validation",
    "request_stop",
    "start_detached",
]
