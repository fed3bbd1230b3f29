"""The part of torch's DataLoader surface that follows from its sampling.

torch builds the sampler and batch sampler once, in the constructor, and then refuses
to re-assign what they were built from; ``len(loader)`` and the private names that code
outside torch reads (``_auto_collation``, ``_index_sampler``) are derived from them.
"""

from __future__ import annotations

import math
from typing import Any

from ._checks import FROZEN, check_context
from ._sampling import Sampling


class TorchSurface:
    """Base of the DataLoader: the sampling attributes, fixed after construction."""

    num_workers: Any

    def __init__(self, dataset: Any, sampling: Sampling, generator: Any) -> None:
        self.dataset = dataset
        self._sampling = sampling
        self.batch_size = sampling.batch_size
        self.drop_last = sampling.drop_last
        self.sampler = sampling.sampler
        self.batch_sampler = sampling.batch_sampler
        self.generator = generator
        self._len_called: int | None = None
        """What ``len()`` last returned for an iterable dataset (torch warns past it)."""

    def _seal(self) -> None:
        """From now on, the FROZEN attributes refuse assignment, as torch's do."""
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
