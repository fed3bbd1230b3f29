"""The loader's GPU edge: checking a GPU memory mode up front, and pinning batches.

With ``engine=`` (``edgeload.cuda.engine``) the GPU calls go to that engine, so a
``HostEngine`` runs the ``pin_memory`` and GPU-mode paths on a machine without CUDA.
"""

from __future__ import annotations

import collections.abc
from collections.abc import Callable
from typing import Any

from .._deps import require_torch
from ..vocabulary import GPU_MEMORY_MODES


def check_gpu_mode(memory_mode: str, engine: Any) -> None:
    """Raise PlatformError now (in the constructor) if an explicit GPU mode cannot work."""
    if memory_mode in GPU_MEMORY_MODES:
        from ..cuda.slot_mode import check_slot_mode

        check_slot_mode(memory_mode, engine)


def map_tensors(fn: Callable[[Any], Any], value: Any) -> Any:
    """``value`` with ``fn`` applied to every tensor in it (dicts, lists, tuples, namedtuples)."""
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, collections.abc.Mapping):
        return type(value)({k: map_tensors(fn, v) for k, v in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_tensors(fn, v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(fn, v) for v in value)
    return value


def pin_batch(batch: Any, engine: Any) -> Any:
    """``batch`` copied into page-locked memory (torch's ``pin_memory=True`` step)."""
    if engine is None:
        torch = require_torch()
        return torch.utils.data._utils.pin_memory.pin_memory(batch)
    return map_tensors(engine.pin, batch)
