"""Model-ready batches: the uint8 slot converted to float, scaled to [0, 1] and
normalised, in one pass into an output made for it.

On the CPU the output is one of a few kept arrays per batch shape (:class:`Outputs`):
an array goes back to them when the last tensor made from it is gone (the slot pool's
rule), so a batch the consumer still holds is never overwritten, and the uint8 slot is
free again as soon as the conversion has read it.  With a device the uint8 slot is
copied there and converted by kernels queued on the copier's stream, after the copy;
the slot stays leased (fenced on that stream) until they have read it, and the output
comes from torch's caching allocator, which reuses a block only once every stream that
used it is past it.

``mean`` and ``std`` are torchvision's ``Normalize`` in [0, 1] units, so the whole
conversion is ``x * (1 / (255 std)) - mean / std``: one copy to float and one
multiply-add, in place.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._deps import require_torch
from ..errors import ArgumentError
from ._resize import Layout

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine

KEPT_OUTPUTS = 3
"""CPU outputs kept per batch shape: the batch the consumer holds, the one being made,
and one more it may keep; a consumer holding more gets fresh ones."""

DTYPE_NAMES = ("uint8", "float16", "float32")


def dtype_name(dtype: Any) -> str:
    """``dtype``'s short name (``torch.float32`` -> ``float32``)."""
    return str(dtype).replace("torch.", "")


def check_output(
    dtype: Any,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    *,
    memory_mode: str,
    device: Any,
) -> tuple[str, tuple[float, ...] | None, tuple[float, ...] | None]:
    """The checked ``(dtype name, mean, std)`` of a loader's output.

    Raises:
        ArgumentError: a dtype other than torch's uint8, float16 or float32; mean or
            std with uint8, of a length other than 3, or a std of 0; a float dtype with
            a ``mapped``/``managed`` slot and no device (the float batch would not be
            in that memory).
    """
    torch = require_torch()
    allowed = (torch.uint8, torch.float16, torch.float32)
    if not any(dtype is d for d in allowed):
        raise ArgumentError(
            f"StreamLoader: dtype must be one of torch.uint8, torch.float16, torch.float32, "
            f"got {dtype!r}"
        )
    name = dtype_name(dtype)
    checked: list[tuple[float, ...] | None] = []
    for label, values in (("mean", mean), ("std", std)):
        if values is None:
            checked.append(None)
            continue
        if name == "uint8":
            raise ArgumentError(
                f"StreamLoader: {label}={values!r} needs a float dtype (values in [0, 1]); "
                "pass dtype=torch.float32 or torch.float16"
            )
        try:
            floats = tuple(float(v) for v in values)
        except (TypeError, ValueError):
            floats = ()
        if len(floats) != 3:
            raise ArgumentError(
                f"StreamLoader: {label} must be 3 numbers, one per channel in the output's "
                f"colour order, in [0, 1] units (torchvision's Normalize), got {values!r}"
            )
        if label == "std" and any(v == 0 for v in floats):
            raise ArgumentError(f"StreamLoader: std must have no zero (it divides), got {values!r}")
        checked.append(floats)
    if name != "uint8" and device is None and memory_mode in ("mapped", "managed"):
        raise ArgumentError(
            f"StreamLoader: dtype={dtype!r} with memory_mode={memory_mode!r} and no device: "
            "the GPU would see the uint8 slot in place, but the float batch is made on the "
            "CPU in ordinary memory. Pass device='cuda' (the float batch is then made on "
            "the GPU from the slot, read in place), or memory_mode='host'"
        )
    return name, checked[0], checked[1]


class Outputs:
    """Kept CPU output arrays of one shape and dtype, each reused once no tensor made
    from it is left.

    Args:
        shape: one batch's array shape. dtype: its numpy dtype.
    """

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape, self.dtype = shape, np.dtype(dtype)
        # Appends and pops of a deque are atomic: a release from a finalizer (any
        # thread, even inside ``take``) needs no lock.  Beyond its length an array
        # given back is dropped.
        self._free: collections.deque[np.ndarray] = collections.deque(maxlen=KEPT_OUTPUTS)
        self.made = 0

    @property
    def nbytes(self) -> int:
        """Bytes of one output."""
        return int(np.prod(self.shape)) * int(self.dtype.itemsize)

    def take(self) -> Any:
        """A free output as a torch tensor; its array comes back here when it is gone."""
        try:
            array = self._free.pop()
        except IndexError:
            array = np.empty(self.shape, self.dtype)
            self.made += 1
        view = array.view()  # the tensor holds this view; when it goes, so does the lease
        weakref.finalize(view, self._free.append, array)
        return require_torch().from_numpy(view)


class Converter:
    """Turns a batch's uint8 frames into the loader's float dtype, scaled and normalised.

    Args:
        dtype: a float torch dtype. mean, std: per channel (None: 0 and 1).
        layout: the frames' layout (where the channel axis is).
    """

    def __init__(
        self,
        *,
        dtype: Any,
        mean: tuple[float, ...] | None,
        std: tuple[float, ...] | None,
        layout: Layout,
    ) -> None:
        torch = require_torch()
        self.dtype = dtype
        self.name = dtype_name(dtype)
        self.layout = layout
        std_ = np.array(std if std is not None else (1.0, 1.0, 1.0), np.float64)
        mean_ = np.array(mean if mean is not None else (0.0, 0.0, 0.0), np.float64)
        scale, offset = 1.0 / (255.0 * std_), -mean_ / std_
        self._uniform = bool(np.all(scale == scale[0]) and np.all(offset == offset[0]))
        shape = (3, 1, 1) if layout == "NCHW" else (3,)
        self._scale = torch.tensor(scale, dtype=dtype).reshape(shape)
        self._offset = torch.tensor(offset, dtype=dtype).reshape(shape)
        self._scalars = (float(scale[0]), float(offset[0]))
        self._outputs: dict[tuple[int, ...], Outputs] = {}
        self._itemsize = 2 if dtype is torch.float16 else 4
        self.batch_bytes = 0  # of the latest batch converted
        self._on_device: dict[str, tuple[Any, Any]] = {}

    def outputs(self, shape: tuple[int, ...]) -> Outputs:
        """The kept CPU outputs of batches of ``shape``."""
        outputs = self._outputs.get(shape)
        if outputs is None:
            torch = require_torch()
            np_dtype = np.float16 if self.dtype is torch.float16 else np.float32
            outputs = self._outputs[shape] = Outputs(shape, np_dtype)
        return outputs

    def stats(self) -> dict[str, Any]:
        """What the outputs cost: the dtype, bytes of one batch, outputs made so far."""
        made = list(self._outputs.values())
        return {
            "output_dtype": self.name,
            "output_batch_bytes": self.batch_bytes,
            "outputs_made": sum(o.made for o in made),
        }

    def _apply(self, out: Any, frames: Any, scale: Any, offset: Any) -> None:
        out.copy_(frames)
        if self._uniform:
            out.mul_(self._scalars[0])
            if self._scalars[1]:
                out.add_(self._scalars[1])
        else:
            out.mul_(scale).add_(offset)

    def on_cpu(self, frames: Any) -> Any:
        """``frames`` (a uint8 CPU tensor) converted into a kept output."""
        self.batch_bytes = int(frames.numel()) * self._itemsize
        out = self.outputs(tuple(frames.shape)).take()
        self._apply(out, frames, self._scale, self._offset)
        return out

    def on_device(self, frames: Any, *, engine: Engine, stream: Any, device: Any) -> Any:
        """``frames`` (a uint8 device tensor, or a view of mapped memory) converted on
        ``stream`` after what is queued there; the output tensor, filled when it runs."""
        self.batch_bytes = int(frames.numel()) * self._itemsize
        key = str(device)
        constants = self._on_device.get(key)
        if constants is None:
            scale = engine.empty(tuple(self._scale.shape), dtype=self.dtype, device=device)
            offset = engine.empty(tuple(self._offset.shape), dtype=self.dtype, device=device)
            scale.copy_(self._scale)
            offset.copy_(self._offset)
            constants = self._on_device[key] = (scale, offset)
        with engine.use_stream(stream):
            out = engine.empty(tuple(frames.shape), dtype=self.dtype, device=device)
        scale, offset = constants

        def work() -> None:
            self._apply(out, frames, scale, offset)

        engine.launch(stream, work)
        return out
