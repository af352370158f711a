"""Plots people read, drawn with matplotlib when it is installed (`pip install
code-runner[plots]`); without it the built-in PNG line chart (`plot.py`) is used.

A metric and its validation twin (`loss` / `val_loss`, `train/acc` / `eval/acc`) share one
figure so the gap between them is visible; a series spanning two decades or more gets a log
scale; memory over time shows RSS and, where the kernel gives it, PSS (shared pages counted
once, which is what DataLoader workers really cost).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence

_SPLIT = re.compile(r"^(train|training|val|valid|validation|eval|test)[_/.-]", re.IGNORECASE)
Points = Sequence[tuple[float, float]]


def family_of(name: str) -> str:
    """`val_loss`, `train/loss` and `loss` are one family: `loss`."""
    return _SPLIT.sub("", name)


def families(names: Sequence[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name in names:
        grouped.setdefault(family_of(name), []).append(name)
    return grouped


def wants_log_scale(values: Sequence[float]) -> bool:
    """All positive and spanning at least two decades."""
    return bool(values) and min(values) > 0 and max(values) / min(values) >= 100


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def metric_figure(title: str, series: Mapping[str, Points]) -> bytes:
    """One figure, one line per metric of the family; matplotlib must be available."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.6), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    values: list[float] = []
    for name, points in series.items():
        xs, ys = [x for x, _ in points], [y for _, y in points]
        values += ys
        axes.plot(xs, ys, marker="o" if len(points) <= 30 else None, markersize=3, label=name)
    if wants_log_scale(values):
        axes.set_yscale("log")
        title += " (log scale)"
    axes.set_title(title)
    axes.set_xlabel("step")
    axes.grid(True, alpha=0.3)
    axes.legend()
    return _png(figure)


def memory_figure(samples: Sequence[tuple[float, int, int | None]]) -> bytes:
    """RSS and PSS (MiB) of the whole tree over the run; matplotlib must be available."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.6), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    xs = [t for t, _, _ in samples]
    axes.plot(xs, [r / 2**20 for _, r, _ in samples], label="RSS, summed over the tree")
    pss = [(t, p / 2**20) for t, _, p in samples if p is not None]
    if pss:
        axes.plot([t for t, _ in pss], [p for _, p in pss], label="PSS (shared pages once)")
    axes.set_title("memory of the process tree")
    axes.set_xlabel("seconds since start")
    axes.set_ylabel("MiB")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend()
    return _png(figure)


def _png(figure: object) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="png")  # type: ignore[attr-defined]
    return out.getvalue()
