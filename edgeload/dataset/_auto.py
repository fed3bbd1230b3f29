"""The loader's one call into the plan: what ``"auto"`` means on this device."""

from __future__ import annotations

import logging

from ..cuda.slot_mode import slot_memory_mode
from ..vocabulary import WorkerKind
from ._settings import LoaderChoice, LoaderWorkerKind, PlanRequest, start_method_of

_log = logging.getLogger("edgeload")


def resolve_plan(asked: PlanRequest) -> LoaderChoice:
    """Fill what the user left on ``"auto"`` from ``edgeload.platform.plan.plan_for``."""
    from ..platform.plan import plan_for, tasks_in_flight

    explicit_kind: WorkerKind | None = None
    if asked.worker_kind == "thread":
        explicit_kind = "thread"
    elif asked.worker_kind == "process" or asked.multiprocessing_context is not None:
        # A start method only means something for processes: the user asked for them.
        explicit_kind = "process"
    explicit_count = asked.num_workers if asked.num_workers != "auto" else None
    # The plan proposes this device's memory mode; an asked one is checked below, on
    # the loader's engine when it has one (the plan's probe knows no engine).
    plan = plan_for(
        batch=asked.batch_size or 1,
        prefetch_bytes=asked.prefetch_bytes,
        worker_kind=explicit_kind,
        # The profile knows no 0 ("load in the calling thread"): ask for 1 and ignore it.
        num_workers=explicit_count or None,
    )
    count = int(plan.num_workers if explicit_count is None else explicit_count)
    kind: LoaderWorkerKind = "main"
    if count > 0:
        kind = plan.worker_kind if explicit_kind is None else explicit_kind
    # GPU memory modes cannot be shared with processes: those get host slots.
    mode, reason = slot_memory_mode(
        asked.memory_mode,
        plan.memory_mode,
        str(plan.reasons.get("memory_mode", "")),
        engine=asked.engine,
        shared=kind == "process",
    )
    wanted = plan.memory_mode if asked.memory_mode == "auto" else asked.memory_mode
    pin = asked.pin_memory
    if pin == "auto":
        # Pinning initialises CUDA in this process, after which fork is refused: with
        # fork workers that are started again each epoch, auto stays unpinned.
        method = start_method_of(asked.multiprocessing_context)
        refork = method == "fork" and not asked.persistent_workers
        pin = wanted == "pinned" and not refork
    elif pin:
        from ._device import gpu_usable

        if not gpu_usable(asked.engine):
            _log.warning("edgeload: pin_memory=True but no CUDA device: batches stay unpinned")
            pin = False
    # LoaderSettings.max_in_flight caps this further by the prefetch budget.
    in_flight = tasks_in_flight(count, asked.prefetch_factor)
    _log.info("edgeload: DataLoader plan: %d %s worker(s); %s", count, kind, plan.reasons)
    return LoaderChoice(
        plan=plan,
        num_workers=count,
        worker_kind=kind,
        pin_memory=bool(pin),
        memory_mode=mode,
        memory_mode_reason=reason,
        in_flight=in_flight,
        prefetch_bytes=asked.prefetch_bytes or int(plan.prefetch_bytes) or None,
    )
