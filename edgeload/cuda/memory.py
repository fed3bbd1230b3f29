"""Slot memory for the GPU modes (pinned, mapped, managed), and the GPU's view of it in place.

:func:`allocate_gpu_array` returns a flat uint8 numpy array whose ``base`` owns one
allocation (:class:`~edgeload.cuda._lease.SlotMemory`), so the slot pool slices, leases
and recycles it like host memory (:func:`gpu_allocator` is the pool's allocator for a
mode). The allocation is freed only when the last array or tensor viewing it is gone
*and* the GPU work recorded against it has finished.

Mapped and managed slot memory is seen by the GPU in place, as a CUDA tensor with no
copy: :func:`as_cuda_tensor` wraps a host view in a ``__cuda_array_interface__`` object
whose device pointer is the same bytes; the tensor keeps the view (and so the slot's
lease) alive, and fences the bytes on the consumer's stream when it dies.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._deps import require_torch
from ..errors import ArgumentError, PlatformError
from ..vocabulary import GPU_MEMORY_MODES, MemoryMode
from ._lease import SlotMemory, fence_bytes, find_owner

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from .engine import Engine

__all__ = [
    "CudaBacking",
    "allocate_gpu_array",
    "as_cuda_tensor",
    "cuda_array_interface",
    "gpu_allocator",
    "memory_mode_of",
]

_log = logging.getLogger(__name__)


def _engine(engine: Engine | None) -> Engine:
    if engine is not None:
        return engine
    from .engine import default_engine

    return default_engine()


def allocate_gpu_array(
    mode: MemoryMode, nbytes: int, *, engine: Engine | None = None
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

    def __init__(self, mode: MemoryMode, nbytes: int, *, engine: Engine | None = None) -> None:
        self._array: np.ndarray[Any, Any] | None = allocate_gpu_array(mode, nbytes, engine=engine)
        self.buffer = self._array.data

    def close(self) -> None:
        """Drop the pool's hold; the memory goes once no view or queued GPU work uses it."""
        with contextlib.suppress(BufferError):
            self.buffer.release()
        self._array = None


def gpu_allocator(
    mode: MemoryMode, engine: Engine | None = None
) -> Callable[[int, bool, str], CudaBacking]:
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


def _attach_mode(engine: Engine, stream: Any) -> str:
    # cudaMemAttachSingle is invalid on the legacy NULL stream (torch's default), so there
    # the slot is attached globally for the use; other slots stay host-attached, which
    # keeps the decoder free to write them while kernels run.
    return "global" if engine.is_legacy_stream(stream) else "single"


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
        # The fence is for the next user of the slot: at interpreter exit there is none.
        weakref.finalize(self, _fence_after_use, array, owner, stream).atexit = False


def _fence_after_use(array: np.ndarray[Any, Any], owner: SlotMemory, stream: Any) -> None:
    """A device view's finalizer: fence the slot's bytes on ``stream`` (see _DeviceView)."""
    if sys.is_finalizing():  # nothing reuses the slot now, and events may not be made
        return
    try:
        engine = owner.engine
        dropping = engine.current_stream()
        if dropping is not stream and dropping != stream:
            done_there = engine.new_event()
            done_there.record(dropping)
            stream.wait_event(done_there)
        if owner.attach_per_stream:
            engine.attach(owner, stream, mode="host")
        # A fence, not a hold: the slot pool skips fenced slots by itself, and a
        # hold would count as a batch the user keeps until a polling thread noticed.
        fence_bytes(array, stream)
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
