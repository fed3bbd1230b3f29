"""Seeding calls made in a thread worker reach that worker's own generators.

torch seeds each worker process's global generators with ``base_seed + id``, and a
``worker_init_fn`` often reseeds them.  Thread workers share one process, so the same
calls would read or reseed the main thread's generators.  Once a loader runs thread
workers, these calls are redirected when made from one of its threads: to the worker's
``get_worker_info().rng`` generators, seeded as torch seeds a worker process:

- ``torch.initial_seed / manual_seed / seed / get_rng_state / set_rng_state``: the code
  of torch's functions is replaced in place (so names imported earlier see it too);
- ``random.seed`` and ``numpy.random.seed``: the module attributes are replaced.

Everywhere else (the main thread, process workers, other threads) they behave as
before.  Draws that use the global generators (``torch.rand()`` without
``generator=``) still share them; use ``get_worker_info().rng`` (or, on a torch that has
it, ``torch.random.thread_safe_generator()``) for per-worker draws.
"""

from __future__ import annotations

import logging
import random
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

_lock = threading.Lock()
_installed = False
_TORCH_NAMES = ("initial_seed", "manual_seed", "seed", "get_rng_state", "set_rng_state")
_originals: dict[str, Callable[..., Any]] = {}
_DISPATCH_SOURCE = """
def {name}(*args, **kwargs):
    return _edgeload_seed_dispatch({name!r}, args, kwargs)
"""


def _thread_rng() -> Any:
    from ._worker_ctx import _thread_info

    return getattr(_thread_info(), "rng", None)


def _torch_call(name: str, gen: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if name == "initial_seed":
        return gen.initial_seed()
    if name == "manual_seed":
        return gen.manual_seed(int(args[0] if args else kwargs["seed"]))
    if name == "seed":
        return gen.seed()
    if name == "get_rng_state":
        return gen.get_state()
    return gen.set_state(args[0] if args else kwargs["new_state"])


def _dispatch(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rng = _thread_rng()
    if rng is not None:
        return _torch_call(name, rng.torch_generator, args, kwargs)
    return _originals[name](*args, **kwargs)


def _random_seed(a: Any = None, version: int = 2) -> None:
    rng = _thread_rng()
    if rng is not None:
        rng.random_generator.seed(a, version)
    else:
        _originals["random.seed"](a, version)


def _numpy_seed(seed: Any = None) -> None:
    rng = _thread_rng()
    if rng is not None and rng.numpy_generator is not None:
        rng.numpy_generator.seed(seed)
    else:
        _originals["numpy.random.seed"](seed)


def _hook_torch(torch_random: Any) -> None:
    for name in _TORCH_NAMES:
        fn = getattr(torch_random, name, None)
        if not isinstance(fn, types.FunctionType) or fn.__closure__:
            logging.getLogger("edgeload").warning(
                "cannot route torch.%s to thread workers' generators; in thread workers "
                "it acts on the main process's generator",
                name,
            )
            continue
        original = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        original.__kwdefaults__ = fn.__kwdefaults__
        scope: dict[str, Any] = {}
        code = compile(_DISPATCH_SOURCE.format(name=name), "<edgeload seed hook>", "exec")
        exec(code, scope)
        _originals[name] = original
        fn.__globals__["_edgeload_seed_dispatch"] = _dispatch
        fn.__code__ = scope[name].__code__
        fn.__defaults__ = None
        fn.__kwdefaults__ = None


def install_seed_hooks() -> None:
    """Route the seeding calls of thread workers to their own generators (once)."""
    global _installed
    with _lock:
        if _installed:
            return
        import torch.random

        _hook_torch(torch.random)
        _originals["random.seed"] = random.seed
        random.seed = _random_seed  # type: ignore[assignment]
        _originals["numpy.random.seed"] = np.random.seed
        np.random.seed = _numpy_seed
        _installed = True
