"""Checks for the arguments of public constructors and functions.

One rule for every public argument: its type and range are checked where it is given
(the constructor, not a thread that runs later), and a bad one raises
:class:`~edgeload.errors.ArgumentError` naming the argument, the bad value and what is
allowed.  Settings typed as ``Literal`` are accepted in any case (``"nchw"``, ``"RGB"``)
and normalised once, to the spelling the code compares against.  Bools are not ints
here (``batch=True`` is a mistake, not 1), and NaN and infinity are not numbers a
timeout or a rate can be.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from .errors import ArgumentError, redact

__all__ = ["choice", "flag", "integer", "number", "pair_of_ints"]


def _fail(
    owner: str, name: str, value: object, allowed: str, hint: str = "", *, kind: bool = False
) -> ArgumentError:
    where = f"{owner}: " if owner else ""
    shown = redact(repr(value)) + (f" ({type(value).__name__})" if kind else "")
    tail = f"; {hint}" if hint else ""
    return ArgumentError(f"{where}{name} must be {allowed}, got {shown}{tail}")


def choice(
    owner: str,
    name: str,
    value: Any,
    allowed: Sequence[str],
    *,
    none_ok: bool = False,
    allowed_text: str = "",
) -> Any:
    """``value`` as its spelling in ``allowed``, matched case-insensitively.

    Args:
        allowed_text: how the message lists ``allowed`` (default ``one of (...)``).

    Raises:
        ArgumentError: not a string, or none of ``allowed`` (None too, unless ``none_ok``).
    """
    if value is None and none_ok:
        return None
    if isinstance(value, str):
        for option in allowed:
            if option.lower() == value.lower():
                return option
    listed = allowed_text or f"one of {tuple(allowed)}" + (" or None" if none_ok else "")
    raise _fail(owner, name, value, listed, "any case is accepted")


def integer(
    owner: str,
    name: str,
    value: Any,
    *,
    low: int | None = None,
    high: int | None = None,
    none_ok: bool = False,
) -> Any:
    """``value`` as an int in ``low..high``; numpy integers pass, bools and floats do not.

    Raises:
        ArgumentError: not an int, or out of range.
    """
    if value is None and none_ok:
        return None
    limits = _range_text(low, high, none_ok=none_ok)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise _fail(owner, name, value, f"an int {limits}".rstrip(), kind=True)
    out = int(value)
    if (low is not None and out < low) or (high is not None and out > high):
        raise _fail(owner, name, value, limits)
    return out


def number(
    owner: str,
    name: str,
    value: Any,
    *,
    low: float | None = None,
    above: float | None = None,
    high: float | None = None,
    none_ok: bool = False,
) -> Any:
    """``value`` as a finite float, ``>= low``, ``> above`` and ``<= high`` where given.

    Raises:
        ArgumentError: not a real number (bools and strings are not), NaN, infinite, or
            out of range.
    """
    if value is None and none_ok:
        return None
    parts = []
    if above is not None:
        parts.append(f"> {above:g}")
    if low is not None:
        parts.append(f">= {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    limits = " and ".join(parts) + (" or None" if none_ok else "")
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise _fail(owner, name, value, f"a number {limits}".rstrip(), kind=True)
    out = float(value)
    if not math.isfinite(out):
        raise _fail(owner, name, value, f"a finite number {limits}".rstrip())
    if (
        (low is not None and out < low)
        or (above is not None and out <= above)
        or (high is not None and out > high)
    ):
        raise _fail(owner, name, value, limits)
    return out


def flag(owner: str, name: str, value: Any) -> bool:
    """``value`` when it is a bool (numpy's too).

    Raises:
        ArgumentError: anything else (a string ``"false"`` would read as true).
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise _fail(owner, name, value, "True or False")


def pair_of_ints(owner: str, name: str, value: Any, *, what: str, low: int = 1) -> tuple[int, int]:
    """``value`` as a pair of ints ``>= low`` (``what`` names the two, e.g. "(width, height)").

    Raises:
        ArgumentError: not a two-item tuple or list of ints, or an item below ``low``.
    """
    allowed = f"a pair {what} of ints >= {low}"
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise _fail(owner, name, value, allowed, _pair_hint(name, value))
    for item in value:
        if not isinstance(item, numbers.Integral) or isinstance(item, bool) or item < low:
            raise _fail(owner, name, value, allowed)
    return int(value[0]), int(value[1])


def _pair_hint(name: str, value: Any) -> str:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return f"pass {name}=({value}, {value}) for a square"
    return ""


def _range_text(low: int | None, high: int | None, *, none_ok: bool) -> str:
    if low is not None and high is not None:
        text = f"from {low} to {high}"
    elif low is not None:
        text = f">= {low}"
    elif high is not None:
        text = f"<= {high}"
    else:
        text = ""
    return text + (" or None" if none_ok else "")
