"""The oldest Python, torch and OpenCV edgeload runs on, and the message when one is older.

``edgeload/__init__.py`` imports this first, and this file parses on Python 3.6 (no
``from __future__ import annotations``, no f-strings with ``=``), so a JetPack 4.6 board
(Python 3.6.9) gets a sentence naming the floor instead of a SyntaxError from deeper in
the package. torch and OpenCV are checked by ``edgeload._deps`` when first imported.
"""

import re
import sys
from typing import Any, Optional, Sequence, Tuple

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
