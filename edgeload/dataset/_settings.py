"""What one epoch of a DataLoader runs with: the user's settings and the plan's choices.

The loader reads its attributes at each ``iter()`` (torch lets users assign
``num_workers``, ``timeout`` and friends between epochs) and freezes them here, so the
epoch, its executor and its workers never read the loader itself.  What ``"auto"``
means on this device comes from the loader's one call into the plan,
:func:`resolve_plan`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Union

from .._deps import require_torch
from ..cuda.slot_mode import slot_memory_mode
from ..vocabulary import WorkerKind
from ._collate import SlotMap
from ._sampling import Sampling

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine

_log = logging.getLogger("edgeload")

LoaderWorkerKind = Union[WorkerKind, Literal["main"]]
"""Who runs a loader's tasks: worker threads or processes, or ``"main"`` - the calling
thread, for ``num_workers=0`` (torch's "main process" loading)."""


@dataclass(frozen=True)
class PlanRequest:
    """What the user asked of the plan: the loader's settings that ``"auto"`` can fill,
    and what they depend on (each field is named after the DataLoader attribute)."""

    num_workers: Any
    """A count, or ``"auto"``."""
    worker_kind: str
    """``"thread"``, ``"process"`` or ``"auto"``."""
    pin_memory: Any
    """True, False or ``"auto"``."""
    memory_mode: str
    """A memory mode, or ``"auto"``."""
    prefetch_bytes: int | None
    multiprocessing_context: Any
    """A start method (or context) means processes were asked for."""
    batch_size: int | None
    prefetch_factor: int | None
    persistent_workers: bool
    engine: Engine | None
    """The GPU engine, or None for CUDA through torch."""


@dataclass(frozen=True)
class LoaderChoice:
    """What the plan resolved for one loader."""

    plan: Any
    """The :class:`~edgeload.platform.plan.Plan` consulted (None before the first plan)."""
    num_workers: int
    worker_kind: LoaderWorkerKind
    pin_memory: bool
    memory_mode: str
    """Slot memory: the plan's mode (``host`` without CUDA, and for process workers)."""
    memory_mode_reason: str
    in_flight: int
    """Most tasks in flight (``platform.plan.tasks_in_flight``), before the prefetch
    budget caps them; the slots are sized from it once the first batch shows the layout."""
    prefetch_bytes: int | None
    """Bound on the bytes of batches in flight (the user's, else the plan's)."""


UNPLANNED = LoaderChoice(
    plan=None,
    num_workers=0,
    worker_kind="main",
    pin_memory=False,
    memory_mode="host",
    memory_mode_reason="not planned: the loader was closed before its first iter()",
    in_flight=0,
    prefetch_bytes=None,
)
"""What a loader reports before (and without) a plan."""


@dataclass(frozen=True)
class LoaderSettings:
    """One epoch's settings: the loader's attributes at ``iter()`` and the plan's choice."""

    dataset: Any
    sampling: Sampling
    collate_fn: Callable[[Any], Any] | None
    worker_init_fn: Callable[[int], None] | None
    context: Any
    """torch's ``multiprocessing_context``: None, a start method or a context."""
    generator: Any
    """torch's ``generator``: where the epoch's base seed and shuffle are drawn from."""
    timeout_s: float | None
    """Longest wait for one batch (None: no limit; torch's ``timeout=0``)."""
    in_order: bool
    skip_errors: bool
    """``on_error="skip"``: a sample whose loading raises is dropped and counted."""
    max_skips: int
    prefetch_factor: int | None
    persistent_workers: bool
    engine: Engine | None
    choice: LoaderChoice

    @property
    def num_workers(self) -> int:
        return self.choice.num_workers

    @property
    def worker_kind(self) -> LoaderWorkerKind:
        return self.choice.worker_kind

    @property
    def persistent(self) -> bool:
        """Workers live across epochs (``persistent_workers`` with workers to keep)."""
        return self.persistent_workers and self.num_workers > 0

    def max_in_flight(self, layout: SlotMap | None) -> int:
        """Tasks handed to workers and not yet yielded: the plan's
        ``tasks_in_flight`` (``prefetch_factor`` per worker, by default 2 as torch), and
        no more than the prefetch budget of fixed-size batches."""
        from ..platform.plan import tasks_in_flight

        if self.num_workers == 0:
            return 1
        limit = tasks_in_flight(self.num_workers, self.prefetch_factor)
        budget = self.choice.prefetch_bytes
        if layout is not None and budget:
            limit = min(limit, max(1, budget // layout.nbytes))
        return limit


def plan_request(loader: Any) -> PlanRequest:
    """The :class:`PlanRequest` of ``loader``'s attributes as they are now."""
    return PlanRequest(**{f.name: getattr(loader, f.name) for f in fields(PlanRequest)})


def epoch_settings(loader: Any, choice: LoaderChoice) -> LoaderSettings:
    """The :class:`LoaderSettings` of ``loader``'s attributes as they are now, with the
    plan's ``choice``."""
    return LoaderSettings(
        dataset=loader.dataset,
        sampling=loader._sampling,
        collate_fn=loader.collate_fn,
        worker_init_fn=loader.worker_init_fn,
        context=loader.multiprocessing_context,
        generator=loader.generator,
        timeout_s=loader.timeout or None,
        in_order=loader.in_order,
        skip_errors=loader.on_error == "skip",
        max_skips=loader.max_skips,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
        engine=loader.engine,
        choice=choice,
    )


def start_method_of(context: Any) -> str | None:
    """The start method ``multiprocessing_context`` names (a name or a context), if any."""
    if context is None or isinstance(context, str):
        return context
    get = getattr(context, "get_start_method", None)
    return str(get()) if callable(get) else None


# The loader's one call into the plan: what "auto" means on this device ----------------


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
    elif pin and not gpu_usable(asked.engine):
        _log.warning("edgeload: pin_memory=True but no CUDA device: batches stay unpinned")
        pin = False
    # LoaderSettings.max_in_flight caps this further by the prefetch budget.  Without
    # workers the calling thread loads one task at a time: one in flight all the same,
    # and the slots must count it, or a plain loop (which holds the previous batch while
    # the next is loaded) leaves the pool no slot to spare and gets copies.
    in_flight = tasks_in_flight(count, asked.prefetch_factor) if count > 0 else 1
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


def gpu_usable(engine: Engine | None) -> bool:
    """Whether pinning means anything here (a CUDA device, or the given engine)."""
    if engine is not None:
        return bool(engine.status().usable)
    return bool(require_torch().cuda.is_available())
