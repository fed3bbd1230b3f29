"""Which indices each batch reads: torch's own samplers, made resumable, and torch's
DataPipe rules.

The loader builds its sampler and batch sampler exactly as ``torch.utils.data.DataLoader``
does (same classes, same argument checks, same draws from the same generators in the same
order), so the index order is identical for the same seed.  What it adds is a snapshot
of the random state an epoch's order is drawn from, taken when the epoch starts: resuming
restores that snapshot, rebuilds the order and skips the batches already yielded.

An ``IterDataPipe`` is an IterableDataset that the loader configures as torch's
DataLoader does: ``shuffle=`` switches its ``.shuffle()`` steps on or off, each epoch
reseeds them from one shared seed (so every worker shuffles alike), and in a worker
``sharding_filter`` keeps one worker's share.  Thread workers each get a deep copy of the
pipe graph: a pipe allows one live iterator at a time, and the sharding settings are per
copy.
"""

from __future__ import annotations

import base64
import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._deps import require_torch
from ..errors import ArgumentError

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
            raise ArgumentError(
                "DataLoader with IterableDataset: expected unspecified shuffle option, "
                f"but got shuffle={shuffle}"
            )
        if sampler is not None:
            raise ArgumentError(
                "DataLoader with IterableDataset: expected unspecified sampler option, "
                f"but got sampler={sampler}"
            )
        if batch_sampler is not None:
            raise ArgumentError(
                "DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                f"but got batch_sampler={batch_sampler}"
            )
    shuffle = bool(shuffle)
    if sampler is not None and shuffle:
        raise ArgumentError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ArgumentError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                "sampler, and drop_last"
            )
        batch_size, drop_last = None, False
    elif batch_size is None and drop_last:
        raise ArgumentError(
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


# DataPipes: torch's rules, applied as torch's DataLoader applies them -----------------


def is_datapipe(dataset: Any) -> bool:
    """Whether ``dataset`` is an ``IterDataPipe`` or ``MapDataPipe``."""
    data = require_torch().utils.data
    kinds = tuple(
        k for k in (getattr(data, "IterDataPipe", None), getattr(data, "MapDataPipe", None)) if k
    )
    return bool(kinds) and isinstance(dataset, kinds)


def is_iter_datapipe(dataset: Any) -> bool:
    kind = getattr(require_torch().utils.data, "IterDataPipe", None)
    return kind is not None and isinstance(dataset, kind)


def apply_shuffle(dataset: Any, shuffle: bool | None) -> Any:
    """``shuffle=True/False`` turns the pipe's shuffle steps on/off; None leaves them."""
    if shuffle is None:
        return dataset
    from torch.utils.data import graph_settings

    return graph_settings.apply_shuffle_settings(dataset, shuffle=shuffle)


def draw_shared_seed(generator: Any) -> int:
    """The epoch's shuffle seed for every copy of the pipe, drawn as torch draws it."""
    torch = require_torch()
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def _seed_function() -> Any:
    """torch's function that seeds a pipe graph's random steps from a generator, or None.

    torch 1.13+ names it ``apply_random_seed``; torch 1.12 has ``apply_shuffle_seed`` (a
    seed for each shuffle step, drawn from the generator); torch 1.11 has neither: its
    shuffles draw from Python's global ``random``.
    """
    from torch.utils.data import graph_settings

    return getattr(graph_settings, "apply_random_seed", None) or getattr(
        graph_settings, "apply_shuffle_seed", None
    )


def reseed(dataset: Any, seed: int) -> None:
    """Seed the pipe's random steps (its shuffles) for one epoch."""
    torch = require_torch()
    apply = _seed_function()
    if apply is None:
        return
    gen = torch.Generator()
    gen.manual_seed(seed)
    apply(dataset, gen)


def check_shuffles_are_seedable(dataset: Any, num_workers: int) -> None:
    """Refuse a pipe whose workers would shuffle unalike before sharding (torch 1.11).

    Every worker shuffles its own copy and keeps its share of the result: only the same
    order in every worker gives each item once. torch 1.12+ seeds the shuffles alike;
    torch 1.11's draw from each worker's Python ``random``, so items would repeat and go
    missing without a word.

    Raises:
        ArgumentError: torch 1.11, ``num_workers`` >= 2 and a ``.shuffle()`` that is on
            upstream of a ``sharding_filter``.
    """
    if num_workers < 2 or not is_iter_datapipe(dataset):
        return
    if _seed_function() is not None:
        return
    from torch.utils.data import graph

    def upstream(sub: dict[Any, Any]) -> list[Any]:  # torch 1.11: {pipe: {its source: ...}}
        pipes = []
        for pipe, below in sub.items():
            pipes += [pipe, *upstream(below)]
        return pipes

    def shuffles_before_shard(sub: dict[Any, Any]) -> bool:
        for pipe, below in sub.items():
            shards = getattr(pipe, "is_shardable", None) is not None
            if shards and any(getattr(p, "_shuffle_enabled", False) for p in upstream(below)):
                return True
            if shuffles_before_shard(below):
                return True
        return False

    if shuffles_before_shard(graph.traverse(dataset, only_datapipe=True)):
        torch = require_torch()
        raise ArgumentError(
            f"DataLoader: this IterDataPipe shuffles before its sharding_filter, and torch "
            f"{torch.__version__} cannot seed a .shuffle() alike in each of num_workers="
            f"{num_workers} workers, so they would repeat some items and drop others. Use "
            "torch 1.12 or newer, num_workers=0 or 1, shuffle=False, or .shuffle() after "
            ".sharding_filter()."
        )


def shard(dataset: Any, num_workers: int, worker_id: int) -> None:
    """Keep worker ``worker_id``'s share at each ``sharding_filter``."""
    from torch.utils.data import graph_settings

    graph_settings.apply_sharding(dataset, num_workers, worker_id)


def thread_copy(dataset: Any) -> Any:
    """A copy of the pipe graph for one thread worker."""
    return copy.deepcopy(dataset)
