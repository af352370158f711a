"""Type detection from command words and the files the command names."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner.monitor.detect import detect_type
from code_runner.monitor.spec import ExperimentType


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (["python", "run.py", "--epochs", "5", "--lr", "0.1"], ExperimentType.TRAINING),
        (["torchrun", "main.py"], ExperimentType.TRAINING),
        (["Rscript", "model.R"], ExperimentType.ANALYSIS),
        (["dbt", "run"], ExperimentType.ETL),
        (["python", "job.py", "--input", "a.csv", "--output", "b.csv"], ExperimentType.ETL),
        (["python", "mc.py", "--n-sims", "1000"], ExperimentType.SIMULATION),
        (["bash", "-c", "./monte_carlo --iterations 5"], ExperimentType.SIMULATION),
        (["sleep", "10"], ExperimentType.GENERIC),
    ],
)
def test_command_signals(tmp_path: Path, command: list[str], kind: ExperimentType) -> None:
    assert detect_type(command, tmp_path).type is kind


def test_named_files_are_read(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("import torch\nfor epoch in range(3):\n    pass\n")
    found = detect_type(["python", "job.py"], tmp_path)
    assert found.type is ExperimentType.TRAINING
    assert any("job.py" in r for r in found.reasons)
    assert not found.uncertain
    (tmp_path / "other.py").write_text("import statsmodels.api as sm\n")
    assert detect_type(["python", "other.py"], tmp_path).type is ExperimentType.ANALYSIS


def test_ties_are_uncertain(tmp_path: Path) -> None:
    found = detect_type(["python", "x.py", "--epochs", "3", "--n-sims", "5"], tmp_path)
    assert found.uncertain
    assert set(found.candidates[:2]) == {ExperimentType.TRAINING, ExperimentType.SIMULATION}


def test_a_scikit_learn_search_is_analysis_and_boosting_is_training(tmp_path: Path) -> None:
    (tmp_path / "search.py").write_text(
        "from sklearn.ensemble import RandomForestClassifier\n"
        "from sklearn.model_selection import GridSearchCV\n"
        "search = GridSearchCV(RandomForestClassifier(), {'min_samples_leaf': [1, 2]}, verbose=3)\n"
        "search.fit(X, y)\n"
    )
    assert detect_type(["python", "search.py"], tmp_path).type is ExperimentType.ANALYSIS
    (tmp_path / "boost.py").write_text("import xgboost as xgb\nbst = xgb.train(params, dtrain)\n")
    assert detect_type(["python", "boost.py"], tmp_path).type is ExperimentType.TRAINING
    (tmp_path / "gbm.py").write_text("import lightgbm\nmodel = lightgbm.LGBMRegressor()\n")
    assert detect_type(["python", "gbm.py"], tmp_path).type is ExperimentType.TRAINING
