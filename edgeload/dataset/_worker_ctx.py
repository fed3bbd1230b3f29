"""Who a loader worker is, and its random state: the same for threads and processes.

Process workers are seeded exactly as torch seeds its worker processes: with
``seed = base_seed + worker_id``, Python's ``random``, torch's default generator and
``numpy.random`` (from a SeedSequence-style hash of the base seed and worker id) are
reseeded, and torch's ``get_worker_info()`` returns this worker's info.

Thread workers share the process's global generators with the main thread and with each
other, so reseeding them would reseed everyone's.  Instead each thread worker gets its own
generators, seeded the same way, in ``get_worker_info().rng``: ``random_generator``
(``random.Random``), ``torch_generator`` and ``numpy_generator`` (a legacy
``RandomState``, the kind ``numpy.random.seed`` seeds).  A dataset that draws from these
gets the same numbers in a thread worker as from the globals in a process worker.
``torch.utils.data.get_worker_info()`` is made to return the thread's info (see
:func:`install_torch_hook`).  Only recent torch has ``worker._RNG`` and the ``rng`` and
``worker_method`` fields, none of the JetPack builds; on older torch the same
generators travel in :class:`ThreadRNG`, and its ``WorkerInfo`` (which takes any keyword)
carries them.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import logging
import random
import threading
from typing import Any, Iterator

import numpy as np

from .._deps import require_torch
from ..pipeline._shm import install as reserve_torch_shm

_local = threading.local()
_hook_lock = threading.Lock()
# The code torch's get_worker_info() runs once hooked: the thread's info, else torch's own.
_HOOK_SOURCE = """
def get_worker_info():
    info = _edgeload_thread_worker_info()
    return _worker_info if info is None else info
"""


def get_worker_info() -> Any:
    """This worker's info (``id``, ``num_workers``, ``seed``, ``dataset``, ``rng``), or None.

    Works in edgeload thread and process workers, and in torch's worker processes; in the
    main thread it returns None.
    """
    info = getattr(_local, "info", None)
    if info is not None:
        return info
    from torch.utils.data._utils import worker  # torch is loaded in any worker

    return worker._worker_info


def _thread_info() -> Any:
    return getattr(_local, "info", None)


def install_torch_hook() -> None:
    """Make ``torch.utils.data.get_worker_info()`` see edgeload thread workers.

    torch keeps the info in a module global, one per process.  The hook replaces the code
    of torch's function in place (so names imported with ``from torch.utils.data import
    get_worker_info`` before the hook see it too): it returns the calling thread's info
    when the caller is an edgeload thread worker, and torch's global otherwise.
    """
    require_torch()
    from torch.utils.data._utils import worker

    with _hook_lock:
        fn = worker.get_worker_info
        if worker.__dict__.get("_edgeload_thread_worker_info") is _thread_info:
            return
        scope: dict[str, Any] = {}
        exec(compile(_HOOK_SOURCE, "<edgeload worker-info hook>", "exec"), scope)
        worker.__dict__["_edgeload_thread_worker_info"] = _thread_info
        try:
            fn.__code__ = scope["get_worker_info"].__code__
        except (AttributeError, TypeError, ValueError) as exc:
            # A torch whose get_worker_info is not a plain module function (a closure,
            # a builtin): thread workers then answer through edgeload.get_worker_info().
            del worker.__dict__["_edgeload_thread_worker_info"]
            logging.getLogger("edgeload").warning(
                "cannot make torch.utils.data.get_worker_info() see thread workers (%s); "
                "use edgeload.get_worker_info() in datasets run by thread workers",
                exc,
            )


def numpy_seed(base_seed: int, worker_id: int) -> list[int]:
    """The numpy seed torch gives worker ``worker_id`` for ``base_seed``."""
    require_torch()
    from torch.utils.data._utils.worker import _generate_state

    return list(_generate_state(base_seed, worker_id))  # type: ignore[no-untyped-call]


def enter_worker(
    dataset: Any, *, worker_id: int, num_workers: int, base_seed: int, in_process: bool
) -> Any:
    """Seed this worker and publish its info; returns the info.

    Args:
        dataset: the dataset object this worker reads (``info.dataset``).
        worker_id: 0 .. num_workers - 1.
        num_workers: how many workers the loader runs.
        base_seed: the loader's base seed for this set of workers.
        in_process: a dedicated process (seed the globals) rather than a thread.
    """
    torch = require_torch()
    from torch.utils.data._utils import worker

    seed = base_seed + worker_id
    np_seed = numpy_seed(base_seed, worker_id)
    if in_process:
        # default_collate stacks a batch made here straight into torch shared memory
        reserve_torch_shm()
        torch.set_num_threads(1)
        random.seed(seed)
        torch.manual_seed(seed)
        np.random.seed(np_seed)
        info = worker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
        worker._worker_info = info
        return info
    gen = torch.Generator()
    gen.manual_seed(seed)
    # torch's own container where it has one (recent torch only), else ours, same fields
    rng_type: Any = getattr(worker, "_RNG", ThreadRNG)
    rng: Any = rng_type(
        random_generator=random.Random(seed),
        torch_generator=gen,
        numpy_generator=np.random.RandomState(np_seed),
    )
    fields = {"id": worker_id, "num_workers": num_workers, "seed": seed, "dataset": dataset}
    make_info: Any = worker.WorkerInfo
    try:
        # older torch takes any keyword; one that takes only its own fields gets ours
        thread_info = make_info(**fields, rng=rng, worker_method="thread")
    except TypeError:
        thread_info = ThreadWorkerInfo(**fields, rng=rng)
    _local.info = thread_info
    return thread_info


def thread_worker_fallbacks() -> list[tuple[str, str]]:
    """What this torch lacks for thread workers, and what edgeload does instead."""
    require_torch()
    from torch.utils.data._utils import worker

    found = []
    if not hasattr(worker, "_RNG"):
        found.append(
            (
                "torch has no per-thread worker generators (worker._RNG, only in recent torch)",
                "thread workers get edgeload's ThreadRNG in get_worker_info().rng",
            )
        )
    return found


@dataclasses.dataclass(frozen=True)
class ThreadRNG:
    """A thread worker's own generators, for a torch without ``worker._RNG``."""

    random_generator: random.Random
    torch_generator: Any
    numpy_generator: Any


@dataclasses.dataclass(frozen=True)
class ThreadWorkerInfo:
    """A thread worker's info, for a torch whose ``WorkerInfo`` refuses ``rng``."""

    id: int
    num_workers: int
    seed: int
    dataset: Any
    rng: Any
    worker_method: str = "thread"


@contextlib.contextmanager
def outside_worker() -> Iterator[None]:
    """Hide this thread worker's info from torch for a moment (see ``Fetcher._collate``)."""
    info = getattr(_local, "info", None)
    _local.info = None
    try:
        yield
    finally:
        _local.info = info


def leave_worker() -> None:
    """Forget this thread's worker info (thread workers, when they stop)."""
    _local.info = None


def _generators(info: Any) -> tuple[Any, Any, Any]:
    """The (python, numpy, torch) generators this worker's dataset draws from."""
    rng = getattr(info, "rng", None)
    if rng is not None:
        return rng.random_generator, rng.numpy_generator, rng.torch_generator
    torch = require_torch()
    return random, np.random, torch.random


def snapshot_rng(info: Any) -> list[Any]:
    """The worker's random state now, as plain JSON-ready data."""
    py, npr, tg = _generators(info)
    version, internal, gauss = py.getstate()
    name, keys, pos, has_gauss, cached = npr.get_state()
    torch_state = tg.get_rng_state() if hasattr(tg, "get_rng_state") else tg.get_state()
    return [
        [version, list(internal), gauss],
        [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        base64.b64encode(torch_state.numpy().tobytes()).decode("ascii"),
    ]


def restore_rng(info: Any, snapshot: list[Any]) -> None:
    """Put back a state taken by :func:`snapshot_rng`."""
    torch = require_torch()
    py, npr, tg = _generators(info)
    (version, internal, gauss), nps, torch_text = snapshot
    py.setstate((version, tuple(internal), gauss))
    npr.set_state((nps[0], np.asarray(nps[1], dtype=np.uint32), nps[2], nps[3], nps[4]))
    raw = torch.frombuffer(bytearray(base64.b64decode(torch_text)), dtype=torch.uint8).clone()
    if hasattr(tg, "set_rng_state"):
        tg.set_rng_state(raw)
    else:
        tg.set_state(raw)
