"""Shared memory in ``/dev/shm``: edgeload's own segments, the worker-side attach cache,
and torch's shared memory in a worker process with its pages reserved up front.

edgeload creates the files itself rather than through ``multiprocessing.shared_memory``:
that class registers every attach with the resource tracker (Python < 3.13), which
then unlinks or warns about segments the parent still owns, and its ``__del__`` raises
BufferError while numpy views exist. A plain file plus ``mmap`` has neither problem, and
the owner unlinks it on close, on garbage collection and at interpreter exit.

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

import contextlib
import errno
import fcntl
import logging
import mmap
import os
import secrets
import sys
import threading
import time
from typing import Any, NamedTuple

import numpy as np

from ..errors import PlatformError

__all__ = [
    "SHM_DIR",
    "HostMemory",
    "SharedSegment",
    "SlotRef",
    "attach",
    "check_shm_space",
    "detach_all",
    "install",
    "reserve",
    "sweep_stale_segments",
]

SHM_DIR = "/dev/shm"
"""Where shared slots live (a tmpfs on Linux; Docker gives it 64 MiB by default)."""
SEGMENT_PREFIX = "edgeload-"
# A segment younger than this is never swept: its creator may not hold its lock yet.
_SWEEP_MIN_AGE_S = 30.0

_log = logging.getLogger("edgeload")
_swept: set[str] = set()
_sweep_lock = threading.Lock()

_MIB = 1 << 20


def check_shm_space(nbytes: int, *, shm_dir: str = SHM_DIR, what: str = "shared slots") -> None:
    """Raise PlatformError unless ``shm_dir`` has ``nbytes`` free.

    tmpfs accepts a file larger than its free space and kills the writer with SIGBUS
    later, so the check must come before the segment is created.

    Raises:
        PlatformError: not enough room (the message names ``--shm-size``), or no such dir.
    """
    try:
        st = os.statvfs(shm_dir)
    except OSError as exc:
        raise PlatformError(
            f"{shm_dir} is not usable for {what} ({exc}); use thread workers instead"
        ) from exc
    free = st.f_bavail * st.f_frsize
    if nbytes > free:
        need_mib = -(-nbytes // _MIB)
        raise PlatformError(
            f"{shm_dir} has {free / _MIB:.1f} MiB free but {what} need {need_mib} MiB. "
            f"In Docker, start the container with --shm-size={max(need_mib * 2, 256)}m "
            "(the default is 64m); or lower the batch size or prefetch budget; or use "
            "thread workers (worker_kind='thread'), which need no shared memory"
        )


class SharedSegment:
    """One shared-memory file, mapped read-write; the creator owns and unlinks it.

    Args:
        nbytes: size in bytes (> 0).
        shm_dir: directory of the tmpfs.
        tag: short text put in the file name, for whoever lists ``/dev/shm``.

    Raises:
        PlatformError: too little room in ``shm_dir`` (see :func:`check_shm_space`).
    """

    def __init__(self, nbytes: int, *, shm_dir: str = SHM_DIR, tag: str = "slots") -> None:
        check_shm_space(nbytes, shm_dir=shm_dir)
        self.name: str | None = f"edgeload-{os.getpid()}-{tag}-{secrets.token_hex(4)}"
        self.shm_dir = shm_dir
        self.path = os.path.join(shm_dir, self.name)
        sweep_stale_segments(shm_dir)
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            # Held for the segment's life: a sweeper in a later process can take the
            # exclusive lock only once this owner is gone (even SIGKILLed).
            fcntl.flock(fd, fcntl.LOCK_SH)
            os.ftruncate(fd, nbytes)
            reserve(fd, nbytes, shm_dir)
            self._mmap: mmap.mmap | None = mmap.mmap(fd, nbytes)
        except BaseException:
            os.unlink(self.path)
            os.close(fd)
            raise
        self._lock_fd: int | None = fd
        self.buffer = memoryview(self._mmap)
        self._owner_pid = os.getpid()

    def close(self) -> None:
        """Unlink the file and unmap it once no view is left; idempotent."""
        if os.getpid() == self._owner_pid:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.buffer.release()
        if self._mmap is not None:
            # A batch the user kept still maps it: then it is unmapped when that goes.
            with contextlib.suppress(BufferError):
                self._mmap.close()
            self._mmap = None


def reserve(fd: int, nbytes: int, shm_dir: str, *, what: str = "shared slots") -> None:
    """Back every page of the file ``fd`` now, so a /dev/shm that fills up later cannot
    kill a worker with SIGBUS on its first write to it (tmpfs allocates lazily).

    Raises:
        PlatformError: ``shm_dir`` ran out of room (the message names ``--shm-size``).
    """
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return  # a filesystem without fallocate: the space check before is all
        raise PlatformError(
            f"{shm_dir} ran out of room while reserving {nbytes / _MIB:.1f} MiB for "
            f"{what} ({exc.strerror}): something else filled it. In Docker, start the "
            "container with a larger --shm-size; or lower the batch size or prefetch "
            "budget; or use thread workers (worker_kind='thread')"
        ) from exc


def sweep_stale_segments(shm_dir: str = SHM_DIR, *, force: bool = False) -> list[str]:
    """Unlink segments whose owning process is gone; once per directory and process
    unless ``force``.

    A process killed with SIGKILL cannot unlink its segments. Each owner holds a shared
    ``flock`` on its segment, so a segment on which an exclusive lock succeeds has no
    owner left - this holds across PID namespaces sharing one ``/dev/shm``, where a PID
    check would not.

    Returns:
        The names removed.
    """
    with _sweep_lock:
        if shm_dir in _swept and not force:
            return []
        _swept.add(shm_dir)
    removed = []
    try:
        names = [n for n in os.listdir(shm_dir) if n.startswith(SEGMENT_PREFIX)]
    except OSError:
        return []
    now = time.time()
    for name in names:
        path = os.path.join(shm_dir, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if now - os.fstat(fd).st_mtime < _SWEEP_MIN_AGE_S:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # an owner still holds it (or it vanished)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            removed.append(name)
        finally:
            os.close(fd)
    if removed:
        _log.warning(
            "removed %d shared-memory segment(s) left in %s by killed processes: %s",
            len(removed),
            shm_dir,
            ", ".join(removed),
        )
    return removed


class HostMemory:
    """Page-aligned anonymous memory for this process's threads (an ``mmap`` of no
    file, which maps it shared: shmem, in small pages)."""

    name: str | None = None
    shm_dir = ""

    def __init__(self, nbytes: int) -> None:
        self._mmap = mmap.mmap(-1, nbytes)
        self.buffer = memoryview(self._mmap)

    def close(self) -> None:
        self.buffer.release()
        # A batch the user kept still maps it: then it is unmapped when that goes.
        with contextlib.suppress(BufferError):
            self._mmap.close()


class SlotRef(NamedTuple):
    """A picklable handle to one shared slot, for a worker process to write into."""

    segment: str
    """File name of the segment in ``shm_dir``."""
    shm_dir: str
    offset: int
    """Byte offset of the slot in the segment (page-aligned)."""
    shape: tuple[int, ...]
    dtype: str
    slot_index: int
    """Slot index in its pool."""


_attached: dict[str, mmap.mmap] = {}
_attach_lock = threading.Lock()


def attach(ref: SlotRef) -> np.ndarray:
    """Return a writable array over the slot ``ref`` names, mapping its segment once.

    Raises:
        FileNotFoundError: the segment is gone (its pool was closed).
    """
    path = os.path.join(ref.shm_dir, ref.segment)
    with _attach_lock:
        mm = _attached.get(path)
        if mm is None:
            fd = os.open(path, os.O_RDWR)
            try:
                mm = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            _attached[path] = mm
    count = int(np.prod(ref.shape))
    flat = np.frombuffer(mm, dtype=np.dtype(ref.dtype), count=count, offset=ref.offset)
    return flat.reshape(ref.shape)


def detach_all() -> None:
    """Unmap every segment this process attached (views still alive keep theirs)."""
    with _attach_lock:
        for mm in _attached.values():
            with contextlib.suppress(BufferError):
                mm.close()
        _attached.clear()


# Torch's shared memory in a worker process (see the module docstring).

_WHAT = "the tensors a worker process sends"
_PAGE = os.sysconf("SC_PAGE_SIZE")
_installed = False


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
