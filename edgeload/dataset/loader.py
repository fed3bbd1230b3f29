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
of an unfinished iterator stops its workers at once, as torch's does.  Between epochs
it keeps its executor and its slots; workers are stopped before slots are freed, so no
worker can still be writing a slot that is handed out again.

``num_workers`` defaults to 0, as in torch: the default never changes the data (an
IterableDataset that does not shard itself would yield every sample once per worker).
``num_workers="auto"`` opts into the device plan.

torch's surface: torch checks the arguments and builds the sampler and batch sampler
once, in the constructor, and then refuses to re-assign what they were built from;
``len(loader)`` and the private names that code outside torch reads
(``_auto_collation``, ``_index_sampler``) are derived from them.  The argument checks
use torch's wording where torch has the check: each message starts with torch's phrase
(code and tests match on it), then names what to pass instead.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.context
import numbers
import os
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from .. import _args
from ..errors import ArgumentError, ClosedError
from ..pipeline._lifecycle import Lifecycle
from ..vocabulary import AUTO, GPU_MEMORY_MODES, MEMORY_MODES
from ._epoch import EpochIterator, LoaderSlots, make_loader_executor
from ._sampling import EpochOrder, build_sampling, check_shuffles_are_seedable
from ._settings import (
    UNPLANNED,
    LoaderChoice,
    LoaderSettings,
    epoch_settings,
    plan_request,
    resolve_plan,
)
from ._state import (
    EpochProgress,
    LoaderState,
    apply_loader_state,
    begin_epoch,
    loader_state,
    state_fit,
)
from ._worker import get_worker_info, install_seed_hooks, install_torch_hook

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine

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

KINDS = ("auto", "thread", "process")
_THREADS_PER_CPU = 4

FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
"""Attributes torch refuses to re-assign after construction (the sampling is built)."""

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
        ArgumentError: an argument torch rejects (same wording) or a bad edgeload one (a
            ValueError, as torch raises; ``worker_kind``, ``on_error`` and
            ``memory_mode`` are accepted in any case); also assigning ``batch_size``, ``sampler``, ``batch_sampler``, ``drop_last``,
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
        engine: Engine | None = None,
    ) -> None:
        num_workers, worker_kind, on_error, memory_mode = check_arguments(  # type: ignore[assignment]
            num_workers=num_workers,
            timeout=timeout,
            worker_kind=worker_kind,
            on_error=on_error,
            max_skips=max_skips,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            prefetch_bytes=prefetch_bytes,
            batch_size=batch_size,
            pin_memory=pin_memory,
            memory_mode=memory_mode,
        )
        check_gpu_mode(memory_mode, engine)
        self.engine = engine
        context = check_context(multiprocessing_context, num_workers)
        self._sampling = sampling = build_sampling(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            drop_last=drop_last,
            generator=generator,
        )
        self.dataset = dataset
        self.batch_size = sampling.batch_size
        self.drop_last = sampling.drop_last
        self.sampler = sampling.sampler
        self.batch_sampler = sampling.batch_sampler
        self.generator = generator
        self._len_called: int | None = None
        """What ``len()`` last returned for an iterable dataset (torch warns past it)."""
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
        self._choice: LoaderChoice = UNPLANNED
        self._planned: tuple[Any, ...] | None = None
        self._state = LoaderState()
        self._lifecycle = Lifecycle.UNOPENED  # OPEN from the first iter(), CLOSED by close()
        # What the loader keeps between epochs: its executor, its slots and its live epoch,
        # in a holder that close() and a loader dropped without it stop through one
        # finalizer (the holder never refers to the loader, so the loader is collected).
        self._held = _Held()
        self._finalizer = weakref.finalize(self, self._held.release)
        self._persistent = False
        self._start_method = self._start_method_reason = ""
        warn_worker_count(num_workers, threads=worker_kind == "thread")
        # From now on, the FROZEN attributes refuse assignment, as torch's do.
        self._initialized = True

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
        """The iterator of the epoch in progress (None between epochs)."""
        return None if self._held.live is None else self._held.live()

    @_iter.setter
    def _iter(self, it: EpochIterator | None) -> None:
        self._held.live = None if it is None else weakref.ref(it)

    # torch's surface ------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        initialized = self.__dict__.get("_initialized", False)
        if initialized and name in FROZEN:
            raise ArgumentError(
                f"{name} attribute should not be set after {type(self).__name__} is "
                "initialized; build a new DataLoader with the new value"
            )
        if initialized and name == "multiprocessing_context":
            value = check_context(value, self.num_workers)
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self._sampling.auto_collation

    @property
    def _index_sampler(self) -> Any:
        return self._sampling.index_sampler

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
        if self._lifecycle is Lifecycle.CLOSED:
            raise ClosedError("DataLoader: iter() after close()")
        self._lifecycle = Lifecycle.OPEN
        self._abandon()
        self._resolve()
        check_shuffles_are_seedable(self.dataset, self._choice.num_workers)
        settings = epoch_settings(self, self._choice)
        return self._start_epoch(settings, length=self.__len__, len_called=self._len_called)

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
        self._replan(self._choice, slots_enabled=slots, engine=self.engine)

    # Epochs: the executor, the slots and the live epoch kept between them -------------

    def _replan(self, choice: LoaderChoice, *, slots_enabled: bool, engine: Engine | None) -> None:
        """Stop the workers and free the slots of the previous plan; make slots for this one."""
        self._stop_workers_and_free_slots()
        if choice.worker_kind == "thread":
            install_torch_hook()
            install_seed_hooks()
        self._held.slots = LoaderSlots(
            enabled=slots_enabled,
            in_flight=choice.in_flight,
            budget_bytes=choice.prefetch_bytes,
            shared=choice.worker_kind == "process",
            mode=choice.memory_mode,
            engine=engine,
        )

    def _start_epoch(
        self, settings: LoaderSettings, *, length: Any, len_called: int | None
    ) -> EpochIterator:
        """Begin an epoch, or resume the loaded one (the caller ended the live one)."""
        order = EpochOrder(settings.sampling, settings.generator)
        keep = self._persistent and self._held.executor is not None
        shared, progress = begin_epoch(self._state, order, settings, keep_seed=keep)
        self._persistent = settings.persistent
        if self._held.executor is None or not settings.persistent:
            self._close_executor()
            self._held.executor = make_loader_executor(settings)
            self._start_method = getattr(self._held.executor, "start_method", "")
            self._start_method_reason = getattr(self._held.executor, "start_method_reason", "")
        epoch = EpochProgress(max(1, settings.num_workers))
        if progress is not None:
            epoch.load(progress)
        base_seed = int(self._state.base_seed or 0)
        starts = epoch.worker_starts(base_seed, shared, settings.sampling.iterable)
        for w, start in enumerate(starts):
            self._held.executor.start_worker(w, start)
        it = EpochIterator(
            settings,
            self._state,
            executor=self._held.executor,
            slots=self._held.slots,
            order=order,
            progress=epoch,
            length=length,
            len_called=len_called,
            on_end=self._ended,
        )
        self._iter = it
        return it

    def _live_state(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The live epoch's order state and progress (None between epochs)."""
        it = self._iter
        return None if it is None or it.done else (it.order_state(), it.progress.state())

    def _ended(self, it: EpochIterator | None, finished: bool) -> None:
        if finished:
            if it is self._iter:
                self._state.finish_epoch()
                self._iter = None
            if not self._persistent:
                self._close_executor()
        elif self._iter in (it, None):
            # An unfinished iterator was deleted: stop its workers now, as torch does.
            self._close_executor()

    def _abandon(self) -> None:
        self._held.abandon()

    def _close_executor(self) -> None:
        self._held.close_executor()

    def _stop_workers_and_free_slots(self) -> None:
        self._held.release()

    # Checkpoint -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: plain JSON data; see :func:`edgeload.save_state`.

        Taken after batch k, loading it into a loader built with the same arguments
        gives exactly batches k+1... of the uninterrupted run.
        """
        return loader_state(
            self._state,
            num_workers=self._choice.num_workers,
            worker_kind=self._choice.worker_kind,
            fit=state_fit(self._sampling, self.dataset),
            live=self._live_state(),
            generator=self.generator,
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next ``iter()``; it is checked now.

        A state taken mid-epoch resumes only onto the dataset length, sampler, batch
        size and worker count it was taken with (threads and processes are
        interchangeable); one taken between epochs fits any.

        Raises:
            StateError: not a DataLoader state (a StreamLoader's, an edited one), one of
                another version, a key of the wrong type or out of range (``tasks_done``
                past the end of this loader's epoch), or a mid-epoch state that does not
                fit this loader (the message names the key and what to pass). A
                ValueError. Nothing is changed then.
        """
        self._abandon()
        workers: int | None = None
        if self._lifecycle is not Lifecycle.CLOSED:
            self._resolve()
            workers = self._choice.num_workers
        apply_loader_state(
            self._state,
            state,
            generator=self.generator,
            fit=state_fit(self._sampling, self.dataset),
            num_workers=workers,
        )

    def stats(self) -> dict[str, Any]:
        """Counters: batches, epochs, samples skipped (and the last few), workers, memory
        mode and why, slots. Before the first ``iter()`` they show what the plan chose."""
        if self._lifecycle is not Lifecycle.CLOSED:
            self._resolve()
        choice = self._choice
        return {
            **self._state.counters,
            "skipped": list(self._state.skips),
            "num_workers": choice.num_workers,
            "worker_kind": choice.worker_kind,
            "memory_mode": choice.memory_mode,
            "memory_mode_reason": choice.memory_mode_reason,
            "start_method": self._start_method,
            "start_method_reason": self._start_method_reason,
            **self._held.slots.stats(),
        }

    # Lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the workers and free the slots; idempotent."""
        if self._lifecycle is Lifecycle.CLOSED:
            return
        self._lifecycle = Lifecycle.CLOSED
        self._finalizer()

    def __enter__(self) -> DataLoader[T_co]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Held:
    """What a DataLoader keeps between epochs and stops when closed or dropped: the
    executor, the slots and (weakly) the live epoch. The loader replaces them here."""

    def __init__(self) -> None:
        self.executor: Any = None
        self.slots = LoaderSlots(
            enabled=False, in_flight=0, budget_bytes=None, shared=False, mode="host"
        )
        self.live: weakref.ref[EpochIterator] | None = None

    def abandon(self) -> None:
        """End the live epoch, if any: stop its workers, then release its slots."""
        live = None if self.live is None else self.live()
        if live is not None and not live.done:
            self.close_executor()
        if live is not None:
            live.close()
            self.live = None

    def close_executor(self) -> None:
        if self.executor is not None:
            self.executor.close()
            self.executor = None

    def release(self) -> None:
        """Stop the workers and free the slots (batches the user holds stay valid)."""
        self.abandon()
        self.close_executor()
        self.slots.close()


# Argument checks ----------------------------------------------------------------------


def check_arguments(
    *,
    num_workers: Any,
    timeout: float,
    worker_kind: str,
    on_error: str,
    max_skips: Any,
    prefetch_factor: int | None,
    persistent_workers: bool,
    prefetch_bytes: int | None,
    batch_size: Any = 1,
    pin_memory: Any = "auto",
    memory_mode: Any = "auto",
) -> tuple[Any, str, str, str]:
    """Reject bad DataLoader arguments; return ``num_workers``, ``worker_kind``,
    ``on_error`` and ``memory_mode`` normalised (the Literal settings in any case).

    Raises:
        ArgumentError: naming the argument, the value and what to pass instead (a
            ValueError, as torch raises).
    """
    owner = "DataLoader"
    if isinstance(num_workers, str):
        num_workers = _args.choice(owner, "num_workers", num_workers, ("auto",))
    elif (
        not isinstance(num_workers, numbers.Integral)
        or isinstance(num_workers, bool)
        or (num_workers < 0)
    ):
        raise ArgumentError(
            f"num_workers option should be non-negative; got {num_workers!r}: pass an int "
            ">= 0 (0 loads in the calling thread) or 'auto' (the device plan's count)"
        )
    else:
        num_workers = int(num_workers)
    if isinstance(timeout, numbers.Real) and not isinstance(timeout, bool) and timeout < 0:
        raise ArgumentError(f"timeout option should be non-negative, got {timeout}")
    _args.number(owner, "timeout", timeout, low=0)
    worker_kind = _args.choice(owner, "worker_kind", worker_kind, KINDS)
    on_error = _args.choice(owner, "on_error", on_error, ("raise", "skip"),
                            allowed_text="'raise' or 'skip'")  # fmt: skip
    if not isinstance(max_skips, numbers.Integral) or isinstance(max_skips, bool) or max_skips < 0:
        raise ArgumentError(f"max_skips must be an int >= 0, got {max_skips!r}")
    _args.integer(owner, "batch_size", batch_size, low=1, none_ok=True)
    if isinstance(prefetch_factor, numbers.Integral) and prefetch_factor < 0:
        raise ArgumentError("prefetch_factor option should be non-negative")
    _args.integer(owner, "prefetch_factor", prefetch_factor, low=0, none_ok=True)
    if num_workers == 0 and prefetch_factor is not None:
        raise ArgumentError(
            "prefetch_factor option could only be specified in multiprocessing.let "
            "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
        )
    if persistent_workers and num_workers == 0:
        raise ArgumentError("persistent_workers option needs num_workers > 0")
    _args.integer(owner, "prefetch_bytes", prefetch_bytes, low=1, none_ok=True)
    if not isinstance(pin_memory, bool) and type(pin_memory).__name__ != "bool_":
        _args.choice(owner, "pin_memory", pin_memory, ("auto",),
                     allowed_text="True, False or 'auto'")  # fmt: skip
    memory_mode = _args.choice(owner, "memory_mode", memory_mode, (AUTO, *MEMORY_MODES))
    return num_workers, worker_kind, on_error, memory_mode


def check_context(context: Any, num_workers: Any) -> Any:
    """Validate ``multiprocessing_context`` as torch does; return the context (or None).

    Raises:
        ArgumentError: a context with ``num_workers=0``, or an unknown start method (a
            ValueError, as torch raises).
        TypeError: neither a start method name nor a ``multiprocessing`` context.
    """
    if context is None:
        return None
    if num_workers == 0:
        raise ArgumentError(
            "multiprocessing_context can only be used with multi-process loading "
            f"(num_workers > 0), but got num_workers={num_workers}; pass num_workers=2 "
            "(or 'auto') with it, or drop multiprocessing_context"
        )
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ArgumentError(
                f"multiprocessing_context option should specify a valid start method in "
                f"{methods!r}, but got multiprocessing_context={context!r}"
            )
        return multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(
            "multiprocessing_context option should be a valid context object or a string "
            f"specifying the start method, but got multiprocessing_context={context!r}; "
            "pass 'fork', 'spawn', 'forkserver' or multiprocessing.get_context(...)"
        )
    return context


def warn_worker_count(num_workers: Any, *, threads: bool) -> None:
    """Warn, as torch does, when more workers are asked for than this process has CPUs.

    Thread workers mostly wait on I/O or run code that releases the GIL, so for them
    the limit is four per CPU.
    """
    if not isinstance(num_workers, int) or num_workers <= 0:
        return
    has_affinity = hasattr(os, "sched_getaffinity")
    suggested = len(os.sched_getaffinity(0)) if has_affinity else os.cpu_count()
    if suggested is not None and threads:
        suggested *= _THREADS_PER_CPU
    if suggested is not None and num_workers <= suggested:
        return
    what = "threads" if threads else "processes"
    cpuset = "" if has_affinity else " (`cpuset` is not taken into account)"
    warnings.warn(
        f"This DataLoader will create {num_workers} worker {what} in total. Our suggested max "
        f"number of worker in current system is {suggested}{cpuset}, which is smaller than "
        "what this DataLoader is going to create. Please be aware that excessive worker "
        "creation might get DataLoader running slow or even freeze, lower the worker number "
        "to avoid potential slowness/freeze if necessary (or pass num_workers='auto').",
        stacklevel=3,
    )


def check_gpu_mode(memory_mode: str, engine: Engine | None) -> None:
    """Raise PlatformError now (in the constructor) if an explicit GPU mode cannot work."""
    if memory_mode in GPU_MEMORY_MODES:
        from ..cuda.slot_mode import check_slot_mode

        check_slot_mode(memory_mode, engine)
