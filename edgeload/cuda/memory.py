"""Slot memory for the GPU modes (pinned, mapped, managed) and the fences that guard it.

:func:`allocate_gpu_array` returns a flat uint8 numpy array whose ``base`` owns one
allocation (:class:`~edgeload.cuda._owner.SlotMemory`), so the slot pool slices, leases
and recycles it like host memory. The allocation is freed only when the last array or
tensor viewing it is gone *and* the GPU work recorded against it has finished.

The lease rule gains a GPU half: a slot is not rewritten while GPU work that reads it
is still queued. Whoever queues such work records a fence (an event) on the slot's
bytes with :func:`record_gpu_use`; the slot pool records one on the consumer's stream
when the consumer drops a batch, and asks :func:`gpu_busy` before it hands a slot to
a producer again. A tensor from :func:`as_cuda_tensor` holds its slot's lease while
it lives and fences the bytes when it dies.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .._deps import require_torch
from ..errors import ArgumentError, PlatformError
from ..vocabulary import GPU_MEMORY_MODES, MemoryMode
from ._fences import POLL_S, hold_until_done
from ._owner import SlotMemory, byte_range, find_owner

__all__ = [
    "CudaBacking",
    "allocate_gpu_array",
    "as_cuda_tensor",
    "fence_bytes",
    "gpu_allocator",
    "gpu_busy",
    "memory_mode_of",
    "record_gpu_use",
    "wait_gpu_idle",
]

_log = logging.getLogger(__name__)


def _engine(engine: Any) -> Any:
    if engine is not None:
        return engine
    from .engine import default_engine

    return default_engine()


def allocate_gpu_array(
    mode: MemoryMode, nbytes: int, *, engine: Any = None
) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """Allocate ``nbytes`` of slot memory in a GPU mode, as a flat uint8 array.

    The array (and any view of it) keeps the allocation alive; the memory is
    page-aligned.

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        nbytes: size in bytes, > 0.
        engine: the GPU engine (default: CUDA through torch).

    Raises:
        ArgumentError: ``mode`` is not a GPU memory mode or ``nbytes`` is not positive.
        PlatformError: this machine cannot give ``mode`` (why, and which mode works).
    """
    if mode not in GPU_MEMORY_MODES:
        raise ArgumentError(
            f"allocate_gpu_array() makes GPU slot memory, one of {GPU_MEMORY_MODES}, got {mode!r}; "
            "host memory comes from edgeload.pipeline.slots"
        )
    if not isinstance(nbytes, int) or nbytes <= 0:
        raise ArgumentError(f"nbytes must be a positive int, got {nbytes!r}")
    chosen = _engine(engine)
    chosen.check_memory_mode(mode)
    return np.asarray(chosen.allocate_slot_memory(mode, nbytes))


class CudaBacking:
    """GPU-mode slot memory in the shape ``edgeload.pipeline.slots`` expects of an allocator.

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        nbytes: size in bytes.
        engine: the GPU engine (default: CUDA).

    Raises:
        ArgumentError, PlatformError: as allocate_gpu_array().
    """

    name: str | None = None
    shm_dir = ""

    def __init__(self, mode: MemoryMode, nbytes: int, *, engine: Any = None) -> None:
        self._array: np.ndarray[Any, Any] | None = allocate_gpu_array(mode, nbytes, engine=engine)
        self.buffer = self._array.data

    def close(self) -> None:
        """Drop the pool's hold; the memory goes once no view or queued GPU work uses it."""
        with contextlib.suppress(BufferError):
            self.buffer.release()
        self._array = None


def gpu_allocator(mode: MemoryMode, engine: Any = None) -> Callable[[int, bool, str], CudaBacking]:
    """The slot-pool allocator for a GPU memory mode (``register_memory_mode``'s second argument).

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        engine: the GPU engine (default: CUDA).
    """

    def gpu_backing(nbytes: int, shared: bool, shm_dir: str) -> CudaBacking:
        if shared:
            # GPU host allocations live in this process only; /dev/shm segments could be
            # registered with cudaHostRegister, but that is not built yet.
            raise PlatformError(
                f"memory_mode={mode!r} slots cannot be shared with worker processes "
                f"(shm_dir={shm_dir!r}); use thread workers (worker_kind='thread', which "
                "suits decoding) or memory_mode='host'"
            )
        return CudaBacking(mode, nbytes, engine=engine)

    return gpu_backing


def memory_mode_of(view: Any) -> MemoryMode:
    """The memory mode of the slot memory ``view`` lies in (``"host"`` for anything else).

    ``view`` may be a numpy array or a CPU torch tensor; the allocation is found by
    address, so views of views (a batch tensor over a pool view) are found too.
    """
    owner = find_owner(view)
    return "host" if owner is None else owner.mode  # type: ignore[return-value]


def record_gpu_use(view: Any, *, stream: Any = None) -> bool:
    """Fence ``view``'s bytes: they count as in use until ``stream``'s queued work is done.

    Until then ``view`` itself is kept alive, so a slot pool that recycles a slot when
    its last view goes cannot hand the slot to a producer early.

    Args:
        view: a view of GPU slot memory (from allocate_gpu_array()), numpy or torch.
        stream: a stream of the memory's engine; default its current stream.

    Returns:
        False, doing nothing, when ``view`` is host memory.
    """
    owner = find_owner(view)
    if owner is None:
        return False
    engine = owner.engine
    event = engine.new_event()
    event.record(stream if stream is not None else engine.current_stream())
    owner.fences.add(*byte_range(view, owner), event)
    hold_until_done(event, view)
    return True


def gpu_busy(view: Any) -> bool:
    """Whether GPU work fenced on any of ``view``'s bytes is still queued or running."""
    owner = find_owner(view)
    return owner is not None and owner.fences.busy(*byte_range(view, owner))


def wait_gpu_idle(view: Any, *, timeout_s: float) -> bool:
    """Wait until gpu_busy(view) is false; False if ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    while gpu_busy(view):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def cuda_array_interface(array: np.ndarray[Any, Any], owner: SlotMemory) -> dict[str, Any]:
    """``__cuda_array_interface__`` (version 3) for a host view of mapped or managed memory."""
    offset = int(array.__array_interface__["data"][0]) - owner.host_ptr
    return {
        "shape": array.shape,
        "typestr": array.dtype.str,
        "strides": None if array.flags.c_contiguous else array.strides,
        # torch refuses read_only=True (it has no read-only tensors); the view is
        # handed out writable, as torch.from_numpy hands out a writable CPU tensor.
        "data": (owner.device_ptr + offset, False),
        "version": 3,
        # The CPU finished writing before the view was made: nothing to wait for.
        "stream": None,
    }


def _attach_mode(engine: Any, stream: Any) -> str:
    # cudaMemAttachSingle is invalid on the legacy NULL stream (torch's default), so there
    # the slot is attached globally for the use; other slots stay host-attached, which
    # keeps the decoder free to write them while kernels run.
    return "global" if engine.is_legacy_stream(stream) else "single"


def fence_bytes(view: Any, stream: Any) -> bool:
    """Count ``view``'s bytes as in use until ``stream``'s queued work is done (no hold).

    Unlike record_gpu_use() nothing is kept alive: a slot pool skips fenced free slots
    (gpu_busy) and the memory is freed only after its fences complete.

    Returns:
        False, doing nothing, when ``view`` is host memory.
    """
    owner = find_owner(view)
    if owner is None:
        return False
    event = owner.engine.new_event()
    event.record(stream)
    owner.fences.add(*byte_range(view, owner), event)
    return True


class _DeviceView:
    """A CUDA array interface over a host view of mapped or managed memory.

    It holds ``array`` (so the slot's lease lasts as long as the tensor) and, when the
    tensor dies, fences the bytes on the stream the view was made on (the consumer's)
    after the work of the thread dropping it, if that runs on another stream.
    """

    def __init__(self, array: np.ndarray[Any, Any], owner: SlotMemory, stream: Any) -> None:
        self._array = array
        self._owner = owner
        self._stream = stream
        self.__cuda_array_interface__ = cuda_array_interface(array, owner)

    def __del__(self) -> None:
        if sys.is_finalizing():  # nothing reuses the slot now, and events may not be made
            return
        try:
            engine, stream = self._owner.engine, self._stream
            dropping = engine.current_stream()
            if dropping is not stream and dropping != stream:
                done_there = engine.new_event()
                done_there.record(dropping)
                stream.wait_event(done_there)
            if self._owner.attach_per_stream:
                engine.attach(self._owner, stream, mode="host")
            # A fence, not a hold: the slot pool skips fenced slots by itself, and a
            # hold would count as a batch the user keeps until a polling thread noticed.
            fence_bytes(self._array, stream)
        except Exception as exc:  # a finaliser must not raise; the slot then waits for a sync
            _log.warning("edgeload: could not fence slot memory after GPU use: %s", exc)


def as_cuda_tensor(array: Any, *, device: Any = None) -> Any:
    """View mapped or managed slot memory as a CUDA tensor, with no copy.

    The GPU reads the very bytes the CPU wrote into ``array``. The tensor keeps
    ``array`` (and so the slot's lease) alive; when it dies, the GPU work queued on it
    is fenced (see record_gpu_use()).

    Args:
        array: a view (numpy, or CPU torch tensor) of memory from allocate_gpu_array("mapped") or
            allocate_gpu_array("managed").
        device: the CUDA device; default the current one.

    Raises:
        ArgumentError: ``array`` is host or pinned memory, which the GPU cannot read
            in place; copy it with edgeload.cuda.transfer.DeviceCopier instead.
    """
    owner = find_owner(array)
    if owner is None or owner.mode == "pinned":
        mode = "host" if owner is None else owner.mode
        raise ArgumentError(
            f"as_cuda_tensor() needs mapped or managed slot memory, got {mode!r} memory; "
            "copy it to the GPU with edgeload.cuda.transfer.DeviceCopier (or use "
            "memory_mode='mapped')"
        )
    host = array if isinstance(array, np.ndarray) else array.numpy()
    engine = owner.engine
    stream = engine.current_stream()
    if owner.attach_per_stream:
        engine.attach(owner, stream, mode=_attach_mode(engine, stream))
    if device is None and engine.name == "cuda":
        # An index-less "cuda" would not match the view's cuda:N and could make as_tensor copy.
        device = require_torch().device("cuda", stream.device_index)
    return engine.view(_DeviceView(host, owner, stream), device)


class SlotGuard:
    """The slot pool's GPU half of the lease rule, for pools in a GPU memory mode.

    When the consumer drops a batch, the pool calls :meth:`fence` with the stream that
    was current in the consumer's thread when the batch was handed out, and the pool
    skips a free slot while :meth:`busy` says the GPU still reads it. So a
    ``batch.cuda(non_blocking=True)`` queued behind the model's kernels finishes
    before the slot is written again.

    Args:
        engine: the GPU engine of the pool's memory.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def consumer_stream(self) -> Any:
        """The stream current in the calling (consumer's) thread."""
        return self.engine.current_stream()

    def fence(self, view: np.ndarray[Any, Any], stream: Any) -> bool:
        """Fence ``view``'s bytes on ``stream`` and on the calling thread's stream.

        Returns False when no fence could be made (interpreter exit, a broken
        runtime): the pool then retires the slot rather than risk rewriting it.
        """
        if sys.is_finalizing():
            return False
        owner = find_owner(view)
        if owner is None:
            return True
        try:
            here = self.engine.current_stream()
            fence_bytes(view, here)
            if stream is not None and stream is not here and stream != here:
                fence_bytes(view, stream)
        except Exception as exc:
            _log.warning("edgeload: could not fence a released slot; retiring it: %s", exc)
            return False
        return True

    def busy(self, view: np.ndarray[Any, Any]) -> bool:
        """Whether GPU work fenced on ``view``'s bytes is still queued."""
        return gpu_busy(view)
