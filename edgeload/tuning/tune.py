"""Deploy-time auto-tune: measure the real workload on the device, keep the best plan.

:func:`autotune` starts from the plan edgeload would use untuned, then moves one knob at
a time (worker kind, worker count, thread budget, batch size when asked, prefetch bytes,
memory mode, decode backend) toward the measured gain (:func:`coordinate_search`), each
trial a real loader warmed up and then measured for throughput, latency percentiles,
peak PSS of the process tree (and its own, anonymous + shared-memory, part) and CPU use.
Trials whose own memory passes the ceiling are rejected.
:func:`write_profile` stores the winner as a stamped TOML profile where
:func:`edgeload.platform.profile.load_profile` finds it, so every later loader on the device
plans with it.

The search is coordinate descent from the plan, one knob at a time. A configuration is
a mapping of profile keys (``worker_kind``, ``num_workers``, ``prefetch_bytes``,
``memory_mode``, ``thread_budget``, ``batch_size``, ``decode_backend``) to values.  The
search starts at the plan's configuration and moves one knob at a time: an ordered knob
(a count, a byte budget) steps to a neighbouring value and keeps stepping while the
score rises by more than ``min_gain``; a categorical knob (worker kind, memory mode)
tries each other value once.  Passes over the knobs repeat until one pass moves
nothing.  On the smooth, mostly separable objectives of a loader (more workers help
until the cores run out) this visits a few dozen configurations where the full grid
has hundreds.

Scores are "higher is better"; a rejected configuration (over the memory ceiling, or
failed) scores None and is never moved to.  The outcome of a run, :class:`TuneResult`,
holds its trials, the winner and why it won.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Tuple

from ..errors import ArgumentError, EdgeloadError, ProfileError
from ..measure import tree_own_bytes
from ..platform.plan import PROCESS_WORKER_BYTES, Plan, format_mib, plan_for
from ..platform.profile import (
    TUNED_FILENAME,
    WORKLOAD_KINDS,
    load_profile,
    read_profile_file,
    system_config_dir,
    user_config_dir,
    validate_settings,
)
from ..vocabulary import GPU_MEMORY_MODES
from ._profile_file import atomic_write, device_stamp, render_toml
from ._workloads import (
    DatasetWorkload,
    Measurement,
    VideoWorkload,
    Workload,
    measure,
    profile_settings,
)

__all__ = [
    "DatasetWorkload",
    "Trial",
    "TuneResult",
    "VideoWorkload",
    "Workload",
    "autotune",
    "write_profile",
]

Objective = Literal["throughput", "latency"]
# typing's generics: subscripting the builtins or collections.abc at run time needs 3.9
Config = Mapping[str, Any]
ConfigKey = Tuple[Tuple[str, Any], ...]


_SLOT_LADDER = (2, 3, 4, 6, 8, 12, 16, 24, 32)
_WORKER_LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def _knobs(
    workload: Workload, platform: Any, plan: Plan, *, tune_batch: bool, ceiling: int
) -> list[Knob]:
    cores = max(1, plan.usable_cores)
    gpu = getattr(platform, "gpu", None)
    modes = ["host"]
    if getattr(gpu, "present", False) and getattr(gpu, "cuda_usable", None) is not False:
        modes += list(GPU_MEMORY_MODES)
    opencv = getattr(platform, "opencv", None)
    backends = ["ffmpeg"] + (["gstreamer"] if getattr(opencv, "gstreamer", False) else [])
    batch = workload.batch
    batches = sorted({b for b in (batch // 4, batch // 2, batch, batch * 2, batch * 4) if b >= 1})
    batches = [b for b in batches if workload.batch_bytes(b) * 2 <= ceiling] or [batch]
    slot = max(1, plan.slot_bytes)
    every: dict[str, Knob] = {
        "worker_kind": Knob("worker_kind", ("thread", "process"), ordered=False),
        "num_workers": Knob(
            "num_workers", tuple(n for n in _WORKER_LADDER if n <= max(4, 2 * cores))
        ),
        "thread_budget": Knob("thread_budget", tuple(range(1, max(4, 2 * cores) + 1))),
        "batch_size": Knob("batch_size", tuple(batches) if tune_batch else (batch,)),
        "prefetch_bytes": Knob(
            "prefetch_bytes", tuple(n * slot for n in _SLOT_LADDER if n * slot <= ceiling)
        ),
        "memory_mode": Knob("memory_mode", tuple(modes), ordered=False),
        "decode_backend": Knob("decode_backend", tuple(backends), ordered=False),
    }
    return [every[name] for name in workload.knob_names]


def _start(workload: Workload, plan: Plan, thread_budget: int) -> dict[str, Any]:
    values = {
        "worker_kind": plan.worker_kind,
        "num_workers": plan.num_workers,
        "thread_budget": thread_budget,
        "batch_size": workload.batch,
        "prefetch_bytes": plan.slot_count * max(1, plan.slot_bytes),
        "memory_mode": plan.memory_mode,
        "decode_backend": plan.decode_backend,
    }
    return {name: values[name] for name in workload.knob_names}


def _plan(workload: Workload, platform: Any, config: Mapping[str, Any]) -> Plan:
    """The plan a loader makes from ``config`` (what really changes between configs)."""
    settings = profile_settings({k: v for k, v in config.items() if k != "batch_size"})
    profile = load_profile(platform, tuned=None, **settings)
    batch = int(config.get("batch_size", workload.batch))
    return plan_for(**workload.plan_args(batch), platform=platform, profile=profile)


def autotune(
    workload: Workload,
    *,
    platform: Any = None,
    max_memory_bytes: int | None = None,
    trial_seconds: float = 5.0,
    warmup_seconds: float | None = None,
    budget_seconds: float = 300.0,
    objective: Objective = "throughput",
    tune_batch: bool = False,
    min_gain: float = 0.05,
    max_trials: int | None = None,
    progress: Callable[[TuneResult, Mapping[str, Any] | None], None] | None = None,
) -> TuneResult:
    """Search for the best loader configuration of ``workload`` on this device.

    Args:
        workload: a :class:`VideoWorkload`, :class:`DatasetWorkload` or any Workload.
        platform: the device; default :func:`edgeload.platform.probe.probe`.
        max_memory_bytes: ceiling on the process tree's peak own memory (its anonymous
            and shared-memory PSS, see :mod:`edgeload.measure`); default 80% of usable RAM.
        trial_seconds: measured seconds per trial.
        warmup_seconds: unmeasured seconds before each trial; default a quarter of
            ``trial_seconds`` (at least 0.5 s).
        budget_seconds: stop starting trials once this much time has gone.
        objective: ``throughput`` (items/s) or ``latency`` (lowest p99 frame age or
            batch wait).
        tune_batch: also search the batch size.
        min_gain: a move must improve the score by more than this fraction.
        max_trials: stop after this many trials (None: only the budget stops it).
        progress: called before each trial with the result so far and the config about
            to run, and once at the end with None.

    Returns:
        The trials, the winner and why; ``interrupted`` is True after Ctrl-C.

    Raises:
        ArgumentError: a bad argument, or a ceiling below what one batch needs.
        SourceError: the workload's input cannot be used (checked before any trial).
    """
    if objective not in ("throughput", "latency"):
        raise ArgumentError(
            f"objective (--objective) must be 'throughput' or 'latency', got {objective!r}"
        )
    if not trial_seconds > 0 or not budget_seconds > 0:
        raise ArgumentError(
            "trial_seconds and budget_seconds (--trial-seconds, --budget-seconds) must be > 0, "
            f"got {trial_seconds} and {budget_seconds}"
        )
    if platform is None:
        from ..platform.probe import probe

        platform = probe()
    usable = getattr(getattr(platform, "memory", None), "usable_bytes", None) or (1 << 30)
    ceiling = int(max_memory_bytes if max_memory_bytes is not None else usable * 0.8)
    workload.check()
    baseline_bytes = tree_own_bytes()
    need = baseline_bytes + 2 * workload.batch_bytes(workload.batch)
    if ceiling < need:
        raise ArgumentError(
            f"max_memory_bytes (--max-memory) {format_mib(ceiling)} is below what one batch needs: this process uses "
            f"{format_mib(baseline_bytes)} and two slots of {workload.name} take "
            f"{format_mib(2 * workload.batch_bytes(workload.batch))}; raise it to at least {format_mib(need)}"
        )
    untuned = load_profile(platform, tuned=None)
    plan = plan_for(**workload.plan_args(workload.batch), platform=platform, profile=untuned)
    budget = plan.usable_cores if untuned.thread_budget == "auto" else int(untuned.thread_budget)
    knobs = _knobs(workload, platform, plan, tune_batch=tune_batch, ceiling=ceiling)
    result = TuneResult(workload.name, objective, ceiling, grid_size=grid_size(knobs))
    result.kind = str(getattr(workload, "kind", ""))
    result.budget_seconds = budget_seconds
    result.baseline_plan = plan
    result.tuned_batch = tune_batch
    warmup = warmup_seconds if warmup_seconds is not None else max(0.5, trial_seconds / 4)
    began = time.monotonic()
    last_cost = [warmup + trial_seconds]

    def identity(config: Mapping[str, Any]) -> Hashable:
        return _effective_key(_plan(workload, platform, config)), config.get("batch_size")

    def score(config: Mapping[str, Any], recheck_of: int | None = None) -> float | None:
        # The search leaves room for the two rechecks; trial 0 (the plan) always runs.
        reserve = 2 * last_cost[0] if recheck_of is None else 0.0
        elapsed = time.monotonic() - began
        if result.trials and elapsed + last_cost[0] + reserve > budget_seconds:
            raise Stop
        if recheck_of is None and max_trials is not None and len(result.trials) >= max_trials:
            raise Stop
        if progress is not None:
            progress(result, config)
        t0 = time.monotonic()
        effective = _plan(workload, platform, config)
        trial = _run_trial(workload, config, effective, len(result.trials), ceiling, baseline_bytes,
                           warmup=warmup, trial_s=trial_seconds, objective=objective)  # fmt: skip
        last_cost[0] = max(last_cost[0], time.monotonic() - t0)
        result.trials.append(dataclasses.replace(trial, recheck_of=recheck_of))
        return trial.score

    try:
        start = _start(workload, plan, budget)
        coordinate_search(knobs, start, score, min_gain=min_gain, identity=identity)
        choose_winner(result, min_gain)
        # One run can be lucky on a busy or throttling device: measure the winner and
        # the untuned plan once more, back to back, and decide on the means.
        if result.winner not in (None, 0) and result.trials[0].score is not None:
            for index in (result.winner, 0):
                score(result.trials[index].config, recheck_of=index)
    except (Stop, KeyboardInterrupt) as exc:
        result.interrupted = isinstance(exc, KeyboardInterrupt)
    result.elapsed_s = time.monotonic() - began
    choose_winner(result, min_gain)
    if progress is not None:
        progress(result, None)
    return result


def _effective_key(plan: Plan) -> tuple[Any, ...]:
    return (plan.worker_kind, plan.num_workers, plan.slot_count, plan.memory_mode,
            plan.threads, plan.decode_backend, plan.slot_bytes)  # fmt: skip


def _run_trial(
    workload: Workload,
    config: Mapping[str, Any],
    plan: Plan,
    index: int,
    ceiling: int,
    baseline: int,
    *,
    warmup: float,
    trial_s: float,
    objective: Objective,
) -> Trial:
    held = plan.slot_count * plan.slot_bytes
    workers = plan.num_workers * PROCESS_WORKER_BYTES if plan.worker_kind == "process" else 0
    if baseline + held + workers > ceiling:
        estimate = format_mib(baseline + held + workers)
        return Trial(index, dict(config), f"skipped: needs ~{estimate} > ceiling")
    try:
        got = measure(workload, config, warmup_s=warmup, trial_s=trial_s)
    except EdgeloadError as exc:
        return Trial(index, dict(config), f"failed: {exc}")
    except (OSError, RuntimeError, ValueError) as exc:  # one bad configuration, not the run
        return Trial(index, dict(config), f"failed: {type(exc).__name__}: {exc}")
    if got.peak_own_bytes > ceiling:
        return Trial(index, dict(config), "over memory", got)
    value = got.items_per_s if objective == "throughput" else 1000.0 / max(got.latency_p99_ms, 1e-3)
    return Trial(index, dict(config), "ok", got, value)


def write_profile(
    result: TuneResult,
    *,
    platform: Any = None,
    path: str | Path | None = None,
    system: bool = False,
) -> Path:
    """Write the winner as a stamped tuned profile: :meth:`TuneResult.write`.

    Raises:
        ProfileError: no trial was accepted, or the file cannot be written.
    """
    return result.write(path, platform=platform, system=system)


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
    kind: str = ""
    """The workload's kind (``dataset``, ``video``): the profile table the winner goes to
    (``[profile]``, for every loader, when it is neither)."""
    budget_seconds: float | None = None
    """The time budget the run had (for the reason when it measured too little)."""

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
        # A dataset's numbers say nothing about a camera's: they go to the table of the
        # workload's kind, and the other kind's table in the file stays.
        table = self.kind if self.kind in WORKLOAD_KINDS else "profile"
        tables: dict[str, Mapping[str, Any]] = {"tuned": stamp}
        if table != "profile":
            tables.update(_other_tables(target, stamp, keep=set(WORKLOAD_KINDS) - {table}))
        tables[table] = settings
        atomic_write(target, render_toml(tables, comment=comment))
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


def _other_tables(
    path: Path, stamp: Mapping[str, str], *, keep: set[str]
) -> dict[str, Mapping[str, Any]]:
    """The ``keep`` tables of the profile already at ``path``, when it was tuned on this
    device (same model); nothing when there is none or it cannot be read."""
    try:
        found = read_profile_file(path) if path.is_file() else None
    except ProfileError:
        return {}
    if found is None or found.tuned.get("model") != stamp.get("model"):
        return {}
    return {kind: found.workloads[kind] for kind in sorted(keep) if kind in found.workloads}


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
    result.winner = None
    if len(ok) < 2:
        result.reason = _too_few(result, ok)
        return
    baseline = 0 if any(c[0] == 0 for c in ok) else None
    picked = pick_winner(ok, min_gain=min_gain, baseline=baseline)
    if picked is None:  # pragma: no cover - two candidates always give a pick
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
        vs_plan = f"; the untuned plan was already best (no other beat it by over {min_gain:.0%})"
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


def _too_few(result: TuneResult, ok: list[tuple[int, float, int]]) -> str:
    """Why there is no winner: fewer than two configurations were measured."""
    unit = "items/s" if result.objective == "throughput" else "/s (1000 / p99 ms)"
    measured = "; ".join(
        f"trial {i}{' (the untuned plan)' if i == 0 else ''}: {score:.1f} {unit}"
        for i, score, _ in ok
    )
    failed = len([t for t in result.trials if t.score is None])
    what = f"{len(ok)} configuration(s) measured ({measured})" if ok else "no trial finished"
    if failed:
        what += f", {failed} rejected (over the memory ceiling, or failed)"
    if result.interrupted:
        hint = "run it again to the end"
    elif ok or not failed:
        was = f" (it was {result.budget_seconds:g} s)" if result.budget_seconds else ""
        hint = f"raise --budget-seconds{was} or lower --trial-seconds"
    else:
        hint = "raise --max-memory, or see each trial's status above"
    return (
        f"{what} of {result.grid_size or '?'} configurations: nothing to compare with, so "
        f"nothing was tuned and the untuned plan stays; {hint}"
    )


@dataclass(frozen=True)
class Knob:
    """One dimension of the search."""

    name: str
    """The profile key it sets."""
    values: tuple[Any, ...]
    """Every value it may take; ascending for an ordered knob."""
    ordered: bool = True
    """True: try neighbours in order (counts, bytes); False: try every value (kinds)."""


def config_key(config: Config) -> ConfigKey:
    """A hashable, order-independent key for a configuration."""
    return tuple(sorted(config.items()))


class Stop(Exception):
    """Raised by a score function to end the search early (budget spent)."""


def coordinate_search(
    knobs: list[Knob],
    start: Config,
    score: Callable[[Config], float | None],
    *,
    min_gain: float = 0.05,
    identity: Callable[[Config], Hashable] = config_key,
) -> dict[str, Any]:
    """Hill-climb from ``start``, one knob at a time; return the configuration reached.

    ``score`` is called once per distinct configuration (results are cached here), may
    raise :class:`Stop` to end the search, and returns None for a rejected configuration.

    Args:
        knobs: the dimensions; a knob with one value is skipped.
        start: the first configuration (the plan's); its values need not be in the knobs'
            value lists (they are added).
        score: higher is better; None rejects.
        min_gain: a move must raise the score by more than this fraction (measurement noise).
        identity: configurations with equal identity run identically (a loader that caps
            a value, a rule that rounds it): each is scored once, and a step that lands on
            the same identity steps on instead of ending the line.
    """
    cache: dict[Hashable, float | None] = {}

    def evaluate(config: Config) -> float:
        key = identity(config)
        if key not in cache:
            cache[key] = score(config)
        value = cache[key]
        return -1.0 if value is None else value

    def better(new: float, old: float) -> bool:
        if old <= 0:
            return new > 0
        return new > old * (1.0 + min_gain)

    dims = [_with_start(k, start[k.name]) for k in knobs if k.name in start]
    search = _Search([k for k in dims if len(k.values) > 1], evaluate, better, identity)
    current = dict(start)
    best = evaluate(current)
    try:
        moved = True
        while moved:
            moved = False
            for knob in search.dims:
                found, value = search.line(knob, current, best)
                if found is not None:
                    current, best, moved = found, value, True
    except Stop:
        pass
    return current


def _with_start(knob: Knob, value: Any) -> Knob:
    if value in knob.values:
        return knob
    values = (*knob.values, value)
    if knob.ordered:
        values = tuple(sorted(values))
    return Knob(knob.name, values, knob.ordered)


@dataclass
class _Search:
    dims: list[Knob]
    evaluate: Callable[[Config], float]
    better: Callable[[float, float], bool]
    identity: Callable[[Config], Hashable]

    def line(
        self, knob: Knob, current: dict[str, Any], best: float, *, refine: bool = True
    ) -> tuple[dict[str, Any] | None, float]:
        """Move ``knob`` while the score improves; (new config or None, its score)."""
        if not knob.ordered:
            return self._categorical(knob, current, best, refine=refine)
        here = knob.values.index(current[knob.name])
        for step in (1, -1):
            found: dict[str, Any] | None = None
            index = here + step
            while 0 <= index < len(knob.values):
                trial = {**current, knob.name: knob.values[index]}
                index += step
                if self.identity(trial) == self.identity(current):
                    continue  # runs the same as where we are: look one further
                got = self.evaluate(trial)
                if not self.better(got, best):
                    break
                found, best, current = trial, got, trial
            if found is not None:
                return found, best
        return None, best

    def _categorical(
        self, knob: Knob, current: dict[str, Any], best: float, *, refine: bool
    ) -> tuple[dict[str, Any] | None, float]:
        # Another kind often wants other counts (processes pay off with more workers
        # than threads do), so each alternative gets one pass over the ordered knobs
        # before it is compared with where the search stands.
        found: dict[str, Any] | None = None
        for value in knob.values:
            trial = {**current, knob.name: value}
            if self.identity(trial) == self.identity(current):
                continue
            got = self.evaluate(trial)
            if refine:
                for other in self.dims:
                    if other.ordered:
                        moved, value_got = self.line(other, trial, got, refine=False)
                        if moved is not None:
                            trial, got = moved, value_got
            if self.better(got, best):
                found, best = trial, got
        return found, best


def grid_size(knobs: list[Knob]) -> int:
    """How many configurations the full grid over ``knobs`` has."""
    total = 1
    for knob in knobs:
        total *= max(1, len(knob.values))
    return total


def pick_winner(
    candidates: list[tuple[int, float, int]], *, min_gain: float, baseline: int | None = None
) -> tuple[int, bool] | None:
    """Choose among ``(index, score, peak_bytes)``: the best score, or within ``min_gain``
    of it the one using the least memory.  Returns ``(index, chosen_for_memory)``.

    With a ``baseline`` (the untuned plan's index), only candidates that beat its score
    by more than ``min_gain`` compete with it: a smaller gain is noise, and the baseline
    stays."""
    base = next((c for c in candidates if c[0] == baseline), None)
    if base is not None:
        candidates = [c for c in candidates if c is base or c[1] > base[1] * (1.0 + min_gain)]
    if not candidates:
        return None
    top = max(candidates, key=lambda c: (c[1], -c[2]))
    close = [c for c in candidates if c[1] * (1.0 + min_gain) >= top[1]]
    lean = min(close, key=lambda c: (c[2], -c[1]))
    # A memory saving counts when it is more than noise (2% of the fastest's peak).
    if lean[0] != top[0] and lean[2] < top[2] * 0.98:
        return lean[0], True
    return top[0], False
