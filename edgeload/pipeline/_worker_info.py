"""Who a worker is (``WorkerInfo``, ``current_worker``) and how processes start.

Separate from :mod:`edgeload.pipeline.workers` so a worker process can set its identity without
importing the pool machinery.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import io
import multiprocessing
import os
import pickle
import sys
import threading
import types
from typing import Any

from ..errors import PlatformError
from ..vocabulary import WorkerKind

__all__ = [
    "WorkerInfo",
    "WorkerKind",
    "choose_start_method",
    "current_worker",
    "set_current",
    "start_method_for",
]


@dataclasses.dataclass
class WorkerInfo:
    """Who the current worker is; ``current_worker()`` returns it inside a worker."""

    id: int
    """0 .. num_workers - 1."""
    num_workers: int
    seed: int
    """The pool's ``seed`` plus ``id``; the caller decides what to seed with it."""
    kind: WorkerKind
    name: str
    """The worker's thread or process name (``edgeload-...``)."""
    stop_event: threading.Event = dataclasses.field(repr=False, compare=False)
    """Set when the pool closes (threads) or the worker stops (processes); long tasks
    check it."""
    state: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    """Scratch space for this worker, e.g. an iterator made by ``init_fn``."""


_local = threading.local()
_process_info: WorkerInfo | None = None


def set_current(info: WorkerInfo) -> None:
    global _process_info
    if info.kind == "process":
        _process_info = info
    else:
        _local.info = info


def current_worker() -> WorkerInfo | None:
    """Return the calling worker's :class:`WorkerInfo`, or None outside a worker."""
    info: WorkerInfo | None = getattr(_local, "info", None)
    return info if info is not None else _process_info


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _os_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def choose_start_method(requested: str | None = None) -> str:
    """Pick the process start method: ``fork`` only when it is safe, else forkserver/spawn.

    ``fork`` copies the parent's memory but not its threads: a lock held by another
    thread (a BLAS or OpenMP pool, an edgeload prefetch thread, CUDA's driver threads)
    stays locked forever in the child. So ``fork`` is chosen only while the process has
    one OS thread and CUDA is not initialised.

    Args:
        requested: a start method to validate and use, or None to choose.

    Raises:
        ValueError: ``requested`` is not available on this platform.
        PlatformError: ``fork`` requested after CUDA was initialised.
    """
    methods = multiprocessing.get_all_start_methods()
    if requested is not None:
        if requested not in methods:
            raise ValueError(f"start_method must be one of {methods}, got {requested!r}")
        if requested == "fork" and _cuda_initialised():
            raise PlatformError(
                "start_method='fork' after CUDA was initialised: the child cannot use "
                "CUDA and may deadlock; use 'forkserver' or 'spawn'"
            )
        return requested
    if "fork" in methods and _os_thread_count() == 1 and not _cuda_initialised():
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


class _MainFinder(pickle.Pickler):
    """Pickles to nowhere, noting the modules of the classes and functions it refers to."""

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self.modules: set[str] = set()

    @property
    def uses_main(self) -> bool:
        return "__main__" in self.modules

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                self.modules.add(module)
        return NotImplemented


def _why_not_picklable(payload: Any) -> tuple[str, _MainFinder]:
    """('' or why ``payload`` does not pickle, what the pickling saw)."""
    finder = _MainFinder(io.BytesIO())
    try:
        finder.dump(payload)
    except Exception as exc:  # locals, lambdas, locks, shared values, open files...
        return f"{type(exc).__name__}: {exc}", finder
    return "", finder


@functools.lru_cache(maxsize=8)
def _has_main_guard(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return True  # cannot tell: assume the script is written for spawn
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [node.test.left, *node.test.comparators]
            text = {getattr(n, "id", None) for n in names} | {
                getattr(n, "value", None) for n in names
            }
            if {"__name__", "__main__"} <= text:
                return True
    return False


def _why_fork(payload: Any) -> tuple[str, set[str]]:
    """Why only ``fork`` can start workers for ``payload`` here ('' when others can),
    and the modules the workers would import to unpickle it."""
    failure, finder = _why_not_picklable(payload)
    why = _why_fork_given(failure, finder.uses_main)
    return why, finder.modules


def _why_fork_given(failure: str, uses_main: bool) -> str:
    if failure:
        return f"what the workers run does not pickle ({failure})"
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None and uses_main:
        return (
            "it uses classes or functions of a main module that has no file (interactive "
            "session, notebook or -c), which spawn/forkserver workers cannot import"
        )
    if path is not None and not _has_main_guard(str(path)):
        return (
            "the main script has no `if __name__ == '__main__':` guard, so spawn/"
            "forkserver workers would run it again"
        )
    return ""


def start_method_for(requested: str | None, payload: Any) -> tuple[str, str]:
    """The start method for process workers that run ``payload``, and the reason.

    With no request: ``fork`` where only fork can load ``payload`` (it does not pickle,
    or spawn would re-run an unguarded main script), as torch's default start method on
    Linux does; otherwise fork while the process has one thread, else forkserver.

    Raises:
        ValueError / PlatformError: as :func:`choose_start_method`; and when only fork
            could start these workers but CUDA is initialised.
    """
    if requested is not None:
        return choose_start_method(requested), "requested (multiprocessing_context)"
    methods = multiprocessing.get_all_start_methods()
    if "fork" not in methods:
        method = multiprocessing.get_start_method(allow_none=False)
        return method, f"this platform cannot fork: its default, {method}"
    why, modules = _why_fork(payload)
    if why and _cuda_initialised():
        raise PlatformError(
            f"process workers would need fork ({why}), but CUDA is initialised and a "
            "forked worker cannot use it; define the dataset at module level (so spawn "
            "can load it), or use worker_kind='thread'"
        )
    if why:
        return "fork", f"fork, as torch does: {why}"
    method = choose_start_method()
    if method == "forkserver":
        _preload_forkserver(modules)
    return method, _default_reason()


_FORKSERVER_PRELOAD = ["__main__", "numpy", "torch"]


def _preload_forkserver(modules: set[str]) -> None:
    """Have the fork server import torch and the dataset's modules once, before it forks.

    Each forkserver worker otherwise imports them itself when it unpickles its dataset:
    seconds per worker on a small board (torch alone takes one or two). It takes effect
    only when the server starts, which is the first time any code uses forkserver.
    """
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is None:
        extra = sorted(m for m in modules if m != "__main__" and not m.startswith("_"))
        multiprocessing.set_forkserver_preload([*_FORKSERVER_PRELOAD, *extra])


def _default_reason() -> str:
    if _cuda_initialised():
        return "CUDA is initialised: forked workers could not use it"
    threads = _os_thread_count()
    if threads == 1:
        return "one thread in this process: fork is safe and starts fastest"
    return (
        f"{threads} threads in this process: a forked worker could inherit a lock one of "
        "them holds; forkserver starts clean (pass multiprocessing_context='fork' to fork)"
    )
