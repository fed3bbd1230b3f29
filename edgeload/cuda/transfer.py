"""Asynchronous copies of pinned slots to the GPU, on a side CUDA stream.

The producer calls :meth:`DeviceCopier.copy` as soon as a batch is written: the copy
is queued on the copier's own stream with ``non_blocking=True``, so it runs while the
model is still busy with the previous batch on the consumer's stream. A CUDA event
marks the end of the copy; it orders the consumer after the copy
(:meth:`Transfer.tensor`) and fences the slot, which may be rewritten once the copy
is done (see :mod:`edgeload.cuda._lease`) rather than once the model is done.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._compat import tensor_nbytes
from .._deps import require_torch
from ..errors import PlatformError
from ._lease import record_gpu_use
from .engine import Engine, default_engine
from .memory import as_cuda_tensor, memory_mode_of

__all__ = ["DeviceCopier", "Transfer"]


class Transfer:
    """One batch on its way to the GPU: the destination tensor and the copy's event.

    Args:
        tensor: the CUDA tensor being filled (or the zero-copy view).
        event: the event recorded after the copy on the side stream; None when
            nothing was copied (a mapped or managed slot viewed in place).
        nbytes: bytes copied.
        engine: the engine that made it (default: CUDA).
    """

    def __init__(
        self, tensor: Any, *, event: Any, nbytes: int, engine: Engine | None = None
    ) -> None:
        self._tensor = tensor
        self.event = event
        self.nbytes = nbytes
        self._engine = engine if engine is not None else default_engine()

    @property
    def target(self) -> Any:
        """The tensor without waiting for the copy: for more work queued on the copier's
        stream, which runs after the copy."""
        return self._tensor

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
        consumer = stream if stream is not None else self._engine.current_stream()
        consumer.wait_event(self.event)
        self._engine.record_stream(self._tensor, consumer)
        return self._tensor


class DeviceCopier:
    """Copies slot views to a CUDA device on a side stream, without blocking the CPU.

    to_device() is the one call a loader needs: it picks the zero-copy view or the
    asynchronous copy from the slot's memory mode.

    Thread-safe: producers may call copy() from any thread.

    Args:
        device: the CUDA device; default the current one.
        engine: the GPU engine (default: CUDA through torch; a
            ``HostEngine`` runs the same path on the CPU).

    Raises:
        PlatformError: CUDA is not usable here (the message says why), or ``device``
            does not exist.
    """

    def __init__(self, *, device: Any = None, engine: Engine | None = None) -> None:
        self.engine = engine if engine is not None else default_engine()
        wanted = device if device is not None else "cuda"
        status = self.engine.status()
        if not status.usable:
            raise PlatformError(
                f"device={str(wanted)!r} needs a CUDA device; {status.reason}. "
                "Keep batches on the CPU (device=None, memory_mode='host')."
            )
        self.device = self.engine.check_device(wanted)
        self._stream = self.engine.new_stream(self.device)
        self._lock = threading.Lock()
        self.copies = 0
        self.bytes_copied = 0

    @property
    def stream(self) -> Any:
        """The side stream the copies run on."""
        return self._stream

    def copy(self, view: Any, *, hold: bool = True) -> Transfer:
        """Queue a copy of ``view`` (numpy or CPU tensor) to the GPU and return at once.

        Page-locked memory gives a truly asynchronous copy; pageable host memory works
        but the CPU waits while it is staged.

        Args:
            view: the batch.
            hold: keep ``view`` alive, and its bytes fenced, until the copy has run (see
                edgeload.cuda._lease.gpu_busy). A slot pool that leased ``view`` with
                this copier's stream current fences it by itself: pass False there.
        """
        torch = require_torch()
        source = torch.from_numpy(view) if isinstance(view, np.ndarray) else view
        nbytes = tensor_nbytes(source)
        engine = self.engine
        with engine.use_stream(self._stream):
            target = engine.to_device(source, self.device, non_blocking=True)
            event = engine.new_event()
            event.record(self._stream)
        if hold:
            record_gpu_use(view, stream=self._stream)
        with self._lock:
            self.copies += 1
            self.bytes_copied += nbytes
        return Transfer(target, event=event, nbytes=nbytes, engine=engine)

    def to_device(self, view: Any, *, hold: bool = True) -> Transfer:
        """Bring a slot view to the GPU the way its memory mode allows.

        ``mapped`` and ``managed`` memory is viewed in place (zero copies, see
        edgeload.cuda.memory.as_cuda_tensor); ``pinned`` memory is copied asynchronously
        (copy()); ``host`` memory is copied while the CPU waits.

        Args:
            view: a slot view, or any array or CPU tensor.
            hold: as for copy().
        """
        if memory_mode_of(view) in ("mapped", "managed"):
            tensor = as_cuda_tensor(view, device=self.device)
            return Transfer(tensor, event=None, nbytes=0, engine=self.engine)
        return self.copy(view, hold=hold)
