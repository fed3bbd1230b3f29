"""Deploy-time auto-tune: measure the real workload on the device, keep the best plan.

:func:`autotune` starts from the plan edgeload would use untuned, then moves one knob at
a time (worker kind, worker count, thread budget, batch size when asked, prefetch bytes,
memory mode, decode backend) toward the measured gain (``_autotune_search``), each
trial a real loader warmed up and then measured for throughput, latency percentiles,
peak PSS of the process tree (and its own, anonymous + shared-memory, part) and CPU use.
Trials whose own memory passes the ceiling are rejected.
:func:`write_profile` stores the winner as a stamped TOML profile where
:func:`edgeload.platform.profile.load_profile` finds it, so every later loader on the device
plans with it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, EdgeloadError
from ..measure import tree_own_bytes
from ..platform.plan import PROCESS_WORKER_BYTES, Plan, format_mib, plan_for
from ..platform.profile import load_profile
from ..vocabulary import GPU_MEMORY_MODES
from ._loaders import DatasetWorkload, VideoWorkload
from ._result import Objective, Trial, TuneResult, choose_winner
from ._search import Knob, Stop, coordinate_search, grid_size
from ._workloads import Workload, measure, profile_settings

__all__ = [
    "DatasetWorkload",
    "Trial",
    "TuneResult",
    "VideoWorkload",
    "Workload",
    "autotune",
    "write_profile",
]

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
