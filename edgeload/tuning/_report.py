"""Showing an autotune run: the progress line, the table of trials, the plot."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import MissingDependency

if TYPE_CHECKING:
    from .tune import TuneResult

_BAR_WIDTH = 20
# Short column names for the knobs, in the order the table shows them.
_SHORT = {
    "worker_kind": "kind",
    "num_workers": "workers",
    "thread_budget": "threads",
    "batch_size": "batch",
    "prefetch_bytes": "prefetch",
    "memory_mode": "memory",
    "decode_backend": "decode",
}


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}M"


def _value(key: str, value: Any) -> str:
    return _mib(value) if key == "prefetch_bytes" else str(value)


def describe_config(config: Mapping[str, Any]) -> str:
    """``workers=2 threads=3 prefetch=1.2M ...``: one line."""
    return " ".join(f"{_SHORT.get(k, k)}={_value(k, v)}" for k, v in config.items())


class ProgressLine:
    """A plain-text progress bar on a stream (stderr): one line per trial, or one
    rewritten line on a terminal."""

    def __init__(self, out: TextIO, *, budget_s: float) -> None:
        self.out = out
        self.budget_s = budget_s
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.started = time.monotonic()

    def __call__(self, result: TuneResult, config: Mapping[str, Any] | None) -> None:
        """Show the state before trial ``len(result.trials)`` (``config``), or the end."""
        elapsed = time.monotonic() - self.started
        filled = round(min(1.0, elapsed / self.budget_s) * _BAR_WIDTH)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        scores = [t.score for t in result.trials if t.score is not None]
        best = f" best {max(scores):.1f}" if scores else ""
        what = f"trial {len(result.trials)}: {describe_config(config)}" if config else "done"
        line = f"autotune [{bar}] {elapsed:4.0f}/{self.budget_s:.0f}s{best}  {what}"
        if self.tty:
            self.out.write("\r\x1b[K" + line + ("\n" if config is None else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()


def format_table(result: TuneResult) -> str:
    """The trials as a text table, the winner marked with ``*``, then why it won."""
    knobs = list(result.trials[0].config) if result.trials else []
    head = ["#", *(_SHORT.get(k, k) for k in knobs), "items/s", "p50ms", "p99ms", "own", "cpu%"]
    rows = [head]
    for t in result.trials:
        m = t.measurement
        mark = "*" if t.index == result.winner else " "
        nums = (
            [
                f"{m.items_per_s:.1f}",
                f"{m.latency_p50_ms:.1f}",
                f"{m.latency_p99_ms:.1f}",
                _mib(m.peak_own_bytes),
                f"{m.cpu_percent:.0f}",
            ]
            if m is not None
            else ["-"] * 5
        )
        row = [f"{mark}{t.index}", *(_value(k, t.config.get(k)) for k in knobs), *nums]
        if t.status != "ok":
            row.append(t.status)
        elif t.recheck_of is not None:
            row.append(f"recheck of {t.recheck_of}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(head))]
    lines = [
        "  ".join(cell.rjust(widths[i]) if i < len(head) else cell for i, cell in enumerate(r))
        for r in rows
    ]
    tail = [f"workload: {result.workload}; objective: {result.objective}; "
            f"ceiling {_mib(result.max_memory_bytes)}; {len(result.trials)} trials "
            f"(full grid: {result.grid_size}) in {result.elapsed_s:.0f} s"]  # fmt: skip
    if result.interrupted:
        tail.append("interrupted: the trials so far are above")
    if result.winner is not None:
        tail.append(f"winner: trial {result.winner}: {result.reason}")
    else:
        tail.append(f"no winner: {result.reason}")
    return "\n".join(lines + tail)


def save_plot(result: TuneResult, path: str | Path) -> Path:
    """A PNG of throughput against peak memory, one point per trial, winner marked.

    Raises:
        MissingDependency: matplotlib is not installed (names the extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError as exc:
        raise MissingDependency(
            "--plot needs matplotlib: `pip install 'edgeload[plot]'` (or `pip install "
            f"matplotlib`), or leave out --plot ({exc})"
        ) from exc
    done = [t for t in result.trials if t.measurement is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    try:
        for t in done:
            m = t.measurement
            assert m is not None
            ok = t.status == "ok"
            ax.scatter(m.peak_own_bytes / (1 << 20), m.items_per_s,
                       marker="*" if t.index == result.winner else ("o" if ok else "x"),
                       s=180 if t.index == result.winner else 40,
                       color="tab:green" if t.index == result.winner else
                       ("tab:blue" if ok else "tab:red"))  # fmt: skip
            ax.annotate(str(t.index), (m.peak_own_bytes / (1 << 20), m.items_per_s),
                        textcoords="offset points", xytext=(4, 4), fontsize=8)  # fmt: skip
        if math.isfinite(result.max_memory_bytes):
            ax.axvline(result.max_memory_bytes / (1 << 20), color="tab:red", linestyle="--",
                       label="memory ceiling")  # fmt: skip
        ax.set_xlabel("peak own memory of the process tree (MiB): anonymous + shared PSS")
        ax.set_ylabel("items / s")
        ax.set_title(f"edgeload autotune: {result.workload}", fontsize=10)
        ax.grid(alpha=0.3)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, format="png")
    finally:
        plt.close(fig)
    return target
