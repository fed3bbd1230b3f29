"""Writing a tuned profile: a small TOML writer, the device stamp, an atomic write.

There is no TOML writer in the standard library and the tables are flat, so strings,
integers, floats and booleans are written here; the tests read the result back with
``tomllib``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._compat import is_relative_to
from .._version import __version__
from ..checkpoint import write_atomic
from ..errors import ProfileError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_value(value: Any) -> str:
    """One TOML value: a basic string, integer, float or boolean.

    Raises:
        ProfileError: a value TOML cannot hold in a flat table (None, NaN, a list...).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProfileError(f"cannot write {value!r} to a profile: not a finite number")
        return repr(value)
    if isinstance(value, str):
        out = []
        for ch in value:
            if ch in ('"', "\\"):
                out.append("\\" + ch)
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04X}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    raise ProfileError(f"cannot write {value!r} ({type(value).__name__}) to a profile")


def toml_key(key: str) -> str:
    """A bare key where TOML allows one, else a quoted key."""
    # fullmatch: "$" would also match before a trailing newline, writing "0\n" bare
    return key if _BARE_KEY.fullmatch(key) else toml_value(key)


def render_toml(tables: Mapping[str, Mapping[str, Any]], *, comment: str = "") -> str:
    """Flat ``[table]`` sections of scalar values as TOML text."""
    lines = [f"# {line}" for line in comment.splitlines()]
    for name, table in tables.items():
        if lines:
            lines.append("")
        lines.append(f"[{toml_key(name)}]")
        lines.extend(f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


def device_stamp(platform: Any) -> dict[str, str]:
    """The ``[tuned]`` table: device model, L4T release, power mode, version and date."""
    stamp = {"model": str(getattr(platform, "model", "") or "")}
    l4t = getattr(platform, "l4t_release", None)
    if l4t:
        stamp["l4t_release"] = str(l4t)
    mode = getattr(platform, "power_mode", None)
    if mode:
        stamp["power_mode"] = mode
    stamp["version"] = __version__
    stamp["date"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return stamp


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the whole new one.

    Raises:
        ProfileError: the directory cannot be made or written (naming it and what to do).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(
            f"cannot write the tuned profile to {path}: {exc}; {_hint(path)}"
        ) from exc
    try:
        write_atomic(path, text, mode=0o644)
    except OSError as exc:
        raise ProfileError(
            f"cannot write the tuned profile to {path}: {exc}; {_hint(path)}"
        ) from exc


def _hint(path: Path) -> str:
    return "run as root (sudo)" if is_relative_to(path, "/etc") else "choose --output PATH"
