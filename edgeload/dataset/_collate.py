"""Collating fixed-size samples straight into a preallocated slot.

When every sample has the same structure (an array or tensor, or a dict / tuple / list
of arrays, tensors and Python numbers) and the same shapes and dtypes, a batch is laid
out in one flat byte buffer: each leaf gets a ``(batch, *shape)`` region, and a worker
copies each sample into its row.  The batch the user gets is ``torch.from_numpy`` views
of the buffer, of the same types, shapes and dtypes ``default_collate`` would give, with
no ``torch.stack`` allocation.  Anything else goes through torch's ``default_collate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._compat import zip_strict
from .._deps import require_torch

# Leaves start on a cache-line boundary.
_ALIGN = 64
_NUMBER_DTYPES: dict[type, np.dtype[Any]] = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
}


@dataclass(frozen=True)
class _Leaf:
    shape: tuple[int, ...]
    dtype: str
    offset: int
    """Byte offset of the leaf's ``(batch, *shape)`` region in the slot."""
    kind: str
    """What the sample held here: ``int``, ``float``, ``bool``, ``ndarray`` or ``tensor``."""


@dataclass(frozen=True)
class SlotMap:
    """Where each leaf of a batch of ``batch_size`` samples lives in one slot.

    ``tree`` mirrors the sample: a :class:`_Leaf`, or a ``("dict", keys, children)``,
    ``("list", children, "list" | "tuple")`` node.  It is plain data, so it pickles to process workers.
    """

    batch_size: int
    tree: Any
    nbytes: int


def _leaf_info(value: Any) -> tuple[tuple[int, ...], np.dtype[Any], str] | None:
    torch = require_torch()
    if type(value) in _NUMBER_DTYPES:
        return (), _NUMBER_DTYPES[type(value)], type(value).__name__
    if type(value) is np.ndarray and value.dtype.kind in "biuf":
        return tuple(value.shape), value.dtype, "ndarray"
    if (
        isinstance(value, torch.Tensor)
        and value.layout == torch.strided
        and not getattr(value, "is_nested", False)  # no sizes: default_collate decides
        and value.device.type == "cpu"
        and not value.requires_grad
        and value.dtype not in (torch.bfloat16, torch.complex64, torch.complex128)
    ):
        dtype = torch.empty((), dtype=value.dtype).numpy().dtype
        return tuple(value.shape), dtype, "tensor"
    return None


def plan_slot_map(sample: Any, batch_size: int) -> SlotMap | None:
    """A slot map for batches of samples shaped like ``sample``, or None if unsuited."""
    offset = 0

    def walk(value: Any) -> Any:
        nonlocal offset
        if type(value) is dict:
            if not all(isinstance(k, str) for k in value):
                raise _Unsuited
            return ("dict", tuple(value), tuple(walk(v) for v in value.values()))
        if type(value) in (tuple, list):
            return ("list", tuple(walk(v) for v in value), type(value).__name__)
        info = _leaf_info(value)
        if info is None:
            raise _Unsuited
        shape, dtype, kind = info
        leaf = _Leaf(shape, dtype.str, offset, kind)
        size = batch_size * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset += -(-size // _ALIGN) * _ALIGN
        return leaf

    try:
        tree = walk(sample)
    except _Unsuited:
        return None
    return SlotMap(batch_size, tree, max(offset, _ALIGN))


class _Unsuited(Exception):
    pass


def _views(slot_map: SlotMap, buf: np.ndarray, rows: int) -> Any:
    return _view_node(slot_map.tree, slot_map.batch_size, buf, rows)


# Module-level recursion, not nested closures: a recursive closure is a reference
# cycle, and one holding a slot view would keep the slot leased until the next GC.
def _view_node(node: Any, batch: int, buf: np.ndarray, rows: int) -> Any:
    if isinstance(node, _Leaf):
        dtype = np.dtype(node.dtype)
        count = batch * int(np.prod(node.shape, dtype=np.int64))
        flat = buf[node.offset : node.offset + count * dtype.itemsize].view(dtype)
        return flat.reshape(batch, *node.shape)[:rows]
    if node[0] == "dict":
        return {k: _view_node(c, batch, buf, rows) for k, c in zip_strict(node[1], node[2])}
    return [_view_node(c, batch, buf, rows) for c in node[1]]


def _put(node: Any, view: Any, value: Any, row: int) -> None:
    if isinstance(node, _Leaf):
        info = _leaf_info(value)
        if info is None or (info[0], info[1].str, info[2]) != (node.shape, node.dtype, node.kind):
            raise _Unsuited
        view[row] = value.numpy() if hasattr(value, "numpy") else value
        return
    if node[0] == "dict":
        if type(value) is not dict or tuple(value) != node[1]:
            raise _Unsuited
        for child, key in zip_strict(node[2], node[1]):
            _put(child, view[key], value[key], row)
        return
    if type(value) not in (tuple, list) or len(value) != len(node[1]):
        raise _Unsuited
    for i, child in enumerate(node[1]):
        _put(child, view[i], value[i], row)


def write_samples(slot_map: SlotMap, buf: np.ndarray, samples: Sequence[Any]) -> bool:
    """Copy ``samples`` into the slot ``buf``; False (nothing usable) if one does not fit."""
    if len(samples) > slot_map.batch_size:
        return False
    views = _views(slot_map, buf, len(samples))
    try:
        for row, sample in enumerate(samples):
            _put(slot_map.tree, views, sample, row)
    except _Unsuited:
        return False
    return True


def batch_views(slot_map: SlotMap, buf: np.ndarray) -> Any:
    """Writable views of every leaf of a full batch in ``buf``, for :func:`put_row`."""
    return _views(slot_map, buf, slot_map.batch_size)


def put_row(slot_map: SlotMap, views: Any, sample: Any, row: int) -> bool:
    """Copy one sample into row ``row``; False (row untouched or partial) if it differs."""
    try:
        _put(slot_map.tree, views, sample, row)
    except _Unsuited:
        return False
    return True


def read_row(slot_map: SlotMap, buf: np.ndarray, row: int) -> Any:
    """Sample ``row`` rebuilt from ``buf``: the same structure, types and values."""
    return _rebuild(require_torch(), slot_map.tree, _views(slot_map, buf, row + 1), row)


def _rebuild(torch: Any, node: Any, view: Any, row: int) -> Any:
    if isinstance(node, _Leaf):
        value = view[row]
        if node.kind == "ndarray":
            return np.array(value)
        if node.kind == "tensor":
            return torch.from_numpy(np.array(value))
        return {"int": int, "float": float, "bool": bool}[node.kind](value)
    if node[0] == "dict":
        return {k: _rebuild(torch, c, view[k], row) for k, c in zip_strict(node[1], node[2])}
    items = [_rebuild(torch, c, view[i], row) for i, c in enumerate(node[1])]
    return tuple(items) if node[2] == "tuple" else items


def read_batch(slot_map: SlotMap, buf: np.ndarray, rows: int) -> Any:
    """The batch in ``buf`` as tensors viewing the slot (no copy)."""
    return _wrap(require_torch(), _views(slot_map, buf, rows))


def _wrap(torch: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _wrap(torch, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wrap(torch, v) for v in value]
    return torch.from_numpy(value)


def default_collate() -> Callable[[Any], Any]:
    """torch's ``default_collate``."""
    return require_torch().utils.data.default_collate  # type: ignore[no-any-return]


def default_convert() -> Callable[[Any], Any]:
    """torch's ``default_convert`` (used without automatic batching)."""
    return require_torch().utils.data.default_convert  # type: ignore[no-any-return]
