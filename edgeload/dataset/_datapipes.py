"""torch's DataPipe rules, applied as torch's DataLoader applies them.

An ``IterDataPipe`` is an IterableDataset that the loader configures: ``shuffle=``
switches its ``.shuffle()`` steps on or off, each epoch reseeds them from one shared
seed (so every worker shuffles alike), and in a worker ``sharding_filter`` keeps one
worker's share.  Thread workers each get a deep copy of the pipe graph: a pipe allows one
live iterator at a time, and the sharding settings are per copy.
"""

from __future__ import annotations

import copy
from typing import Any

from .._deps import require_torch
from ..errors import ArgumentError


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
