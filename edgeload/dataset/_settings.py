"""What one epoch of a DataLoader runs with: the user's settings and the plan's choices.

The loader reads its attributes at each ``iter()`` (torch lets users assign
``num_workers``, ``timeout`` and friends between epochs) and freezes them here, so the
epoch, its executor and its workers never read the loader itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, Union

from ..vocabulary import WorkerKind
from ._collate import SlotMap
from ._sampling import Sampling

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
    engine: Any
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
    engine: Any
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
