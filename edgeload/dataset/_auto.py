"""The loader's one call into the plan: what ``"auto"`` means on this device."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loader import DataLoader

_log = logging.getLogger("edgeload")


@dataclass(frozen=True)
class LoaderChoice:
    """The resolved settings of one loader."""

    plan: Any
    """The :class:`~edgeload.platform.plan.Plan` consulted (None when nothing was left on auto)."""
    num_workers: int
    worker_kind: str
    """``"main"`` (num_workers=0), ``"thread"`` or ``"process"``."""
    pin_memory: bool
    memory_mode: str
    """Slot memory: the plan's mode (``host`` without CUDA)."""
    memory_mode_reason: str
    slot_count: int
    prefetch_bytes: int | None


def _start_method(loader: DataLoader[Any]) -> str | None:
    context = loader.multiprocessing_context
    if context is None or isinstance(context, str):
        return context
    get = getattr(context, "get_start_method", None)
    return str(get()) if callable(get) else None


def resolve_plan(loader: DataLoader[Any]) -> LoaderChoice:
    """Fill what ``loader`` left on ``"auto"`` from ``edgeload.platform.plan.plan_for``."""
    from ..platform.plan import plan_for

    explicit_kind = loader.worker_kind if loader.worker_kind != "auto" else None
    if explicit_kind is None and loader.multiprocessing_context is not None:
        # A start method only means something for processes: the user asked for them.
        explicit_kind = "process"
    explicit_count = loader.num_workers if loader.num_workers != "auto" else None
    # An explicit mode on an explicit engine was checked against that engine (in the
    # constructor); the plan judges modes by this machine's probe, which knows no engine.
    engine_mode = getattr(loader, "engine", None) is not None and loader.memory_mode != "auto"
    plan = plan_for(
        batch=loader.batch_size or 1,
        prefetch_bytes=loader.prefetch_bytes,
        worker_kind=explicit_kind,
        # The profile knows no 0 ("load in the calling thread"): ask for 1 and ignore it.
        num_workers=explicit_count or None,
        memory_mode=None if loader.memory_mode == "auto" or engine_mode else loader.memory_mode,
    )
    count = int(plan.num_workers if explicit_count is None else explicit_count)
    kind = plan.worker_kind if explicit_kind is None else explicit_kind
    pin = loader.pin_memory
    if pin == "auto":
        # Pinning initialises CUDA in this process, after which fork is refused: with
        # fork workers that are started again each epoch, auto stays unpinned.
        refork = _start_method(loader) == "fork" and not loader.persistent_workers
        pin = plan.memory_mode == "pinned" and not refork
    elif pin:
        from ._device import gpu_usable

        if not gpu_usable(getattr(loader, "engine", None)):
            _log.warning("edgeload: pin_memory=True but no CUDA device: batches stay unpinned")
            pin = False
    # One slot per task in flight (see DataLoader._max_in_flight), one for the batch the
    # user holds and one for the batch being handed over: `for batch in loader` still
    # holds the previous batch while the next is leased.
    in_flight = (2 if loader.prefetch_factor is None else loader.prefetch_factor) * count
    _log.info("edgeload: DataLoader plan: %d %s worker(s); %s", count, kind, plan.reasons)
    return LoaderChoice(
        plan=plan,
        num_workers=count,
        worker_kind="main" if count == 0 else str(kind),
        pin_memory=bool(pin),
        memory_mode=str(loader.memory_mode if engine_mode else plan.memory_mode),
        memory_mode_reason=(
            f"asked for explicitly, on the {loader.engine.name} engine"
            if engine_mode
            else str(plan.reasons.get("memory_mode", ""))
        ),
        slot_count=max(2, in_flight + 2),
        prefetch_bytes=loader.prefetch_bytes or int(plan.prefetch_bytes) or None,
    )


def apply_plan(loader: DataLoader[Any]) -> None:
    """Resolve ``loader``'s plan and set what follows from it: workers, pinning, slots."""
    from ._slots import LoaderSlots
    from ._thread_seeds import install_seed_hooks
    from ._worker_ctx import install_torch_hook

    choice = resolve_plan(loader)
    loader.plan = choice.plan
    loader._num_workers_resolved = choice.num_workers
    loader.worker_kind_resolved = choice.worker_kind
    loader._pin = choice.pin_memory
    if choice.worker_kind == "thread":
        install_torch_hook()
        install_seed_hooks()
    # GPU memory modes cannot be shared with processes: those get host slots.
    loader._memory_mode = "host" if choice.worker_kind == "process" else choice.memory_mode
    loader._memory_mode_reason = (
        "process workers write shared host slots"
        if loader._memory_mode != choice.memory_mode
        else choice.memory_mode_reason
    )
    loader._slots = LoaderSlots(
        enabled=loader.collate_fn is None and loader._sampling.auto_collation,
        count=choice.slot_count,
        budget_bytes=choice.prefetch_bytes,
        shared=choice.worker_kind == "process",
        mode=loader._memory_mode,
        engine=loader.engine,
    )
