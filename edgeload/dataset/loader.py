"""``DataLoader``: torch's DataLoader arguments, with the device choosing the workers.

Same samples in the same order as ``torch.utils.data.DataLoader`` for the same
arguments and seeds (it uses torch's own samplers, seeding rules and worker
assignment); in addition ``num_workers="auto"`` / ``worker_kind="auto"`` take the
device plan (how many workers fit the usable cores; threads, which suit decoding that
releases the GIL and share memory, unless the profile or ``worker_kind="process"`` asks
for processes), fixed-size samples are collated straight into reusable slots, and
``state_dict()`` resumes mid-epoch exactly, for thread and process workers alike.

One iterator is live at a time: ``iter(loader)`` ends the previous pass (torch does the
same with ``persistent_workers=True``).  The loader holds its iterator weakly, so ``del``
of an unfinished iterator stops its workers at once, as torch's does.

``num_workers`` defaults to 0, as in torch: the default never changes the data (an
IterableDataset that does not shard itself would yield every sample once per worker).
``num_workers="auto"`` opts into the device plan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from ..errors import ClosedError
from ..pipeline.lifecycle import Lifecycle
from ._epoch import EpochIterator
from ._runner import EpochRunner
from ._sampling import check_shuffles_are_seedable
from ._settings import UNPLANNED, LoaderChoice, epoch_settings, plan_request, resolve_plan
from ._state import LoaderState, apply_loader_state, loader_state
from ._torch_surface import TorchSurface
from ._worker import get_worker_info

__all__ = ["DataLoader", "get_worker_info"]

# Settings fixed when the workers are first planned; a change re-plans at the next iter().
_PLANNED = (
    "num_workers",
    "worker_kind",
    "pin_memory",
    "memory_mode",
    "prefetch_bytes",
    "multiprocessing_context",
)

T_co = TypeVar("T_co", covariant=True)


class DataLoader(TorchSurface, Generic[T_co]):
    """Batches from a dataset, like ``torch.utils.data.DataLoader``, sized for the device.

    Args:
        dataset: a map-style or iterable-style dataset (torch's sense).
        batch_size, shuffle, sampler, batch_sampler, collate_fn, drop_last, timeout,
        worker_init_fn, multiprocessing_context, generator, prefetch_factor,
        persistent_workers, pin_memory_device, in_order: as in torch (``timeout`` in
            seconds, 0 = none; ``pin_memory_device`` is deprecated there and ignored).
        num_workers: a count (0, the default as in torch, loads in the calling thread),
            or ``"auto"``: the plan's.
        pin_memory: True, False or ``"auto"`` (pin when the plan's memory mode is
            ``pinned``; on a device without CUDA that is never).
        worker_kind: ``"thread"``, ``"process"`` or ``"auto"`` (the plan's).
        prefetch_bytes: bound on the bytes of prefetched batches (default: the plan's).
        memory_mode: slot memory: ``"auto"`` (the plan's), ``"host"``, or a GPU mode
            (``"pinned"``, ``"mapped"``, ``"managed"``; thread workers only). A slot
            the user drops goes back to the pool only once the GPU work queued on its
            stream meanwhile (``batch.cuda(non_blocking=True)``) has completed.
        engine: the GPU engine for ``pin_memory`` and the GPU modes (default: CUDA
            through torch; ``edgeload.cuda.host_engine.HostEngine`` runs them on the CPU).
        on_error: ``"raise"`` (WorkerError naming the sample) or ``"skip"`` (drop the
            sample, count it in ``stats()``; more than ``max_skips`` in one epoch raises).
        max_skips: most samples skipped per epoch with ``on_error="skip"``.

    Raises:
        ValueError: an argument torch rejects (same wording) or a bad edgeload one;
            also assigning ``batch_size``, ``sampler``, ``batch_sampler``, ``drop_last``,
            ``dataset`` or ``persistent_workers`` after construction, as torch.
        TypeError: ``multiprocessing_context`` that is no context nor start method.
        PlatformError: an explicit GPU ``memory_mode`` this machine cannot give (the
            message names the mode that would work).

    Iterating raises the dataset's own exception type mixed with
    :class:`~edgeload.errors.WorkerError` (see :mod:`edgeload.errors`),
    :class:`~edgeload.errors.WorkerDied` / :class:`~edgeload.errors.WorkerTimeout`
    (RuntimeErrors, as torch's) and :class:`~edgeload.errors.PlatformError` (a memory
    mode this device lacks). ``plan`` holds the plan consulted; ``stats()`` the counters.
    """

    def _setup(self) -> None:
        self._choice: LoaderChoice = UNPLANNED
        self._planned: tuple[Any, ...] | None = None
        self._state = LoaderState()
        self._runner = EpochRunner(self._state)
        self._lifecycle = Lifecycle.UNOPENED  # OPEN from the first iter(), CLOSED by close()

    @property
    def plan(self) -> Any:
        """The :class:`~edgeload.platform.plan.Plan` consulted (None before the first)."""
        return self._choice.plan

    @property
    def worker_kind_resolved(self) -> str:
        """``"main"`` (num_workers=0), ``"thread"`` or ``"process"``, as planned."""
        return self._choice.worker_kind

    @property
    def _num_workers_resolved(self) -> int:
        return self._choice.num_workers

    @property
    def _iter(self) -> EpochIterator | None:
        return self._runner.live

    # torch's surface ---------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Start an epoch (or resume the one loaded by ``load_state_dict``)."""
        if self._lifecycle is Lifecycle.CLOSED:
            raise ClosedError("DataLoader: iter() after close()")
        self._lifecycle = Lifecycle.OPEN
        self._runner.abandon()
        self._resolve()
        check_shuffles_are_seedable(self.dataset, self._choice.num_workers)
        settings = epoch_settings(self, self._choice)
        return self._runner.start(settings, length=self.__len__, len_called=self._len_called)

    def _resolve(self) -> None:
        """Take the plan's choices for what the user left on ``"auto"``.

        Once, and again when a setting it depends on was assigned since (torch reads
        ``num_workers`` and friends at each ``iter()``).
        """
        planned = tuple(getattr(self, name) for name in _PLANNED)
        if self._planned == planned:
            return
        self._planned = planned
        self._choice = resolve_plan(plan_request(self))
        slots = self.collate_fn is None and self._sampling.auto_collation
        self._runner.replan(self._choice, slots_enabled=slots, engine=self.engine)

    # Checkpoint ----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: plain JSON data; see :func:`edgeload.save_state`.

        Taken after batch k, loading it into a loader built with the same arguments
        gives exactly batches k+1... of the uninterrupted run.
        """
        return loader_state(
            self._state,
            num_workers=self._choice.num_workers,
            worker_kind=self._choice.worker_kind,
            live=self._runner.live_state(),
            generator=self.generator,
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next ``iter()``.

        Raises:
            ValueError: not a loader state, or one of another version.
        """
        self._runner.abandon()
        apply_loader_state(self._state, state, generator=self.generator)

    def stats(self) -> dict[str, Any]:
        """Counters: batches, epochs, samples skipped (and the last few), workers, memory
        mode and why, slots. Before the first ``iter()`` they show what the plan chose."""
        if self._lifecycle is not Lifecycle.CLOSED:
            self._resolve()
        return self._runner.stats(self._choice)

    # Lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the workers and free the slots; idempotent."""
        if self._lifecycle is Lifecycle.CLOSED:
            return
        self._lifecycle = Lifecycle.CLOSED
        self._runner.close()

    def __enter__(self) -> DataLoader[T_co]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()
