"""A GPU made of CPU threads: the engine tests use to prove the lease rule without a GPU.

:class:`HostEngine` has :class:`~edgeload.cuda.engine.CudaEngine`'s interface. Its
streams are FIFO queues (:class:`HostStream`), each run by a thread named
``edgeload-hostgpu-<name>`` that exists only while work is queued; an asynchronous
copy runs on that thread after ``copy_delay_s`` and reads the source bytes *then*, as
a DMA engine would, so a slot rewritten while its copy is queued shows up as a wrong
batch (and in ``stats()["torn_copies"]``). Copies from pageable memory are staged at
once, as CUDA stages them. Events (:class:`HostEvent`) complete when their stream
reaches them; a stream waiting on an event waits in order, like
``cudaStreamWaitEvent``. "Device" tensors are CPU tensors the engine made; its
"device" (:class:`HostDevice`) keeps its slot memory, which tensors count as on the
GPU, and its copy counts.

Pass it to a loader as ``engine=HostEngine(...)`` with ``device="cuda"``.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import mmap
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from .._compat import tensor_nbytes
from .._deps import require_torch
from ..errors import PlatformError, WaitTimeout
from ..vocabulary import GPU_MEMORY_MODES
from ._lease import SlotMemory, address_of, find_owner
from .engine import CopyCounter, Engine, device_error, torch_device
from .status import CudaStatus

__all__ = ["WAIT_LIMIT_S", "HostDevice", "HostEngine", "HostEvent", "HostStream", "HostStreams"]


_log = logging.getLogger(__name__)

# A stream waiting on an event, or a caller synchronizing, gives up after this long:
# a test that deadlocks fails instead of hanging CI.
WAIT_LIMIT_S = 30.0


class HostEvent:
    """Completes when its stream has run everything queued before ``record``."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._done.set()  # an unrecorded CUDA event counts as complete

    def record(self, stream: HostStream) -> None:
        self._done.clear()
        stream.submit(0.0, self._done.set)

    def query(self) -> bool:
        return self._done.is_set()

    def synchronize(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        if not self._done.wait(timeout_s):
            raise WaitTimeout(f"host engine event not reached within {timeout_s} s")


class HostStream:
    """An in-order queue of work, run by a thread named ``edgeload-hostgpu-<name>``."""

    def __init__(self, name: str, *, legacy: bool = False) -> None:
        self.name = name
        self.legacy = legacy
        """The stand-in for CUDA's legacy NULL stream (``cuda_stream == 0``)."""
        self.cuda_stream = 0 if legacy else id(self)
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[float, Callable[[], None]]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._running = False

    def submit(self, delay_s: float, work: Callable[[], None]) -> None:
        """Queue ``work`` to run after everything before it, ``delay_s`` after it starts."""
        with self._cond:
            self._queue.append((delay_s, work))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"edgeload-hostgpu-{self.name}", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._thread = None
                    self._running = False
                    self._cond.notify_all()
                    return
                delay_s, work = self._queue.popleft()
                self._running = True
            if delay_s > 0:
                time.sleep(delay_s)
            try:
                work()
            except Exception:  # a broken item must not stop the stream behind it
                _log.exception("edgeload: host engine work on stream %s failed", self.name)
            # The last reference to a done item goes here, outside the lock: dropping it
            # can drop a slot's last view, whose callback takes the slot pool's lock,
            # and a producer holding that lock may be waiting to submit to this stream.
            del work

    def query(self) -> bool:
        """Whether everything queued has run."""
        with self._cond:
            return not self._queue and not self._running

    def wait_event(self, event: HostEvent) -> None:
        """Make later work on this stream wait until ``event`` completes."""
        self.submit(0.0, lambda: event.synchronize())

    def synchronize(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        """Block until everything queued so far has run."""
        event = HostEvent()
        event.record(self)
        event.synchronize(timeout_s)

    def idle_thread(self, timeout_s: float) -> bool:
        """Wait until the stream's thread has exited; False if it is still running."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True


class HostStreams:
    """The host engine's streams: the legacy default one, those made since, and which
    one each thread has current (``use``)."""

    def __init__(self) -> None:
        self.default = HostStream("default", legacy=True)
        self._all = [self.default]
        self._local = threading.local()
        self._lock = threading.Lock()

    def current(self) -> HostStream:
        """The calling thread's current stream (the default one unless in ``use``)."""
        stream: HostStream | None = getattr(self._local, "stream", None)
        return stream if stream is not None else self.default

    def new(self) -> HostStream:
        with self._lock:
            stream = HostStream(f"stream-{len(self._all)}")
            self._all.append(stream)
        return stream

    @contextlib.contextmanager
    def use(self, stream: HostStream) -> Iterator[HostStream]:
        """Make ``stream`` the calling thread's current stream inside the block."""
        before = getattr(self._local, "stream", None)
        self._local.stream = stream
        try:
            yield stream
        finally:
            self._local.stream = before

    def synchronize(self, timeout_s: float) -> None:
        """Block until every stream has run what is queued on it."""
        with self._lock:
            streams = list(self._all)
        for stream in streams:
            stream.synchronize(timeout_s)

    def close(self, timeout_s: float) -> None:
        """Run what is queued and wait for the stream threads to exit."""
        self.synchronize(timeout_s)
        with self._lock:
            streams = list(self._all)
        for stream in streams:
            if not stream.idle_thread(timeout_s):
                _log.warning("edgeload: host engine stream %s still running", stream.name)


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


def _window(address: int | None, nbytes: int) -> np.ndarray[Any, Any]:
    """A copy of ``nbytes`` at ``address`` as they are now."""
    if not nbytes or address is None:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(address)).copy()


class HostDevice:
    """The "device" tensors a host engine made, its copy counts and its torn copies."""

    def __init__(self) -> None:
        self.copies = CopyCounter()
        self._lock = threading.Lock()
        self._torn = 0
        self._tensors: dict[int, weakref.ref[Any]] = {}

    def torn_copies(self) -> int:
        """Async copies whose source changed between queueing and running."""
        with self._lock:
            return self._torn

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is a tensor this device made (a "device tensor")."""
        with self._lock:
            held = self._tensors.get(id(value))
        return held is not None and held() is value

    def mark(self, tensor: Any) -> None:
        """Count ``tensor`` as on the device for as long as it lives."""
        key = id(tensor)

        def forget(_ref: object) -> None:
            with self._lock:
                if self._tensors.get(key) is ref:
                    del self._tensors[key]

        ref = weakref.ref(tensor, forget)
        with self._lock:
            self._tensors[key] = ref

    def allocate(
        self, engine: Engine, mode: str, nbytes: int, *, attach_per_stream: bool
    ) -> SlotMemory:
        """Page-aligned anonymous memory standing in for ``mode``'s slot memory."""
        memory = mmap.mmap(-1, nbytes)
        window = (ctypes.c_ubyte * nbytes).from_buffer(memory)
        address = ctypes.addressof(window)
        owner = SlotMemory(
            engine,
            mode,
            nbytes,
            host_ptr=address,
            device_ptr=0 if mode == "pinned" else address,
            attach_per_stream=attach_per_stream,
        )
        owner._keep = (memory, window)  # type: ignore[attr-defined]
        return owner

    def pin(self, engine: Engine, tensor: Any) -> Any:
        """A copy of ``tensor`` in ``engine``'s "pinned" memory (counted as a ``pin`` copy)."""
        torch = require_torch()
        self.copies.add("pin")
        source = tensor.contiguous()
        nbytes = tensor_nbytes(source)
        owner = engine.allocate_slot_memory("pinned", max(1, nbytes))
        flat = torch.from_numpy(np.asarray(owner)[:nbytes])
        pinned = flat.view(source.dtype).reshape(source.shape)
        pinned.copy_(source)
        return pinned

    def view(self, interface: Any) -> Any:
        """A "device" tensor over the bytes ``interface`` describes (no copy)."""
        tensor = require_torch().from_numpy(np.asarray(_HostArrayInterface(interface)))
        self.mark(tensor)
        return tensor

    def copy_in(self, tensor: Any, stream: HostStream, *, delay_s: float, async_: bool) -> Any:
        """Copy ``tensor`` to a new device tensor on ``stream``, ``delay_s`` after it starts.

        With ``async_`` and a slot-memory source the copy reads its source when it runs;
        otherwise the source is staged now (and the caller waits unless ``async_``).
        """
        torch = require_torch()
        source = tensor.contiguous()
        target = torch.empty_like(source)
        self.mark(target)
        nbytes = tensor_nbytes(source)
        out = target.view(torch.uint8).numpy().reshape(-1) if nbytes else None
        owner = find_owner(source)
        if owner is not None and async_:
            self.copies.add("h2d_async")
            address = address_of(source)
            expected = zlib.crc32(_window(address, nbytes).tobytes())

            # The queued copy keeps the allocation mapped (``keep``), not the slot's lease.
            def copy(keep: SlotMemory = owner) -> None:
                # Reads the slot now, not when queued: a rewrite in between is caught.
                bytes_now = _window(address, nbytes)
                if zlib.crc32(bytes_now.tobytes()) != expected:
                    with self._lock:
                        self._torn += 1
                if out is not None:
                    out[:] = bytes_now

            stream.submit(delay_s, copy)
        else:
            self.copies.add("h2d_pageable")
            staged = source.view(torch.uint8).numpy().reshape(-1).copy() if nbytes else None

            def land() -> None:
                if out is not None and staged is not None:
                    out[:] = staged

            stream.submit(delay_s, land)
            if not async_:
                stream.synchronize()
        return target

    def read_later(self, tensor: Any, stream: HostStream, *, delay_s: float) -> Any:
        """Queue a "kernel" on ``stream`` that reads ``tensor`` when it runs; what it read."""
        torch = require_torch()
        out = torch.empty_like(tensor)
        owner = find_owner(tensor)
        address, nbytes = address_of(tensor), tensor_nbytes(tensor)
        flat = out.view(torch.uint8).numpy().reshape(-1) if nbytes else None
        keep: Any = owner if owner is not None else tensor

        def read(keep: Any = keep) -> None:
            if flat is not None:
                flat[:] = _window(address, nbytes)

        stream.submit(delay_s, read)
        return out


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

    def empty(self, shape: tuple[int, ...], *, dtype: Any, device: Any) -> Any:
        """A new "device" tensor (uninitialised)."""
        tensor = require_torch().empty(shape, dtype=dtype)
        self._device.mark(tensor)
        return tensor

    def launch(self, stream: HostStream, work: Callable[[], None]) -> None:
        """Queue ``work`` (a "kernel") to run on ``stream`` when its turn comes."""
        stream.submit(0.0, work)

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
