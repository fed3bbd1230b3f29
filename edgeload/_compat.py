"""The floor: the oldest Python, torch and OpenCV edgeload runs on, the message when one
is older, and stand-ins for what newer Python and torch added.

``edgeload/__init__.py`` imports this first, and this file parses and imports on Python
3.6 (no ``from __future__ import annotations``, no ``X | Y`` or ``list[int]`` in
annotations, no f-strings with ``=``, only stdlib modules 3.6 has at module level), so a
JetPack 4.6 board (Python 3.6.9) gets a sentence naming the floor instead of a
SyntaxError from deeper in the package: :func:`check_python` runs on import, before the
stand-ins are defined. torch and OpenCV are checked by ``edgeload._deps`` when first
imported.

JetPack 5 ships Python 3.8 and JetPack 6 ships 3.10, so edgeload cannot use what 3.9 and
3.10 added (``zip(strict=)``, one-argument ``traceback.format_exception``,
``Path.is_relative_to``, ``importlib.resources.files``). JetPack 5.0's torch is 1.11 or
1.12, which lack ``Tensor.nbytes`` (torch 1.13). Each helper here behaves like the
newer call on every version. ``scripts/check_py38.py`` keeps the newer Python calls out of
the package; ``nox -s jetpack5`` runs the suite on Python 3.8 with torch 1.11
and 1.12.
"""

import importlib
import re
import sys
import traceback
from pathlib import Path, PurePath
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

__all__ = [
    "OPENCV_FLOOR",
    "PYTHON_FLOOR",
    "TORCH_FLOOR",
    "check_python",
    "dependency_problem",
    "format_exception",
    "is_relative_to",
    "package_dir",
    "python_problem",
    "tensor_nbytes",
    "version_tuple",
    "zip_strict",
]

PYTHON_FLOOR = (3, 8)
TORCH_FLOOR = (1, 11)
OPENCV_FLOOR = (4, 5, 1)

_DOCS = "docs/platforms.md in edgeload's source"

_WHAT_TO_INSTALL = {
    "torch": (
        "on JetPack 5 or 6 install NVIDIA's torch wheel for your JetPack (1.11 or newer); "
        "elsewhere `pip install 'torch>=1.11'`"
    ),
    "cv2": (
        "on a Jetson use JetPack 5's or 6's OpenCV (4.5.4 / 4.8); on Debian or Raspberry Pi OS "
        "`apt install python3-opencv` (bullseye has 4.5.1); elsewhere "
        "`pip install 'opencv-python-headless>=4.5.1'`"
    ),
}


def version_tuple(text: str) -> Tuple[int, ...]:
    """``"2.1.2+cpu"`` -> (2, 1, 2); ``"1.10.0a0+git36449ea"`` -> (1, 10, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def python_problem(version_info: Sequence[Any]) -> Optional[str]:
    """The message for a Python older than the floor, or None."""
    if tuple(version_info[:2]) >= PYTHON_FLOOR:
        return None
    found = ".".join(str(part) for part in version_info[:3])
    need = ".".join(str(part) for part in PYTHON_FLOOR)
    return (
        f"edgeload needs Python {need} or newer; this is Python {found}. JetPack 4.6 and "
        "older (Python 3.6) are not supported: run edgeload in a Python 3.8+ environment "
        "on the board (a container or a Python 3.8 build), or move the board to JetPack 5 "
        f"or 6 where it has one (see {_DOCS})."
    )


def dependency_problem(name: str, version: str) -> Optional[str]:
    """The message for a torch or cv2 older than the floor, or None."""
    floor = TORCH_FLOOR if name == "torch" else OPENCV_FLOOR
    if version_tuple(version) >= floor:
        return None
    label = "PyTorch" if name == "torch" else "OpenCV"
    need = ".".join(str(part) for part in floor)
    return f"{label} {version} is older than edgeload's floor {need}: {_WHAT_TO_INSTALL[name]}"


def check_python(version_info: Optional[Sequence[Any]] = None) -> None:
    """Raise ImportError when this Python (or ``version_info``) is older than the floor."""
    problem = python_problem(sys.version_info if version_info is None else version_info)
    if problem is not None:
        raise ImportError(problem)


check_python()


# Stand-ins for what Python 3.9/3.10 and torch 1.13 added.

_MISSING = object()


def zip_strict(*iterables: Iterable[Any]) -> Iterator[Tuple[Any, ...]]:
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


def format_exception(exc: BaseException) -> List[str]:
    """``traceback.format_exception(exc)`` (the one-argument form arrived in Python 3.10)."""
    return traceback.format_exception(type(exc), exc, exc.__traceback__)


def is_relative_to(path: PurePath, other: Union[str, PurePath]) -> bool:
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
    # Imported here: importlib.resources arrived in 3.7, and this module must load on 3.6
    # to say that edgeload needs 3.8.
    from importlib import resources

    files = getattr(resources, "files", None)
    if files is not None:
        return files(package)
    module = importlib.import_module(package)
    return Path(module.__file__ or ".").resolve().parent


def tensor_nbytes(tensor: Any) -> int:
    """``tensor.nbytes`` for a torch tensor (the attribute arrived in torch 1.13)."""
    return int(tensor.element_size()) * int(tensor.numel())
