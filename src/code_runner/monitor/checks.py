"""The monitor's checks: stall, memory, plateau, progress/ETA. Pure, stateful, cheap.

Each check sees one observation per check interval and returns an `Alert` while its condition
holds (the `AlertPolicy` decides when that is said). They encode what was measured for the
design (DESIGN.md, "Facts for the experiment monitor"):

- stall: a silent window alone misfires on jobs that flush rarely, so the alert says whether
  the tree's CPU time is still rising (busy but silent) or flat (likely hung);
- memory: "RSS > 3x initial" fires on almost every Python job (imports), so the baseline is
  taken after a warm-up, and PSS is reported beside summed RSS;
- plateau: Keras/Lightning semantics, `min_delta` relative to |best|, `patience` points;
- progress: a tqdm-style smoothed rate (EMA, smoothing 0.3), an ETA, and an alert when the
  smoothed rate falls below `slow_ratio` of the early rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from code_runner.monitor.alerts import Alert, AlertKind
from code_runner.monitor.launch import TreeSample
from code_runner.monitor.metrics import Progress

BUSY_CPU_FRACTION = 0.05
EMA_SMOOTHING = 0.3
EARLY_RATE_CHECKS = 3
_MAX_MODE_RE = re.compile(
    r"acc|accuracy|f1|auc|precision|recall|score|reward|map\b|bleu|rouge|r2|iou", re.IGNORECASE
)


@dataclass(frozen=True)
class Observation:
    """What one check saw. `activity` changes whenever any watched output changes."""

    check_no: int
    elapsed_s: float
    tree: TreeSample
    activity: tuple[tuple[str, int, int], ...]


@dataclass
class Peaks:
    """The latest tree sample, the highest values seen, and memory at each check (for the
    memory-over-time plot): (elapsed s, RSS, PSS)."""

    last: TreeSample = field(default_factory=lambda: TreeSample(0, 0.0, 0, None, ()))
    rss: int = 0
    pss: int | None = None
    processes: int = 0
    samples: list[tuple[float, int, int | None]] = field(default_factory=list)

    def add(self, sample: TreeSample, *, elapsed_s: float | None = None) -> None:
        self.last = sample
        self.rss = max(self.rss, sample.rss_bytes)
        if sample.pss_bytes is not None:
            self.pss = max(self.pss or 0, sample.pss_bytes)
        self.processes = max(self.processes, sample.processes)
        if elapsed_s is not None and len(self.samples) < MAX_MEMORY_SAMPLES:
            self.samples.append((round(elapsed_s, 3), sample.rss_bytes, sample.pss_bytes))


MAX_MEMORY_SAMPLES = 20_000


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 1024 / 1024:.0f} MiB"


class StallCheck:
    """Output and monitored files unchanged for `checks` checks in a row."""

    def __init__(self, checks: int, *, python_hint: bool = False) -> None:
        self.checks = checks
        self.python_hint = python_hint
        self._last: tuple[tuple[str, int, int], ...] | None = None
        self._unchanged = 0
        self._since_s = 0.0
        self._cpu_at_change = 0.0

    def observe(self, obs: Observation) -> Alert | None:
        if obs.activity != self._last:
            self._last = obs.activity
            self._unchanged = 0
            self._since_s = obs.elapsed_s
            self._cpu_at_change = obs.tree.cpu_s
            return None
        self._unchanged += 1
        if self._unchanged < self.checks:
            return None
        silent_s = max(obs.elapsed_s - self._since_s, 1e-9)
        cpu_delta = obs.tree.cpu_s - self._cpu_at_change
        busy = cpu_delta / silent_s >= BUSY_CPU_FRACTION
        verdict = (
            f"CPU time rising (+{cpu_delta:.1f} s, {100 * cpu_delta / silent_s:.0f}% of a core): "
            "busy but silent"
            if busy
            else f"CPU time flat (+{cpu_delta:.2f} s): likely hung"
        )
        watched = len(obs.activity)
        detail = (
            f"no new output in the {watched} watched files for {self._unchanged} checks "
            f"({silent_s:.0f} s); the tree's {verdict}."
        )
        if busy and self.python_hint:
            detail += " Python buffers output sent to files: PYTHONUNBUFFERED=1 or flush=True."
        return Alert(
            AlertKind.STALL_SUSPECTED,
            obs.check_no,
            obs.elapsed_s,
            detail,
            {
                "silent_s": round(silent_s, 3),
                "unchanged_checks": self._unchanged,
                "cpu_delta_s": round(cpu_delta, 3),
                "cpu_state": "rising" if busy else "flat",
            },
        )


class MemoryCheck:
    """Tree memory above `factor` times a baseline taken after `warmup_s`.

    PSS where the kernel gives it: forked workers (DataLoader) share pages, and summed RSS
    counts each shared page once per worker. RSS otherwise; the baseline and each check use
    the same measure."""

    def __init__(self, factor: float, warmup_s: float) -> None:
        self.factor = factor
        self.warmup_s = warmup_s
        self.baseline_bytes: int | None = None
        self.baseline_at_s: float | None = None
        self.measure: str | None = None

    def _size(self, obs: Observation) -> tuple[str, int]:
        pss = obs.tree.pss_bytes
        if self.measure != "rss" and pss:
            return "PSS", pss
        return "RSS", obs.tree.rss_bytes

    def observe(self, obs: Observation) -> Alert | None:
        measure, size = self._size(obs)
        if self.baseline_bytes is None:
            if obs.elapsed_s >= self.warmup_s and size > 0:
                self.baseline_bytes, self.measure = size, measure.lower()
                self.baseline_at_s = obs.elapsed_s
            return None
        if measure.lower() != self.measure or size <= self.factor * self.baseline_bytes:
            return None
        rss, pss = obs.tree.rss_bytes, obs.tree.pss_bytes
        ratio = size / self.baseline_bytes
        pss_text = f"; summed RSS {mib(rss)}" if measure == "PSS" else ""
        largest = ", ".join(
            f"{name} (pid {pid}) {mib(size)}" for pid, name, size in obs.tree.largest
        )
        detail = (
            f"tree {measure} {mib(size)} is {ratio:.1f}x the baseline {mib(self.baseline_bytes)} "
            f"taken at {self.baseline_at_s or 0:.0f} s after warm-up{pss_text}; "
            f"{obs.tree.processes} processes; largest: {largest or 'n/a'}."
        )
        return Alert(
            AlertKind.RESOURCE_ALERT,
            obs.check_no,
            obs.elapsed_s,
            detail,
            {
                "rss_bytes": rss,
                "pss_bytes": pss,
                "baseline_bytes": self.baseline_bytes,
                "ratio": round(ratio, 3),
                "factor": self.factor,
                "measure": measure,
            },
        )


def metric_mode(name: str) -> str:
    """`max` for accuracy-like names, else `min` (Keras `mode="auto"`)."""
    return "max" if _MAX_MODE_RE.search(name) else "min"


class PlateauCheck:
    """No improvement beyond `min_delta * |best|` for `patience` points (Keras semantics)."""

    def __init__(self, patience: int, min_delta: float) -> None:
        self.patience = patience
        self.min_delta = min_delta
        self.metric: str | None = None
        self.best: float | None = None
        self.best_index = 0
        self.wait = 0
        self._seen = 0

    def observe(
        self, metric: str | None, values: list[float], check_no: int, elapsed_s: float
    ) -> Alert | None:
        if metric is None:
            return None
        if metric != self.metric:
            self.metric, self.best, self.wait, self._seen = metric, None, 0, 0
        mode = metric_mode(metric)
        for index in range(self._seen, len(values)):
            self._step(values[index], index, mode)
        self._seen = len(values)
        if self.best is None or self.wait < self.patience:
            return None
        detail = (
            f"{metric} has not improved by more than {100 * self.min_delta:g}% of its best "
            f"({self.best:.6g}, point {self.best_index + 1}) for the last {self.wait} points "
            f"(mode {mode}, patience {self.patience}); last value {values[-1]:.6g}."
        )
        return Alert(
            AlertKind.METRIC_PLATEAU,
            check_no,
            elapsed_s,
            detail,
            {"metric": metric, "best": self.best, "wait": self.wait, "last": values[-1]},
        )

    def _step(self, value: float, index: int, mode: str) -> None:
        if self.best is None:
            self.best, self.best_index, self.wait = value, index, 0
            return
        margin = self.min_delta * abs(self.best)
        improved = value < self.best - margin if mode == "min" else value > self.best + margin
        if improved:
            self.best, self.best_index, self.wait = value, index, 0
        else:
            self.wait += 1


class ProgressCheck:
    """Smoothed progress rate, ETA, and a slow-progress alert against the early rate."""

    def __init__(self, slow_ratio: float, total_override: int | None = None) -> None:
        self.slow_ratio = slow_ratio
        self.total_override = total_override
        self.done: float | None = None
        self.total: float | None = None
        self.rate: float | None = None
        self.early_rate: float | None = None
        self.eta_s: float | None = None
        self._start: tuple[float, float] | None = None
        self._last: tuple[float, float] | None = None
        self._checks = 0

    def observe(self, progress: Progress | None, obs: Observation) -> Alert | None:
        if progress is None:
            if self._last is None:
                return None
            progress = Progress(self._last[1], self.total)
        total = progress.total or (float(self.total_override) if self.total_override else None)
        if self._last is not None and (progress.done < self._last[1] or total != self.total):
            self._start = self._last = None  # a new bar or counter began: start over
            self.rate = self.early_rate = None
            self._checks = 0
        self.done, self.total = progress.done, total
        now = (obs.elapsed_s, progress.done)
        if self._start is None or self._last is None:
            self._start = self._last = now
            return None
        dt = now[0] - self._last[0]
        if dt <= 0:
            return None
        instant = (now[1] - self._last[1]) / dt
        self.rate = (
            instant
            if self.rate is None
            else EMA_SMOOTHING * instant + (1 - EMA_SMOOTHING) * self.rate
        )
        self._last = now
        self._checks += 1
        if self._checks == EARLY_RATE_CHECKS:
            self.early_rate = (now[1] - self._start[1]) / max(now[0] - self._start[0], 1e-9)
        # After a slowdown the smoothed rate still remembers the fast start: the ETA uses
        # the slower of it and the latest interval's rate, so "extend to the ETA" is enough.
        recent = min(self.rate, instant)
        self.eta_s = (self.total - self.done) / recent if self.total and recent > 0 else None
        finished = self.total is not None and self.done >= self.total
        if (
            self.early_rate is None
            or self.early_rate <= 0
            or finished
            or self.rate >= self.slow_ratio * self.early_rate
        ):
            return None
        eta = f"ETA {self.eta_s:.0f} s" if self.eta_s is not None else "no ETA (rate is zero)"
        of_total = f"/{self.total:g}" if self.total else ""
        detail = (
            f"progress {self.done:g}{of_total} at {self.rate:.3g}/s (smoothed) is below "
            f"{100 * self.slow_ratio:.0f}% of the early rate {self.early_rate:.3g}/s; {eta}."
        )
        return Alert(
            AlertKind.SLOW_PROGRESS,
            obs.check_no,
            obs.elapsed_s,
            detail,
            {
                "done": self.done,
                "total": self.total,
                "rate_per_s": self.rate,
                "early_rate_per_s": self.early_rate,
                "eta_s": self.eta_s,
            },
        )
