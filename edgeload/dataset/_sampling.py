"""Which indices each batch reads: torch's own samplers, made resumable.

The loader builds its sampler and batch sampler exactly as ``torch.utils.data.DataLoader``
does (same classes, same argument checks, same draws from the same generators in the same
order), so the index order is identical for the same seed.  What it adds is a snapshot
of the random state an epoch's order is drawn from, taken when the epoch starts: resuming
restores that snapshot, rebuilds the order and skips the batches already yielded.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._deps import require_torch
from ._datapipes import apply_shuffle, is_iter_datapipe

# Keys of the sampling part of the loader state.
KEY_BASE_SEED = "base_seed"
KEY_SAMPLER_SEED = "sampler_seed"
KEY_GENERATOR_STATE = "generator_state"
KEY_SAMPLER_GENERATOR_STATE = "sampler_generator_state"


def is_iterable_dataset(dataset: object) -> bool:
    """Whether ``dataset`` is iterable-style in torch's sense."""
    torch = require_torch()
    return isinstance(dataset, torch.utils.data.IterableDataset)


@dataclass
class Sampling:
    """The samplers of one loader, built as torch builds them."""

    iterable: bool
    """The dataset is an ``IterableDataset``: indices are placeholders."""
    sampler: Any
    batch_sampler: Any
    """``None`` when ``batch_size=None`` (no automatic batching)."""
    batch_size: int | None
    drop_last: bool

    @property
    def index_sampler(self) -> Any:
        """What yields one task's index (a list with batching, an int without)."""
        return self.sampler if self.batch_sampler is None else self.batch_sampler

    @property
    def auto_collation(self) -> bool:
        """Whether samples are collated into batches."""
        return self.batch_sampler is not None


def build_sampling(
    dataset: Any,
    *,
    batch_size: int | None,
    shuffle: bool | None,
    sampler: Any,
    batch_sampler: Any,
    drop_last: bool,
    generator: Any,
) -> Sampling:
    """Build the sampler and batch sampler with torch's rules and error messages.

    Raises:
        ValueError: a combination torch's DataLoader rejects (same wording).
    """
    torch = require_torch()
    data = torch.utils.data
    iterable = is_iterable_dataset(dataset)
    if iterable:
        if is_iter_datapipe(dataset):
            # A pipe's own .shuffle() steps follow shuffle= (None: as built).
            apply_shuffle(dataset, shuffle)
            shuffle = None
        elif shuffle not in (False, None):
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified shuffle option, "
                f"but got shuffle={shuffle}"
            )
        if sampler is not None:
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified sampler option, "
                f"but got sampler={sampler}"
            )
        if batch_sampler is not None:
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                f"but got batch_sampler={batch_sampler}"
            )
    shuffle = bool(shuffle)
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                "sampler, and drop_last"
            )
        batch_size, drop_last = None, False
    elif batch_size is None and drop_last:
        raise ValueError(
            "batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
        )
    if sampler is None:
        if iterable:
            sampler = data.dataloader._InfiniteConstantSampler()
        elif shuffle:
            sampler = data.RandomSampler(dataset, generator=generator)
        else:
            sampler = data.SequentialSampler(dataset)
    if batch_size is not None and batch_sampler is None:
        batch_sampler = data.BatchSampler(sampler, batch_size, drop_last)
    return Sampling(iterable, sampler, batch_sampler, batch_size, drop_last)


def draw_base_seed(generator: Any) -> int:
    """The 64-bit base seed of an epoch's workers, drawn as torch draws it."""
    torch = require_torch()
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def _encode_state(generator: Any) -> str:
    return base64.b64encode(generator.get_state().numpy().tobytes()).decode("ascii")


def _decode_state(generator: Any, text: str) -> None:
    torch = require_torch()
    raw = bytearray(base64.b64decode(text.encode("ascii")))
    generator.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())


def _inner_sampler(sampling: Sampling) -> Any:
    """The sampler that draws random numbers: the batch sampler's, or the sampler."""
    inner = getattr(sampling.batch_sampler, "sampler", None)
    return inner if inner is not None else sampling.sampler


class EpochOrder:
    """The task indices of one epoch, with the state needed to rebuild them.

    Call :meth:`start` (a fresh epoch) or :meth:`resume` (from a saved state) once,
    then iterate.  ``state`` is the JSON-ready snapshot of the epoch's random inputs.
    """

    def __init__(self, sampling: Sampling, generator: Any) -> None:
        self._sampling = sampling
        self._generator = generator
        self._iter: Iterator[Any] = iter(())
        self.state: dict[str, Any] = {}

    def start(self, *, base_seed: int | None = None) -> int:
        """Begin a fresh epoch; returns the base seed (drawn unless given)."""
        torch = require_torch()
        if base_seed is None:
            base_seed = draw_base_seed(self._generator)
        state: dict[str, Any] = {KEY_BASE_SEED: base_seed}
        inner = _inner_sampler(self._sampling)
        gen = getattr(inner, "generator", None)
        if isinstance(inner, torch.utils.data.RandomSampler) and gen is None:
            # torch's RandomSampler draws a fresh seed from the global RNG each epoch;
            # draw it the same way here and keep it, so the epoch can be rebuilt.
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            state[KEY_SAMPLER_SEED] = seed
            self._iter = self._seeded_iter(inner, seed)
        else:
            if isinstance(gen, torch.Generator):
                state[KEY_SAMPLER_GENERATOR_STATE] = _encode_state(gen)
            self._iter = iter(self._sampling.index_sampler)
        if self._generator is not None:
            state[KEY_GENERATOR_STATE] = _encode_state(self._generator)
        self.state = state
        return base_seed

    def resume(self, state: dict[str, Any], *, skip: int) -> int:
        """Rebuild the epoch described by ``state`` and skip its first ``skip`` tasks."""
        torch = require_torch()
        if self._generator is not None and KEY_GENERATOR_STATE in state:
            _decode_state(self._generator, state[KEY_GENERATOR_STATE])
        inner = _inner_sampler(self._sampling)
        if KEY_SAMPLER_SEED in state:
            self._iter = self._seeded_iter(inner, int(state[KEY_SAMPLER_SEED]))
        else:
            gen = getattr(inner, "generator", None)
            if isinstance(gen, torch.Generator) and KEY_SAMPLER_GENERATOR_STATE in state:
                _decode_state(gen, state[KEY_SAMPLER_GENERATOR_STATE])
            self._iter = iter(self._sampling.index_sampler)
        self.state = dict(state)
        # Fast-forward: indices only, no data is read.
        for _ in itertools.islice(self._iter, skip):
            pass
        return int(state[KEY_BASE_SEED])

    def _seeded_iter(self, inner: Any, seed: int) -> Iterator[Any]:
        torch = require_torch()
        epoch_gen = torch.Generator()
        epoch_gen.manual_seed(seed)
        inner.generator = epoch_gen
        try:
            it = iter(self._sampling.index_sampler)
            # The sampler reads its generator on the first next(); take it now.
            first = list(itertools.islice(it, 1))
        finally:
            inner.generator = None
        return itertools.chain(first, it)

    def __iter__(self) -> Iterator[Any]:
        return self._iter

    def __next__(self) -> Any:
        return next(self._iter)
