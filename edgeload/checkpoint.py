"""Saving and loading resumable state: plain JSON, written atomically.

Edge devices lose power.  A state file is written to a temporary file in the same
directory, flushed and fsync'ed, then renamed over the old one (and the directory is
fsync'ed), so after a power cut the file holds either the old state or the new one,
never half of each.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import ArgumentError

__all__ = ["KEY_VERSION", "check_version", "load_state", "save_state", "write_atomic"]

# Every resumable object's state_dict() carries its format version under this key.
KEY_VERSION = "version"


def check_version(state: Any, owner: str, version: int) -> None:
    """Refuse a state that ``owner.state_dict()`` at this ``version`` did not make.

    Raises:
        ArgumentError: ``state`` is not a dict, or carries another version.
    """
    if isinstance(state, dict) and state.get(KEY_VERSION) == version:
        return
    got = state.get(KEY_VERSION) if isinstance(state, dict) else type(state).__name__
    raise ArgumentError(
        f"{owner} state version {got!r} is not {version}: it is not a {owner} state, or "
        f"another edgeload version saved it; pass what {owner}.state_dict() returned"
    )


def save_state(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``state`` (e.g. ``loader.state_dict()``) to ``path`` as JSON, atomically.

    Args:
        state: JSON-serialisable data.
        path: the file to create or replace; its directory must exist.

    Raises:
        TypeError: ``state`` holds something JSON cannot represent (nothing is written).
        OSError: the directory is missing or not writable.
    """
    target = Path(path)
    try:
        text = json.dumps(state, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"state for {target} is not plain JSON data ({exc}); save only what "
            "state_dict() returns"
        ) from exc
    write_atomic(target, text)


def write_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` so a reader, even after a power cut, sees the old
    file or the whole new one: temp file in the same directory, fsync, rename, then
    fsync of the directory.

    Args:
        path: the file to create or replace; its directory must exist.
        text: the new content (UTF-8).
        mode: permission bits for the new file (default: the temp file's 0o600).

    Raises:
        OSError: the directory is missing or not writable (the temp file is removed).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a state written by :func:`save_state`.

    Args:
        path: the state file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a JSON object (names the file).
    """
    target = Path(path)
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{target} is not a saved state ({exc}); delete it to start from the beginning"
        ) from exc
    if not isinstance(data, dict):
        raise ValueError(f"{target} holds {type(data).__name__}, expected a JSON object")
    return data


def _fsync_dir(directory: Path) -> None:
    # The rename itself is durable only once the directory entry is on disk.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
