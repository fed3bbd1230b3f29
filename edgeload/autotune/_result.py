"""The outcome of an autotune run: its trials, the winner and why it won."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ProfileError
from ..platform.plan import Plan, format_mib
from ..platform.profile import TUNED_FILENAME, system_config_dir, user_config_dir, validate_settings
from ._profile_file import atomic_write, device_stamp, render_toml
from ._search import pick_winner
from ._workloads import Measurement, profile_settings

Objective = Literal["throughput", "latency"]


@dataclass(frozen=True)
class Trial:
    """One configuration tried."""

    index: int
    config: Mapping[str, Any]
    status: str
    """``ok``, ``over memory``, ``skipped: ...`` (estimated over the ceiling) or ``failed: ...``."""
    measurement: Measurement | None = None
    score: float | None = None
    """Items/s (throughput) or 1000 / p99 latency in ms (latency); None when rejected."""
    recheck_of: int | None = None
    """For a second measurement of an earlier trial's configuration: that trial's index."""


@dataclass
class TuneResult:
    """Every trial, the winner and why it won."""

    workload: str
    objective: Objective
    max_memory_bytes: int
    trials: list[Trial] = field(default_factory=list)
    winner: int | None = None
    """Index into ``trials``; None when no trial was accepted."""
    reason: str = ""
    interrupted: bool = False
    elapsed_s: float = 0.0
    grid_size: int = 0
    """How many configurations the full grid over the same knobs has."""
    baseline_plan: Plan | None = None
    tuned_batch: bool = False
    """Whether the batch size was searched (only then does the profile carry it)."""

    @property
    def best(self) -> Trial | None:
        """The winning trial."""
        return None if self.winner is None else self.trials[self.winner]

    def settings(self) -> dict[str, Any]:
        """The winner as ``[profile]`` settings (validated).

        Raises:
            ProfileError: no trial was accepted.
        """
        if self.best is None:
            raise ProfileError("autotune: no trial was accepted, so there is no profile to write")
        config = dict(self.best.config)
        if not self.tuned_batch:
            config.pop("batch_size", None)
        return validate_settings(profile_settings(config), where="autotune")

    def write(
        self,
        path: str | Path | None = None,
        *,
        platform: Any = None,
        system: bool = False,
    ) -> Path:
        """Write the winner as a stamped tuned profile (atomically); return where it went.

        Args:
            path: where to write; default the user config dir (``$XDG_CONFIG_HOME/edgeload``),
                or with ``system`` /etc/edgeload; ``load_profile`` looks in both.
            platform: the device, for the stamp (model, L4T release, power mode); default
                :func:`edgeload.platform.probe.probe`.
            system: write to the system config dir, for every user of the device.

        Raises:
            ProfileError: no trial was accepted, or the file cannot be written.
        """
        settings = self.settings()
        if platform is None:
            from ..platform.probe import probe

            platform = probe()
        if path is None:
            path = (system_config_dir() if system else user_config_dir()) / TUNED_FILENAME
        target = Path(path)
        comment = f"Written by `edgeload autotune` for {self.workload}.\nWhy: {self.reason}"
        stamp = device_stamp(platform)
        atomic_write(target, render_toml({"tuned": stamp, "profile": settings}, comment=comment))
        return target

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {
            "workload": self.workload,
            "objective": self.objective,
            "max_memory_bytes": self.max_memory_bytes,
            "winner": self.winner,
            "reason": self.reason,
            "interrupted": self.interrupted,
            "elapsed_s": round(self.elapsed_s, 2),
            "grid_size": self.grid_size,
            "trials": [
                {
                    "index": t.index,
                    "config": dict(t.config),
                    "status": t.status,
                    "score": t.score,
                    "recheck_of": t.recheck_of,
                    **(vars(t.measurement) if t.measurement else {}),
                }
                for t in self.trials
            ],
        }


def _groups(result: TuneResult) -> dict[int, list[Trial]]:
    """Trials by the first trial of their configuration (rechecks join their original)."""
    groups: dict[int, list[Trial]] = {}
    for t in result.trials:
        groups.setdefault(t.index if t.recheck_of is None else t.recheck_of, []).append(t)
    return groups


def group_score(trials: list[Trial]) -> tuple[float, int] | None:
    """Mean score and highest peak own memory of one configuration's trials; None if any
    failed."""
    if any(t.score is None or t.measurement is None for t in trials):
        return None
    scores = [t.score for t in trials if t.score is not None]
    peak = max(t.measurement.peak_own_bytes for t in trials if t.measurement is not None)
    return sum(scores) / len(scores), peak


def choose_winner(result: TuneResult, min_gain: float) -> None:
    """Set ``result.winner`` and ``result.reason`` from its trials (rechecks averaged)."""
    groups = _groups(result)
    ok = []
    for index, trials in groups.items():
        got = group_score(trials)
        if got is not None:
            ok.append((index, got[0], got[1]))
    picked = pick_winner(ok, min_gain=min_gain)
    if picked is None:
        result.reason = "no trial finished within the memory ceiling"
        return
    result.winner, for_memory = picked
    score, peak = next((c[1], c[2]) for c in ok if c[0] == result.winner)
    runs = len(groups[result.winner])
    unit = "items/s" if result.objective == "throughput" else "/s (1000 / p99 ms)"
    unit += f", mean of {runs} runs" if runs > 1 else ""
    top = max(ok, key=lambda c: c[1])
    plan = next((c for c in ok if c[0] == 0), None)
    vs_plan = ""
    if result.winner == 0:
        vs_plan = "; the untuned plan was already best"
    elif plan is not None:
        vs_plan = f"; {score / plan[1] - 1:+.0%} vs the untuned plan (trial 0)"
    if for_memory:
        result.reason = (
            f"within {min_gain:.0%} of the best score ({score:.1f} vs {top[1]:.1f} {unit}) "
            f"with {format_mib(top[2] - peak)} less peak memory{vs_plan}"
        )
    else:
        result.reason = (
            f"highest {result.objective} score, {score:.1f} {unit}, at {format_mib(peak)} "
            f"peak own memory{vs_plan}"
        )
