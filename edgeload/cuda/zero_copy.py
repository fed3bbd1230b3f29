"""Mapped and managed slot memory seen by the GPU in place: a CUDA tensor, no copy.

:func:`as_cuda_tensor` wraps a host view in a ``__cuda_array_interface__`` object whose
device pointer is the same bytes; the tensor keeps the view (and so the slot's lease)
alive, and fences the bytes on the consumer's stream when it dies.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np

from .._deps import require_torch
from ..errors import ArgumentError
from ._owner import SlotMemory, find_owner
from .gpu_use import fence_bytes

__all__ = ["as_cuda_tensor", "cuda_array_interface"]

_log = logging.getLogger(__name__)


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
