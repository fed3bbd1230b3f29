"""The DataLoader's argument checks, with torch's wording where torch has the check.

Each message starts with torch's phrase (code and tests match on it), then names what to
pass instead.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import warnings
from typing import Any

KINDS = ("auto", "thread", "process")
_THREADS_PER_CPU = 4

FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
"""Attributes torch refuses to re-assign after construction (the sampling is built)."""


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
) -> None:
    """Reject bad DataLoader arguments.

    Raises:
        ValueError: naming the argument, the value and what to pass instead.
    """
    if num_workers != "auto" and (
        not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0
    ):
        raise ValueError(
            f"num_workers option should be non-negative; got {num_workers!r}: pass an int "
            ">= 0 (0 loads in the calling thread) or 'auto' (the device plan's count)"
        )
    if timeout < 0:
        raise ValueError(f"timeout option should be non-negative, got {timeout}")
    if worker_kind not in KINDS:
        raise ValueError(f"worker_kind must be one of {KINDS}, got {worker_kind!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if not isinstance(max_skips, int) or max_skips < 0:
        raise ValueError(f"max_skips must be an int >= 0, got {max_skips!r}")
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified in multiprocessing.let "
            "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
        )
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if prefetch_bytes is not None and prefetch_bytes < 1:
        raise ValueError(f"prefetch_bytes must be >= 1 or None, got {prefetch_bytes}")


def check_context(context: Any, num_workers: Any) -> Any:
    """Validate ``multiprocessing_context`` as torch does; return the context (or None).

    Raises:
        ValueError: a context with ``num_workers=0``, or an unknown start method.
        TypeError: neither a start method name nor a ``multiprocessing`` context.
    """
    if context is None:
        return None
    if num_workers == 0:
        raise ValueError(
            "multiprocessing_context can only be used with multi-process loading "
            f"(num_workers > 0), but got num_workers={num_workers}; pass num_workers=2 "
            "(or 'auto') with it, or drop multiprocessing_context"
        )
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(
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
