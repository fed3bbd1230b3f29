"""Python and torch features newer than the oldest supported board, written once.

JetPack 5 ships Python 3.8 and JetPack 6 ships 3.10, so edgeload cannot use what 3.9 and
3.10 added (``zip(strict=)``, one-argument ``traceback.format_exception``,
``Path.is_relative_to``, ``importlib.resources.files``). JetPack 5.0's torch is 1.11 or
1.12, which lack ``Tensor.nbytes`` (torch 1.13). Each helper here behaves like the
newer call on every version. ``scripts/check_py38.py`` keeps the newer Python calls out of
the package; ``scripts/test-jetpack5.sh`` runs the suite on Python 3.8 with torch 1.11
and 1.12.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path, PurePath
from typing import Any

__all__ = ["format_exception", "is_relative_to", "package_dir", "tensor_nbytes", "zip_strict"]

_MISSING = object()


def zip_strict(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``zip(*iterables, strict=True)``: raise ValueError when the lengths differ."""
    iterators = [iter(it) for it in iterables]
    if not iterators:
        return
    while True:
        items = [next(it, _MISSING) for it in iterators]
        ended = [item is _MISSING for item in items]
        if all(ended):
            return
        if any(ended):
            first = ended.index(True) + 1
            raise ValueError(f"zip_strict: argument {first} is shorter than the others")
        yield tuple(items)


def format_exception(exc: BaseException) -> list[str]:
    """``traceback.format_exception(exc)`` (the one-argument form arrived in Python 3.10)."""
    return traceback.format_exception(type(exc), exc, exc.__traceback__)


def is_relative_to(path: PurePath, other: str | PurePath) -> bool:
    """``path.is_relative_to(other)`` (Python 3.9)."""
    try:
        path.relative_to(other)
    except ValueError:
        return False
    return True


def package_dir(package: str) -> Any:
    """The data root of ``package``: ``importlib.resources.files`` where it exists (3.9+).

    On 3.8 it is the package's own directory, which holds the same files because edgeload's
    wheel ships its data unzipped inside the package. Either result has ``joinpath``,
    ``is_dir`` and ``iterdir``.
    """
    files = getattr(resources, "files", None)
    if files is not None:
        return files(package)
    module = importlib.import_module(package)
    return Path(module.__file__ or ".").resolve().parent


def tensor_nbytes(tensor: Any) -> int:
    """``tensor.nbytes`` for a torch tensor (the attribute arrived in torch 1.13)."""
    return int(tensor.element_size()) * int(tensor.numel())
