"""A GPU made of CPU threads: the engine tests use to prove the lease rule without a GPU.

:class:`HostEngine` has :class:`~edgeload.cuda.engine.CudaEngine`'s interface. Its
streams are FIFO queues, each run by a thread that exists only while work is queued;
an asynchronous copy runs on that thread after ``copy_delay_s`` and reads the source
bytes *then*, as a DMA engine would, so a slot rewritten while its copy is queued
shows up as a wrong batch (and in ``stats()["torn_copies"]``). Copies from pageable
memory are staged at once, as CUDA stages them. Events complete when their stream
reaches them; a stream waiting on an event waits in order, like
``cudaStreamWaitEvent``. "Device" tensors are CPU tensors the engine made.

Pass it to a loader as ``engine=HostEngine(...)`` with ``device="cuda"``.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

from .._deps import require_torch
from ..errors import PlatformError
from ..vocabulary import GPU_MEMORY_MODES
from ._host_device import HostDevice
from ._host_streams import WAIT_LIMIT_S, HostEvent, HostStream, HostStreams
from ._owner import SlotMemory
from .engine import device_error, torch_device
from .status import CudaStatus

__all__ = ["HostEngine", "HostEvent", "HostStream"]


class HostEngine:
    """CudaEngine's interface on CPU threads, with a controllable copy delay.

    Args:
        copy_delay_s: seconds each asynchronous copy waits on its stream before it
            reads its source (a busy GPU); settable later as an attribute.
        device_count: how many "CUDA devices" it has (``cuda:0`` ...).
        modes: the GPU memory modes it offers.
        concurrent_managed_access: like the CUDA attribute; False (every Jetson) makes
            managed memory attach to a stream per use.
    """

    name = "host"

    def __init__(
        self,
        *,
        copy_delay_s: float = 0.0,
        device_count: int = 1,
        modes: tuple[str, ...] = GPU_MEMORY_MODES,
        concurrent_managed_access: bool = False,
    ) -> None:
        self.copy_delay_s = copy_delay_s
        self.device_count = device_count
        self.modes = tuple(modes)
        self.concurrent_managed_access = concurrent_managed_access
        self._streams = HostStreams()
        self.default_stream = self._streams.default
        self._device = HostDevice()

    # -- what the slot code asks ------------------------------------------------------

    def status(self) -> CudaStatus:
        return CudaStatus(True, f"host engine: {self.device_count} device(s), modes {self.modes}")

    def check_memory_mode(self, mode: str) -> None:
        if mode != "host" and mode not in self.modes:
            works = self.modes[0] if self.modes else "host"
            raise PlatformError(
                f"memory_mode={mode!r} is not offered by this host engine (it has "
                f"{self.modes}); use memory_mode={works!r}"
            )

    def check_device(self, device: Any) -> Any:
        torch = require_torch()
        chosen = torch_device(device)
        index = 0 if chosen.index is None else chosen.index
        if chosen.type != "cuda" or not 0 <= index < self.device_count:
            raise device_error(device, self.device_count, "the host engine")
        return torch.device("cuda", index)

    def allocate_slot_memory(self, mode: str, nbytes: int) -> SlotMemory:
        self.check_memory_mode(mode)
        per_stream = mode == "managed" and not self.concurrent_managed_access
        return self._device.allocate(self, mode, nbytes, attach_per_stream=per_stream)

    def current_stream(self) -> HostStream:
        return self._streams.current()

    def new_stream(self, device: Any = None) -> HostStream:
        return self._streams.new()

    def use_stream(self, stream: HostStream) -> AbstractContextManager[HostStream]:
        return self._streams.use(stream)

    def new_event(self) -> HostEvent:
        return HostEvent()

    def is_legacy_stream(self, stream: HostStream) -> bool:
        return stream.legacy

    def attach(self, owner: SlotMemory, stream: HostStream, *, mode: str) -> None:
        if mode == "single" and stream.legacy:
            # What cudaStreamAttachMemAsync answers for cudaMemAttachSingle on stream 0.
            raise PlatformError(
                "CUDA cudaStreamAttachMemAsync failed: invalid argument (cudaError 1)"
            )
        stream.submit(0.0, lambda: setattr(owner, "attached", mode))

    def view(self, interface: Any, device: Any) -> Any:
        return self._device.view(interface)

    def to_device(self, tensor: Any, device: Any, *, non_blocking: bool) -> Any:
        if self.is_device_tensor(tensor):
            return tensor
        return self._device.copy_in(
            tensor, self.current_stream(), delay_s=self.copy_delay_s, async_=non_blocking
        )

    def pin(self, tensor: Any) -> Any:
        return self._device.pin(self, tensor)

    def is_device_tensor(self, value: Any) -> bool:
        return self._device.holds(value)

    def record_stream(self, tensor: Any, stream: Any) -> None:
        """Nothing to do: the host engine's device memory is ordinary, reference-held memory."""

    def copies(self) -> dict[str, int]:
        """Full copies made through this engine, by kind (see engine.COPY_KINDS)."""
        return self._device.copies.snapshot()

    # -- what tests ask -----------------------------------------------------------------

    def busy(self, seconds: float, *, stream: HostStream | None = None) -> None:
        """Queue a "kernel" that keeps ``stream`` (default: current) busy for ``seconds``."""
        (stream or self.current_stream()).submit(seconds, lambda: None)

    def hold(self, *, stream: HostStream | None = None) -> threading.Event:
        """Stall ``stream`` (default: current) until the returned event is set.

        A "kernel" of unknown length: tests that need work to be still queued at a
        given point set the event only after checking, so no timing is involved.
        Released after WAIT_LIMIT_S at the latest.
        """
        gate = threading.Event()

        def stall() -> None:
            gate.wait(WAIT_LIMIT_S)

        (stream or self.current_stream()).submit(0.0, stall)
        return gate

    def read_later(self, tensor: Any, *, stream: HostStream | None = None) -> Any:
        """Queue a "kernel" that reads ``tensor`` when it runs; returns what it read.

        Like a real kernel it keeps slot memory mapped but not the slot's lease: drop
        ``tensor`` at once and the slot pool's fence is all that protects the bytes.
        """
        stream = stream or self.current_stream()
        return self._device.read_later(tensor, stream, delay_s=self.copy_delay_s)

    def synchronize(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        """Block until every stream has run what is queued on it."""
        self._streams.synchronize(timeout_s)

    def stats(self) -> dict[str, int]:
        """Copies by kind, and ``torn_copies``: async copies whose source changed while queued."""
        return {**self.copies(), "torn_copies": self._device.torn_copies()}

    def close(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        """Run what is queued and wait for the stream threads to exit."""
        self._streams.close(timeout_s)

    def __enter__(self) -> HostEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
