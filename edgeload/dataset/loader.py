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
import logging
import math
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, Literal, TypeVar

from ..errors import ClosedError, WorkerError
from ..pipeline.lifecycle import State
from ._checks import FROZEN, check_arguments, check_context, warn_worker_count
from ._datapipes import draw_shared_seed, is_iter_datapipe
from ._device import check_gpu_mode, pin_batch
from ._epoch import EpochIterator
from ._executor import make_loader_executor
from ._resume import KEY_EPOCH, KEY_ORDER, KEY_PROGRESS, apply_loader_state, loader_state
from ._sampling import EpochOrder, build_sampling
from ._slots import LoaderSlots
from ._worker_ctx import get_worker_info

__all__ = ["DataLoader", "get_worker_info"]

_log = logging.getLogger("edgeload")

# Skipped samples remembered for stats(), newest last.
_SKIP_MEMORY = 32
# Settings fixed when the workers are first planned; a change re-plans at the next iter().
_PLANNED = (
    "num_workers",
    "worker_kind",
    "pin_memory",
    "memory_mode",
    "prefetch_bytes",
    "multiprocessing_context",
)
# The key in an epoch's order state of the DataPipe shuffle seed.
KEY_SHARED_SEED = "shared_seed"

T_co = TypeVar("T_co", covariant=True)


class DataLoader(Generic[T_co]):
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

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int | Literal["auto"] = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool | Literal["auto"] = "auto",
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        worker_kind: Literal["auto", "thread", "process"] = "auto",
        prefetch_bytes: int | None = None,
        memory_mode: str = "auto",
        on_error: Literal["raise", "skip"] = "raise",
        max_skips: int = 0,
        engine: Any = None,
    ) -> None:
        check_arguments(
            num_workers=num_workers,
            timeout=timeout,
            worker_kind=worker_kind,
            on_error=on_error,
            max_skips=max_skips,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            prefetch_bytes=prefetch_bytes,
        )
        check_gpu_mode(memory_mode, engine)
        self.engine = engine
        context = check_context(multiprocessing_context, num_workers)
        self.dataset = dataset
        self._sampling = build_sampling(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            drop_last=drop_last,
            generator=generator,
        )
        self.batch_size = self._sampling.batch_size
        self.drop_last = self._sampling.drop_last
        self.sampler = self._sampling.sampler
        self.batch_sampler = self._sampling.batch_sampler
        self.generator = generator
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = context
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.pin_memory_device = pin_memory_device
        if pin_memory and pin_memory_device:
            warnings.warn(
                "pin_memory_device is deprecated, the current accelerator will be used as the "
                f"device,ignore pin_memory_device='{pin_memory_device}'.",
                stacklevel=2,
            )
        self.in_order = in_order
        self.worker_kind = worker_kind
        self.prefetch_bytes = prefetch_bytes
        self.memory_mode = memory_mode
        self.on_error = on_error
        self.max_skips = max_skips
        self.plan: Any = None
        self._num_workers_resolved = 0
        self.worker_kind_resolved = "main"
        self._executor: Any = None
        self._slots: LoaderSlots = LoaderSlots(
            enabled=False, count=2, budget_bytes=None, shared=False, mode="host"
        )
        self._memory_mode = "host"
        self._memory_mode_reason = "not planned: the loader was closed before its first iter()"
        self._planned: tuple[Any, ...] | None = None
        self._iter_ref: weakref.ref[EpochIterator] | None = None
        self._len_called: int | None = None
        self._epoch = 0
        self._base_seed: int | None = None
        self._resume: dict[str, Any] | None = None
        self._pin = False
        self._state = State.UNOPENED  # OPEN from the first iter(), CLOSED by close()
        self._counters = {"batches": 0, "samples_skipped": 0, "epochs": 0}
        self._skips: list[tuple[Any, str]] = []
        self._start_method = ""
        self._start_method_reason = ""
        warn_worker_count(num_workers, threads=worker_kind == "thread")
        self._initialized = True

    def __setattr__(self, name: str, value: Any) -> None:
        initialized = self.__dict__.get("_initialized", False)
        if initialized and name in FROZEN:
            raise ValueError(
                f"{name} attribute should not be set after {type(self).__name__} is "
                "initialized; build a new DataLoader with the new value"
            )
        if initialized and name == "multiprocessing_context":
            value = check_context(value, self.num_workers)
        super().__setattr__(name, value)

    # torch's private names that code outside torch reads.
    @property
    def _auto_collation(self) -> bool:
        return self._sampling.auto_collation

    @property
    def _index_sampler(self) -> Any:
        return self._sampling.index_sampler

    @property
    def _iter(self) -> EpochIterator | None:
        return None if self._iter_ref is None else self._iter_ref()

    @_iter.setter
    def _iter(self, it: EpochIterator | None) -> None:
        self._iter_ref = None if it is None else weakref.ref(it)

    # torch's surface ---------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch, as torch counts them (iterable datasets: from ``len()``)."""
        s = self._sampling
        if s.iterable:
            length = self._len_called = len(self.dataset)
            if s.batch_size is not None:
                length = length // s.batch_size if s.drop_last else math.ceil(length / s.batch_size)
            return int(length)
        return len(s.index_sampler)

    def __iter__(self) -> Iterator[Any]:
        """Start an epoch (or resume the one loaded by ``load_state_dict``)."""
        if self._state is State.CLOSED:
            raise ClosedError("DataLoader: iter() after close()")
        self._state = State.OPEN
        if self._iter is not None and not self._iter._done:
            self._abandon()
        self._resolve()
        order = EpochOrder(self._sampling, self.generator)
        resume, self._resume = self._resume, None
        shared: int | None = None
        if resume is not None:
            self._epoch = int(resume[KEY_EPOCH])
            shared = resume[KEY_ORDER].get(KEY_SHARED_SEED)
            self._base_seed = order.resume(
                resume[KEY_ORDER], skip=int(resume[KEY_PROGRESS]["tasks_done"])
            )
            progress: dict[str, Any] | None = resume[KEY_PROGRESS]
        else:
            if is_iter_datapipe(self.dataset):
                # torch draws the pipe's shuffle seed first, then the workers' base seed.
                shared = draw_shared_seed(self.generator)
            keep = self._base_seed if self._persistent and self._executor is not None else None
            self._base_seed = order.start(base_seed=keep)
            progress = None
        if shared is not None:
            order.state[KEY_SHARED_SEED] = shared
        it = EpochIterator(self, order, self._base_seed, resume=progress, shared_seed=shared)
        self._iter = it
        return it

    @property
    def _persistent(self) -> bool:
        return self.persistent_workers and self._num_workers_resolved > 0

    def _resolve(self) -> None:
        """Take the plan's choices for what the user left on ``"auto"``.

        Once, and again when a setting it depends on was assigned since (torch reads
        ``num_workers`` and friends at each ``iter()``).
        """
        planned = tuple(getattr(self, name) for name in _PLANNED)
        if self._planned == planned:
            return
        if self._planned is not None:
            self._close_executor()
            self._slots.close()
        self._planned = planned
        from ._auto import apply_plan

        apply_plan(self)

    def _executor_for_epoch(self) -> Any:
        if self._executor is not None and self._persistent:
            return self._executor
        self._close_executor()
        self._executor = make_loader_executor(self)
        self._start_method = getattr(self._executor, "start_method", "")
        self._start_method_reason = getattr(self._executor, "start_method_reason", "")
        return self._executor

    def _max_in_flight(self) -> int:
        """Tasks handed to workers and not yet yielded: ``prefetch_factor`` (default 2,
        as torch) per worker, and no more than ``prefetch_bytes`` of fixed-size batches."""
        n = self._num_workers_resolved
        if n == 0:
            return 1
        limit = n * (2 if self.prefetch_factor is None else max(1, self.prefetch_factor))
        layout = self._slots.layout
        budget = self.prefetch_bytes or (self.plan.prefetch_bytes if self.plan else None)
        if layout is not None and budget:
            limit = min(limit, max(1, budget // layout.nbytes))
        return limit

    def _deliver(self, batch: Any, *, from_slot: bool) -> Any:
        self._counters["batches"] += 1
        if self._pin and not (from_slot and self._slots.page_locked):
            return pin_batch(batch, self.engine)
        return batch

    def _count_skip(self, index: Any, message: str, *, epoch_skips: int) -> None:
        self._counters["samples_skipped"] += 1
        self._skips = [*self._skips[-(_SKIP_MEMORY - 1) :], (index, message)]
        _log.warning("edgeload: DataLoader skipped sample %r: %s", index, message)
        if epoch_skips > self.max_skips:
            raise WorkerError(
                f"sample {index!r} failed ({message}): {epoch_skips} samples skipped this "
                f"epoch, more than max_skips={self.max_skips}; fix the dataset or raise "
                "max_skips",
                index=index,
            )

    def _epoch_finished(self, it: EpochIterator) -> None:
        if it is self._iter:
            self._epoch += 1
            self._counters["epochs"] += 1
            self._iter = None
        if not self._persistent:
            self._close_executor()

    # State ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: plain JSON data; see :func:`edgeload.save_state`.

        Taken after batch k, loading it into a loader built with the same arguments
        gives exactly batches k+1... of the uninterrupted run.
        """
        return loader_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next ``iter()``.

        Raises:
            ValueError: not a loader state, or one of another version.
        """
        apply_loader_state(self, state)

    def stats(self) -> dict[str, Any]:
        """Counters: batches, epochs, samples skipped (and the last few), workers, memory
        mode and why, slots. Before the first ``iter()`` they show what the plan chose."""
        if self._state is not State.CLOSED:
            self._resolve()
        return {
            **self._counters,
            "skipped": list(self._skips),
            "num_workers": self._num_workers_resolved,
            "worker_kind": self.worker_kind_resolved,
            "memory_mode": self._memory_mode,
            "memory_mode_reason": self._memory_mode_reason,
            "start_method": self._start_method,
            "start_method_reason": self._start_method_reason,
            **self._slots.stats(),
        }

    # Lifecycle -----------------------------------------------------------------------

    def _abandon(self) -> None:
        """End the live pass, if any: stop its workers, then free its slots.

        Workers go first, so no worker can still be writing a slot that is handed out
        again; persistent workers are restarted too, for the same reason.
        """
        if self._iter is not None and not self._iter._done:
            self._close_executor()
        if self._iter is not None:
            self._iter.close()
            self._iter = None

    def _iterator_dropped(self, it: EpochIterator) -> None:
        """An unfinished iterator was deleted: stop its workers now, as torch does."""
        if self._iter in (it, None):
            self._close_executor()

    def _close_executor(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def close(self) -> None:
        """Stop the workers and free the slots; idempotent."""
        if self._state is State.CLOSED:
            return
        self._state = State.CLOSED
        self._abandon()
        self._slots.close()

    def __enter__(self) -> DataLoader[T_co]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()
