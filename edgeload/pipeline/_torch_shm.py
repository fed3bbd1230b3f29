"""Torch's shared memory in a worker process, with its pages reserved up front.

A tensor a worker process sends goes through torch's reducers, which copy its storage
into a new file in ``/dev/shm``; ``default_collate`` in a worker stacks a batch straight
into one (``_new_shared``). Torch sized that file with ``ftruncate`` alone until recent
releases (every JetPack 5 build, 1.11 - 2.1, does), and tmpfs allocates lazily:
when ``/dev/shm`` is too small - Docker's 64 MB default, as in NVIDIA's L4T containers -
the copy kills the worker with SIGBUS instead of raising, and the user is told only
that a worker died.

:func:`install`, run in each worker process, makes both paths reserve every page of the
file before anything is written: ``/dev/shm`` is checked for room, the file is created
by torch and then ``posix_fallocate``-d, so a full ``/dev/shm`` is a PlatformError naming
``--shm-size`` and thread workers, raised in the worker and sent to the parent. A
storage sent from private memory is copied into such a reserved one (torch would copy
it into shared memory too), so the worker's own storage stays where it was.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from ._shm import SHM_DIR, check_shm_space, reserve

__all__ = ["install"]

_WHAT = "the tensors a worker process sends"
_PAGE = os.sysconf("SC_PAGE_SIZE")
_installed = False
_log = logging.getLogger("edgeload")


def install() -> None:
    """Make torch's shared memory in this process reserve its pages; idempotent.

    Does nothing until torch is imported (it registers its reducers on import), so it
    is called again before each result a worker sends.
    """
    global _installed
    if _installed:
        return
    reductions = sys.modules.get("torch.multiprocessing.reductions")
    if reductions is None:
        return
    from multiprocessing.reduction import ForkingPickler

    _installed = True
    original = reductions.reduce_storage
    table = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    # The untyped storage class (torch 1.12: ``_UntypedStorage``; 2.x: ``UntypedStorage``):
    # typed storages and tensors reduce to it.
    for cls in [c for c, fn in table.items() if fn is original]:
        try:
            _reserve_new_shared(cls)
        except AttributeError as exc:  # a torch laid out otherwise: leave it as it is
            _log.debug("edgeload: torch shared memory left unreserved: %s", exc)
            continue
        table[cls] = _reducer(original)


def _reducer(reduce_storage: Any) -> Any:
    """torch's ``reduce_storage``, sending a private storage through a reserved copy."""

    def reduce_reserved(storage: Any) -> Any:
        if storage.device.type == "cpu" and storage.nbytes() and not storage.is_shared():
            shared = type(storage)._new_shared(storage.nbytes())
            shared.copy_(storage)
            storage = shared
        return reduce_storage(storage)

    return reduce_reserved


def _reserve_new_shared(cls: Any) -> None:
    """Wrap ``cls._new_shared`` (which ``default_collate`` uses in a worker) to reserve."""
    new_shared = cls._new_shared.__func__

    # torch 1.11: _new_shared(size); 1.12 and later: _new_shared(size, *, device="cpu")
    def reserved(klass: Any, /, size: int, **device: Any) -> Any:
        import torch

        if torch.device(device.get("device", "cpu")).type != "cpu" or size <= 0:
            return new_shared(klass, size, **device)
        check_shm_space(-(-size // _PAGE) * _PAGE, what=_WHAT)
        storage = new_shared(klass, size, **device)
        _reserve_storage(storage, size)
        return storage

    cls._new_shared = classmethod(reserved)


def _reserve_storage(storage: Any, nbytes: int) -> None:
    from torch.multiprocessing import get_sharing_strategy

    # torch 1.11 names them _share_fd_ / _share_filename_; 1.12 and later add "cpu"
    if get_sharing_strategy() != "file_system":  # type: ignore[no-untyped-call]
        share_fd = getattr(storage, "_share_fd_cpu_", None) or storage._share_fd_
        fd, _ = share_fd()  # the storage's own descriptor, no copy
        reserve(fd, nbytes, SHM_DIR, what=_WHAT)
        return
    share_filename = getattr(storage, "_share_filename_cpu_", None) or storage._share_filename_
    _, name, _ = share_filename()
    fd = os.open(SHM_DIR + os.fsdecode(name), os.O_RDWR)
    try:
        reserve(fd, nbytes, SHM_DIR, what=_WHAT)
    finally:
        os.close(fd)
