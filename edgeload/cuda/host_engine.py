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

import contextlib
import ctypes
import logging
import mmap
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._deps import require_torch
from ..errors import PlatformError
from ..vocabulary import GPU_MEMORY_MODES
from ._host_streams import WAIT_LIMIT_S, HostEvent, HostStream
from ._owner import SlotMemory, address_of, find_owner
from .engine import CopyCounter, device_error, torch_device
from .status import CudaStatus

__all__ = ["HostEngine", "HostEvent", "HostStream"]

_log = logging.getLogger(__name__)


class _HostArrayInterface:
    """What torch.as_tensor does with a ``__cuda_array_interface__``, on the CPU."""

    def __init__(self, view: Any) -> None:
        face = view.__cuda_array_interface__
        if face["data"][1]:
            # torch's own check (torch/csrc/utils/tensor_new.cpp): it has no read-only tensors.
            raise TypeError("the read only flag is not supported, should always be False")
        self._view = view  # the tensor keeps the view (and so the slot's lease) alive
        self.__array_interface__ = {**face, "version": 3}
        self.__array_interface__.pop("stream", None)


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
        self.default_stream = HostStream("default", legacy=True)
        self._streams = [self.default_stream]
        self._local = threading.local()
        self._copies = CopyCounter()
        self._lock = threading.Lock()
        self._torn = 0
        self._device_tensors: dict[int, Any] = {}

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
        memory = mmap.mmap(-1, nbytes)
        window = (ctypes.c_ubyte * nbytes).from_buffer(memory)
        address = ctypes.addressof(window)
        owner = SlotMemory(
            self,
            mode,
            nbytes,
            host_ptr=address,
            device_ptr=0 if mode == "pinned" else address,
            attach_per_stream=mode == "managed" and not self.concurrent_managed_access,
        )
        owner._keep = (memory, window)  # type: ignore[attr-defined]
        return owner

    def current_stream(self) -> HostStream:
        stream: HostStream | None = getattr(self._local, "stream", None)
        return stream if stream is not None else self.default_stream

    def new_stream(self, device: Any = None) -> HostStream:
        with self._lock:
            stream = HostStream(f"stream-{len(self._streams)}")
            self._streams.append(stream)
        return stream

    @contextlib.contextmanager
    def use_stream(self, stream: HostStream) -> Iterator[HostStream]:
        before = getattr(self._local, "stream", None)
        self._local.stream = stream
        try:
            yield stream
        finally:
            self._local.stream = before

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
        torch = require_torch()
        tensor = torch.from_numpy(np.asarray(_HostArrayInterface(interface)))
        self._mark_device(tensor)
        return tensor

    def to_device(self, tensor: Any, device: Any, *, non_blocking: bool) -> Any:
        if self.is_device_tensor(tensor):
            return tensor
        torch = require_torch()
        source = tensor.contiguous()
        target = torch.empty_like(source)
        self._mark_device(target)
        stream = self.current_stream()
        out = target.view(torch.uint8).numpy().reshape(-1) if source.nbytes else None
        owner = find_owner(source)
        if owner is not None and non_blocking:
            self._copies.add("h2d_async")
            address, nbytes = address_of(source), source.nbytes
            window = _window(address, nbytes)
            expected = zlib.crc32(window.tobytes())

            # The queued copy keeps the allocation mapped (``keep``), not the slot's lease.
            def copy(keep: SlotMemory = owner) -> None:
                # Reads the slot now, not when queued: a rewrite in between is caught.
                bytes_now = _window(address, nbytes)
                if zlib.crc32(bytes_now.tobytes()) != expected:
                    with self._lock:
                        self._torn += 1
                if out is not None:
                    out[:] = bytes_now

            stream.submit(self.copy_delay_s, copy)
        else:
            self._copies.add("h2d_pageable")
            staged = source.view(torch.uint8).numpy().reshape(-1).copy() if source.nbytes else None

            def land() -> None:
                if out is not None and staged is not None:
                    out[:] = staged

            stream.submit(self.copy_delay_s, land)
            if not non_blocking:
                stream.synchronize()
        return target

    def pin(self, tensor: Any) -> Any:
        torch = require_torch()
        self._copies.add("pin")
        source = tensor.contiguous()
        owner = self.allocate_slot_memory("pinned", max(1, source.nbytes))
        flat = torch.from_numpy(np.asarray(owner)[: source.nbytes])
        pinned = flat.view(source.dtype).reshape(source.shape)
        pinned.copy_(source)
        return pinned

    def is_device_tensor(self, value: Any) -> bool:
        with self._lock:
            held = self._device_tensors.get(id(value))
        return held is not None and held() is value

    def record_stream(self, tensor: Any, stream: Any) -> None:
        """Nothing to do: the host engine's device memory is ordinary, reference-held memory."""

    def copies(self) -> dict[str, int]:
        """Full copies made through this engine, by kind (see engine.COPY_KINDS)."""
        return self._copies.snapshot()

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
        torch = require_torch()
        out = torch.empty_like(tensor)
        owner = find_owner(tensor)
        address, nbytes = address_of(tensor), int(tensor.nbytes)
        flat = out.view(torch.uint8).numpy().reshape(-1) if nbytes else None
        keep: Any = owner if owner is not None else tensor

        def read(keep: Any = keep) -> None:
            if flat is not None:
                flat[:] = _window(address, nbytes)

        (stream or self.current_stream()).submit(self.copy_delay_s, read)
        return out

    def synchronize(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        """Block until every stream has run what is queued on it."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.synchronize(timeout_s)

    def stats(self) -> dict[str, int]:
        """Copies by kind, and ``torn_copies``: async copies whose source changed while queued."""
        with self._lock:
            torn = self._torn
        return {**self.copies(), "torn_copies": torn}

    def close(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        """Run what is queued and wait for the stream threads to exit."""
        self.synchronize(timeout_s)
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            if not stream.idle_thread(timeout_s):
                _log.warning("edgeload: host engine stream %s still running", stream.name)

    def __enter__(self) -> HostEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _mark_device(self, tensor: Any) -> None:
        import weakref

        key = id(tensor)

        def forget(_ref: object) -> None:
            with self._lock:
                if self._device_tensors.get(key) is ref:
                    del self._device_tensors[key]

        ref = weakref.ref(tensor, forget)
        with self._lock:
            self._device_tensors[key] = ref


def _window(address: int | None, nbytes: int) -> np.ndarray[Any, Any]:
    if not nbytes or address is None:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(address)).copy()
