"""Asynchronous copies of pinned slots to the GPU, on a side CUDA stream.

The producer calls :meth:`DeviceCopier.copy` as soon as a batch is written: the copy
is queued on the copier's own stream with ``non_blocking=True``, so it runs while the
model is still busy with the previous batch on the consumer's stream. A CUDA event
marks the end of the copy; it orders the consumer after the copy
(:meth:`Transfer.tensor`) and fences the slot, which may be rewritten once the copy
is done (see :mod:`edgeload.cuda.memory`) rather than once the model is done.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._deps import require_torch
from ..errors import PlatformError
from .memory import as_cuda_tensor, memory_mode_of, record_gpu_use
from .status import cuda_status

__all__ = ["DeviceCopier", "Transfer"]


class Transfer:
    """One batch on its way to the GPU: the destination tensor and the copy's event.

    Args:
        tensor: the CUDA tensor being filled (or the zero-copy view).
        event: the CUDA event recorded after the copy on the side stream; None when
            nothing was copied (a mapped or managed slot viewed in place).
        nbytes: bytes copied.
    """

    def __init__(self, tensor: Any, *, event: Any, nbytes: int) -> None:
        self._tensor = tensor
        self.event = event
        self.nbytes = nbytes

    def done(self) -> bool:
        """Whether the copy has finished on the GPU (never blocks)."""
        return self.event is None or bool(self.event.query())

    def tensor(self, *, stream: Any = None) -> Any:
        """The CUDA tensor, safe to use on ``stream`` (default: the current stream).

        Queues a wait for the copy on ``stream`` instead of blocking the CPU, and tells
        torch's allocator the tensor is used there, so its memory is not reused early.
        """
        if self.event is None:
            return self._tensor
        torch = require_torch()
        consumer = stream if stream is not None else torch.cuda.current_stream()
        consumer.wait_event(self.event)
        self._tensor.record_stream(consumer)
        return self._tensor


class DeviceCopier:
    """Copies slot arrays to a CUDA device on a side stream, without blocking the CPU.

    to_device() is the one call a loader needs: it picks the zero-copy view or the
    asynchronous copy from the slot's memory mode.

    Thread-safe: producers may call copy() from any thread.

    Args:
        device: the torch CUDA device; default the current one.

    Raises:
        PlatformError: CUDA is not usable here (the message says why).
    """

    def __init__(self, *, device: Any = None) -> None:
        status = cuda_status()
        if not status.usable:
            raise PlatformError(
                f"DeviceCopier needs a CUDA device; {status.reason}. "
                "Keep batches on the CPU (device='cpu', memory_mode='host')."
            )
        torch = require_torch()
        chosen = torch.device(device if device is not None else "cuda")
        if chosen.index is None:  # "cuda" means the current device; name it
            chosen = torch.device("cuda", torch.cuda.current_device())
        self.device = chosen
        self._stream = torch.cuda.Stream(device=self.device)
        self._lock = threading.Lock()
        self.copies = 0
        self.bytes_copied = 0

    @property
    def stream(self) -> Any:
        """The side stream the copies run on."""
        return self._stream

    def copy(self, array: np.ndarray[Any, Any]) -> Transfer:
        """Queue a copy of ``array`` to the GPU and return at once.

        The array's slot stays fenced until the copy has run (see
        edgeload.cuda.memory.gpu_busy). Page-locked (``pinned``) memory gives a truly
        asynchronous copy; pageable host memory works but the CPU waits for it.

        Args:
            array: the batch as written by the workers, any shape and dtype.
        """
        torch = require_torch()
        source = torch.from_numpy(array)
        with torch.cuda.stream(self._stream):
            target = source.to(self.device, non_blocking=memory_mode_of(array) != "host")
            event = torch.cuda.Event()
            event.record(self._stream)
        record_gpu_use(array, stream=self._stream)
        with self._lock:
            self.copies += 1
            self.bytes_copied += array.nbytes
        return Transfer(target, event=event, nbytes=array.nbytes)

    def to_device(self, array: np.ndarray[Any, Any]) -> Transfer:
        """Bring a slot array to the GPU the way its memory mode allows.

        ``mapped`` and ``managed`` memory is viewed in place (zero copies, see
        edgeload.cuda.memory.as_cuda_tensor); ``pinned`` memory is copied asynchronously
        (copy()); ``host`` memory is copied synchronously.

        Args:
            array: a slot view, typically from ``SlotPool.lease``.
        """
        if memory_mode_of(array) in ("mapped", "managed"):
            return Transfer(as_cuda_tensor(array, device=self.device), event=None, nbytes=0)
        return self.copy(array)
