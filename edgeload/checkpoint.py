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

from .errors import StateError

__all__ = [
    "KEY_LOADER",
    "KEY_VERSION",
    "check_version",
    "load_state",
    "save_state",
    "write_atomic",
]

# Every resumable object's state_dict() carries its format version under this key.
KEY_VERSION = "version"
# ... and the kind of loader that made it ("DataLoader", "StreamLoader"): both loaders'
# states are version 1, so the version alone cannot tell one from the other.
KEY_LOADER = "loader"


def check_version(state: Any, owner: str, version: int, *, key: str | None = None) -> None:
    """Refuse a state that ``owner.state_dict()`` at this ``version`` did not make.

    A state without a :data:`KEY_LOADER` (saved before it existed) must hold ``key``
    (when given), which every ``owner`` state has.

    Raises:
        StateError: ``state`` is not a dict, is another loader's, or carries another
            version.
    """
    if not isinstance(state, dict):
        raise StateError(
            f"a {owner} state must be a dict, got {type(state).__name__}; pass what "
            f"{owner}.state_dict() returned (or edgeload.load_state(path) gave)"
        )
    kind = state.get(KEY_LOADER, owner if key is None or key in state else None)
    if kind != owner:
        made_by = (
            f"a {kind} state"
            if isinstance(kind, str)
            else (f"no {owner} state (no {key!r} key; keys {sorted(map(str, state))[:8]})")
        )
        raise StateError(
            f"{owner}.load_state_dict() got {made_by}; pass what this kind of loader's "
            "state_dict() returned (each loader saves its own state)"
        )
    if state.get(KEY_VERSION) != version:
        raise StateError(
            f"{owner} state version {state.get(KEY_VERSION)!r} is not {version}: another "
            f"edgeload version saved it; pass what {owner}.state_dict() returned, or start "
            "afresh without load_state_dict()"
        )


def save_state(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``state`` (e.g. ``loader.state_dict()``) to ``path`` as JSON, atomically.

    Args:
        state: JSON-serialisable data.
        path: the file to create or replace; missing directories are created.

    Raises:
        TypeError: ``state`` holds something JSON cannot represent (nothing is written).
        OSError: the directory cannot be created or written.
    """
    target = Path(path)
    try:
        text = json.dumps(state, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"state for {target} is not plain JSON data ({exc}); save only what "
            "state_dict() returns"
        ) from exc
    _make_dirs(target.parent)
    write_atomic(target, text)


def _make_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each entry made durable as the
    file's rename is (a power cut must not lose the folder the state went into)."""
    missing = []
    while not directory.is_dir() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        _fsync_dir(new.parent)


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
        OSError: the file cannot be read (the message names it).
        StateError: the file is not UTF-8 JSON holding an object (names the file);
            also a ValueError.
    """
    target = Path(path)
    fresh = "delete it (or save a new state over it) to start from the beginning"
    try:
        raw = target.read_bytes()
    except IsADirectoryError as exc:
        raise StateError(
            f"{target} is a directory, not a saved state; pass the state file"
        ) from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise StateError(
            f"{target} is not a saved state: byte {exc.start} is not UTF-8 "
            f"({raw[exc.start : exc.start + 8]!r}); {fresh}"
        ) from exc
    except json.JSONDecodeError as exc:
        raise StateError(f"{target} is not a saved state (not JSON: {exc}); {fresh}") from exc
    if not isinstance(data, dict):
        raise StateError(
            f"{target} holds a JSON {type(data).__name__}, not a saved state (an object); {fresh}"
        )
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
