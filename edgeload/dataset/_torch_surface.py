"""The DataLoader's torch-compatible surface: its constructor, attributes and ``len()``.

torch checks the arguments and builds the sampler and batch sampler once, in the
constructor, and then refuses to re-assign what they were built from; ``len(loader)``
and the private names that code outside torch reads (``_auto_collation``,
``_index_sampler``) are derived from them. The loader's working (the plan, epochs,
checkpoint, lifecycle) is :class:`~edgeload.dataset.loader.DataLoader`'s, which
documents the arguments.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, Literal

from ._checks import FROZEN, check_arguments, check_context, warn_worker_count
from ._device import check_gpu_mode
from ._sampling import build_sampling


class TorchSurface:
    """Base of the DataLoader: the arguments, checked and kept as attributes (torch's
    names first), with the sampling attributes fixed once the subclass's ``_setup``
    has run."""

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
        self._setup()
        warn_worker_count(num_workers, threads=worker_kind == "thread")
        # From now on, the FROZEN attributes refuse assignment, as torch's do.
        self._initialized = True

    def _setup(self) -> None:
        """The subclass's own parts, made once the arguments are checked and kept."""

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
