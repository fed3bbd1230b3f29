"""The search behind autotune: coordinate descent from the plan, one knob at a time.

A configuration is a mapping of profile keys (``worker_kind``, ``num_workers``,
``prefetch_bytes``, ``memory_mode``, ``thread_budget``, ``batch_size``,
``decode_backend``) to values.  The search starts at the plan's configuration and moves
one knob at a time: an ordered knob (a count, a byte budget) steps to a neighbouring
value and keeps stepping while the score rises by more than ``min_gain``; a categorical
knob (worker kind, memory mode) tries each other value once.  Passes over the knobs
repeat until one pass moves nothing.  On the smooth, mostly separable objectives of a
loader (more workers help until the cores run out) this visits a few dozen
configurations where the full grid has hundreds.

Scores are "higher is better"; a rejected configuration (over the memory ceiling, or
failed) scores None and is never moved to.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Mapping, Tuple

# typing's generics: subscripting the builtins or collections.abc at run time needs 3.9
Config = Mapping[str, Any]
ConfigKey = Tuple[Tuple[str, Any], ...]


@dataclass(frozen=True)
class Knob:
    """One dimension of the search."""

    name: str
    """The profile key it sets."""
    values: tuple[Any, ...]
    """Every value it may take; ascending for an ordered knob."""
    ordered: bool = True
    """True: try neighbours in order (counts, bytes); False: try every value (kinds)."""


def config_key(config: Config) -> ConfigKey:
    """A hashable, order-independent key for a configuration."""
    return tuple(sorted(config.items()))


class Stop(Exception):
    """Raised by a score function to end the search early (budget spent)."""


def coordinate_search(
    knobs: list[Knob],
    start: Config,
    score: Callable[[Config], float | None],
    *,
    min_gain: float = 0.05,
    identity: Callable[[Config], Hashable] = config_key,
) -> dict[str, Any]:
    """Hill-climb from ``start``, one knob at a time; return the configuration reached.

    ``score`` is called once per distinct configuration (results are cached here), may
    raise :class:`Stop` to end the search, and returns None for a rejected configuration.

    Args:
        knobs: the dimensions; a knob with one value is skipped.
        start: the first configuration (the plan's); its values need not be in the knobs'
            value lists (they are added).
        score: higher is better; None rejects.
        min_gain: a move must raise the score by more than this fraction (measurement noise).
        identity: configurations with equal identity run identically (a loader that caps
            a value, a rule that rounds it): each is scored once, and a step that lands on
            the same identity steps on instead of ending the line.
    """
    cache: dict[Hashable, float | None] = {}

    def evaluate(config: Config) -> float:
        key = identity(config)
        if key not in cache:
            cache[key] = score(config)
        value = cache[key]
        return -1.0 if value is None else value

    def better(new: float, old: float) -> bool:
        if old <= 0:
            return new > 0
        return new > old * (1.0 + min_gain)

    dims = [_with_start(k, start[k.name]) for k in knobs if k.name in start]
    search = _Search([k for k in dims if len(k.values) > 1], evaluate, better, identity)
    current = dict(start)
    best = evaluate(current)
    try:
        moved = True
        while moved:
            moved = False
            for knob in search.dims:
                found, value = search.line(knob, current, best)
                if found is not None:
                    current, best, moved = found, value, True
    except Stop:
        pass
    return current


def _with_start(knob: Knob, value: Any) -> Knob:
    if value in knob.values:
        return knob
    values = (*knob.values, value)
    if knob.ordered:
        values = tuple(sorted(values))
    return Knob(knob.name, values, knob.ordered)


@dataclass
class _Search:
    dims: list[Knob]
    evaluate: Callable[[Config], float]
    better: Callable[[float, float], bool]
    identity: Callable[[Config], Hashable]

    def line(
        self, knob: Knob, current: dict[str, Any], best: float, *, refine: bool = True
    ) -> tuple[dict[str, Any] | None, float]:
        """Move ``knob`` while the score improves; (new config or None, its score)."""
        if not knob.ordered:
            return self._categorical(knob, current, best, refine=refine)
        here = knob.values.index(current[knob.name])
        for step in (1, -1):
            found: dict[str, Any] | None = None
            index = here + step
            while 0 <= index < len(knob.values):
                trial = {**current, knob.name: knob.values[index]}
                index += step
                if self.identity(trial) == self.identity(current):
                    continue  # runs the same as where we are: look one further
                got = self.evaluate(trial)
                if not self.better(got, best):
                    break
                found, best, current = trial, got, trial
            if found is not None:
                return found, best
        return None, best

    def _categorical(
        self, knob: Knob, current: dict[str, Any], best: float, *, refine: bool
    ) -> tuple[dict[str, Any] | None, float]:
        # Another kind often wants other counts (processes pay off with more workers
        # than threads do), so each alternative gets one pass over the ordered knobs
        # before it is compared with where the search stands.
        found: dict[str, Any] | None = None
        for value in knob.values:
            trial = {**current, knob.name: value}
            if self.identity(trial) == self.identity(current):
                continue
            got = self.evaluate(trial)
            if refine:
                for other in self.dims:
                    if other.ordered:
                        moved, value_got = self.line(other, trial, got, refine=False)
                        if moved is not None:
                            trial, got = moved, value_got
            if self.better(got, best):
                found, best = trial, got
        return found, best


def grid_size(knobs: list[Knob]) -> int:
    """How many configurations the full grid over ``knobs`` has."""
    total = 1
    for knob in knobs:
        total *= max(1, len(knob.values))
    return total


def pick_winner(
    candidates: list[tuple[int, float, int]], *, min_gain: float
) -> tuple[int, bool] | None:
    """Choose among ``(index, score, peak_bytes)``: the best score, or within ``min_gain``
    of it the one using the least memory.  Returns ``(index, chosen_for_memory)``."""
    if not candidates:
        return None
    top = max(candidates, key=lambda c: (c[1], -c[2]))
    close = [c for c in candidates if c[1] * (1.0 + min_gain) >= top[1]]
    lean = min(close, key=lambda c: (c[2], -c[1]))
    # A memory saving counts when it is more than noise (2% of the fastest's peak).
    if lean[0] != top[0] and lean[2] < top[2] * 0.98:
        return lean[0], True
    return top[0], False
