"""Profiles: declarative per-board defaults, merged by precedence.

Precedence, lowest first: built-in defaults < the matching ``platforms/*.toml`` file
< the deploy-time tuned profile (``EDGELOAD_PROFILE``, else the user config dir, else
the system config dir) < keyword arguments.  A profile says what to prefer; the plan
(:mod:`edgeload.platform.plan`) turns it into numbers for one loader.

A profile file's ``[profile]`` table applies to every loader; ``[dataset]`` and
``[video]`` apply on top of it only to that kind of loader (autotune writes the numbers
it measured on one kind of workload there, since a dataset's best prefetch says nothing
about a camera's).  A tuned profile is used only on the device it names: a ``[match]``
table (a platform file given as ``EDGELOAD_PROFILE``) or a ``[tuned]`` stamp for
another device has it ignored, with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from .._compat import package_dir
from ..errors import ArgumentError, ProfileError
from ..vocabulary import (
    AUTO,
    DECODE_BACKENDS,
    MEMORY_MODES,
    WORKER_KINDS,
    DecodeBackendSetting,
    MemoryModeSetting,
    WorkerKindSetting,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # JetPack 6 ships Python 3.10
    import tomli as tomllib

log = logging.getLogger(__name__)

# Worker-count rules a profile may name instead of a number.
WORKER_RULES = ("cores", "cores-1", "half-cores")
PROFILE_ENV = "EDGELOAD_PROFILE"
TUNED_FILENAME = "profile.toml"
_MATCH_KEYS = ("family", "soc", "model_contains")
WORKLOAD_KINDS = ("dataset", "video")
"""Tables of a profile file that apply to one kind of loader only."""
_TABLES = ("match", "profile", "tuned", "description", *WORKLOAD_KINDS)
WorkloadKind = Literal["dataset", "video"]


@dataclass(frozen=True)
class Profile:
    """What to prefer on a device; every field has a safe built-in default."""

    worker_kind: WorkerKindSetting = "auto"
    """``thread``, ``process`` or ``auto`` (the plan decides from the workload)."""
    num_workers: int | str = "cores"
    """A count, or a rule: ``cores``, ``cores-1``, ``half-cores`` (of the usable cores)."""
    prefetch_fraction: float = 0.10
    """Prefetch budget as a fraction of available memory, in (0, 1]."""
    prefetch_min_bytes: int = 16 << 20
    """Floor of the prefetch budget, bytes."""
    prefetch_max_bytes: int = 512 << 20
    """Cap of the prefetch budget, bytes."""
    memory_mode: MemoryModeSetting = "auto"
    """Slot memory: ``host``, ``pinned``, ``mapped``, ``managed`` or ``auto``."""
    decode_backend: DecodeBackendSetting = "auto"
    """Video decode through ``gstreamer`` (hardware where it exists) or ``ffmpeg``."""
    thread_budget: int | str = "auto"
    """Total threads for decode, transforms and torch; ``auto`` = the usable cores."""
    batch_size: int | None = None
    """A tuned batch size, when autotune was asked to tune it."""
    source: str = "built-in"
    """Where the values came from, lowest precedence first, joined by `` < ``."""
    stamp: Mapping[str, str] = field(default_factory=dict)
    """For a tuned profile: device model, L4T release, power mode, version, date."""

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (JSON/TOML-friendly)."""
        out = dataclasses.asdict(self)
        out["stamp"] = dict(self.stamp)
        return out

    def settings(self) -> dict[str, Any]:
        """Only the tunable values, as a profile file's ``[profile]`` table holds them."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name in _SETTING_NAMES and getattr(self, f.name) is not None
        }


_SETTING_NAMES = frozenset(
    f.name for f in dataclasses.fields(Profile) if f.name not in ("source", "stamp")
)


def validate_settings(values: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Check profile values; return them unchanged if good.

    Args:
        values: key -> value, as read from a file or passed by a caller.
        where: what to name in an error (a file path, or ``"arguments"``).

    Raises:
        ProfileError: an unknown key or a value out of range, naming ``where``, the key,
            the bad value and what is allowed.
    """
    for key, value in values.items():
        if key not in _SETTING_NAMES:
            known = ", ".join(sorted(_SETTING_NAMES))
            raise ProfileError(f"{where}: unknown key {key!r}; known keys: {known}")
        problem = _check(key, value)
        if problem:
            raise ProfileError(
                f"{where}: {key} {problem}, got {value!r}; fix the value or pass {key}= to override it"
            )
    lo, hi = values.get("prefetch_min_bytes"), values.get("prefetch_max_bytes")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        raise ProfileError(
            f"{where}: prefetch_min_bytes ({lo}) is above prefetch_max_bytes ({hi}); swap or fix them"
        )
    return dict(values)


def check_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The profile keys a caller passed (None dropped), the named settings in lower case.

    Raises:
        ArgumentError: an unknown key or a bad value (they are arguments, not a file:
            a ValueError, named ``arguments: key``, with what is allowed).
    """
    given = {
        k: v.lower() if isinstance(v, str) else v for k, v in overrides.items() if v is not None
    }
    try:
        return validate_settings(given, where="arguments")
    except ProfileError as exc:
        raise ArgumentError(str(exc)) from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(key: str, value: Any) -> str | None:
    """Why ``value`` is bad for ``key``, or None if it is good."""
    choices = {
        "worker_kind": (AUTO, *WORKER_KINDS),
        "memory_mode": (AUTO, *MEMORY_MODES),
        "decode_backend": (AUTO, *DECODE_BACKENDS),
    }
    if key in choices:
        return None if value in choices[key] else f"must be one of {', '.join(choices[key])}"
    if key == "num_workers":
        ok = (_is_int(value) and 1 <= value <= 256) or value in WORKER_RULES
        return None if ok else f"must be 1..256 or one of {', '.join(WORKER_RULES)}"
    if key == "thread_budget":
        ok = (_is_int(value) and 1 <= value <= 1024) or value == "auto"
        return None if ok else "must be 1..1024 or 'auto'"
    if key == "prefetch_fraction":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
        return None if ok else "must be between 0 and 1"
    if key in ("prefetch_min_bytes", "prefetch_max_bytes"):
        return None if _is_int(value) and value >= 0 else "must be a whole number of bytes >= 0"
    if key == "batch_size":
        return None if value is None or (_is_int(value) and value >= 1) else "must be >= 1"
    return None


class ProfileFile(NamedTuple):
    """The tables of one profile file, checked."""

    match: dict[str, Any]
    """``[match]``: which devices the file is for (empty: any)."""
    settings: dict[str, Any]
    """``[profile]``: for every loader."""
    tuned: dict[str, str]
    """``[tuned]``: the stamp autotune writes (device model, L4T release...)."""
    workloads: dict[str, dict[str, Any]]
    """``[dataset]`` / ``[video]``: for that kind of loader only, over ``settings``."""


def read_profile_file(path: Path) -> ProfileFile:
    """Read one profile file: its ``[match]``, ``[profile]``, ``[tuned]`` and per-workload
    tables, each checked.

    Raises:
        ProfileError: the file is not valid TOML, a table is not a table, or it holds a
            bad key or value (the message names the file, the table or key, the value).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read profile ({exc}); fix or remove the file") from exc
    unknown = set(data) - set(_TABLES)
    if unknown:
        raise ProfileError(
            f"{path}: unknown table(s) {sorted(unknown)}; allowed: {', '.join(_TABLES)}"
        )
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ProfileError(
            f"{path}: description must be a string, got {description!r}; quote it or remove it"
        )
    tables = {name: _table(path, data, name) for name in _TABLES if name != "description"}
    match = tables["match"]
    bad = set(match) - set(_MATCH_KEYS)
    if bad:
        raise ProfileError(f"{path}: unknown match key(s) {sorted(bad)}; allowed: {_MATCH_KEYS}")
    for key, want in match.items():
        wants = want if isinstance(want, list) else [want]
        if not wants or not all(isinstance(w, str) for w in wants):
            raise ProfileError(
                f"{path}: [match] {key} must be a string or a list of strings, got {want!r}; "
                'write it as key = "value" or key = ["a", "b"]'
            )
    settings = validate_settings(tables["profile"], where=f"{path} [profile]")
    for key, value in tables["tuned"].items():
        if isinstance(value, (dict, list)):
            raise ProfileError(
                f"{path}: [tuned] {key} must be a single value, got {value!r}; re-run "
                "`edgeload autotune` to write a new profile"
            )
    tuned = {str(k): str(v) for k, v in tables["tuned"].items()}
    workloads = {
        kind: validate_settings(tables[kind], where=f"{path} [{kind}]")
        for kind in WORKLOAD_KINDS
        if tables[kind]
    }
    return ProfileFile(match, settings, tuned, workloads)


def _table(path: Path, data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``data[name]`` as a dict (empty when absent).

    Raises:
        ProfileError: it is a string, a list or a number instead of a table.
    """
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ProfileError(
            f"{path}: {name} must be a table ([{name}] followed by key = value lines), got "
            f"{value!r} ({type(value).__name__}); fix the file or remove it"
        )
    return dict(value)


def platform_files() -> Iterator[tuple[str, Path]]:
    """The shipped ``platforms/*.toml`` files as (display name, path), sorted by name."""
    root = package_dir("edgeload").joinpath("platforms")
    if not root.is_dir():  # a source checkout: platforms/ sits beside the package
        root = Path(__file__).resolve().parents[2] / "platforms"
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            yield f"platforms/{entry.name}", Path(str(entry))


def _match_score(match: Mapping[str, Any], platform: Any) -> int:
    """How specifically ``match`` fits ``platform`` (0: it does not)."""
    if not match:
        return 0
    score = 0
    for key, want in match.items():
        wants = [str(w).lower() for w in (want if isinstance(want, list) else [want])]
        if key == "model_contains":
            have = str(getattr(platform, "model", "") or "").lower()
            if not any(w in have for w in wants):
                return 0
        else:
            have = str(getattr(platform, key, "") or "").lower()
            if have not in wants:
                return 0
        score += 1
    return score


def tuned_profile_path() -> Path | None:
    """Where the tuned profile is found: ``EDGELOAD_PROFILE``, else user, else system dir."""
    env = os.environ.get(PROFILE_ENV)
    if env:
        return Path(env)
    for candidate in (user_config_dir() / TUNED_FILENAME, system_config_dir() / TUNED_FILENAME):
        if candidate.is_file():
            return candidate
    return None


def user_config_dir() -> Path:
    """``$XDG_CONFIG_HOME/edgeload`` (default ``~/.config/edgeload``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edgeload"


def system_config_dir() -> Path:
    """``/etc/edgeload``: a tuned profile for every user of the device."""
    return Path("/etc/edgeload")


def _stamp_mismatch(stamp: Mapping[str, str], platform: Any) -> str | None:
    for key in ("model", "l4t_release"):
        have = getattr(platform, key, None)
        if key in stamp and stamp[key] and have and stamp[key] != str(have):
            return f"it was tuned for {key} {stamp[key]!r}, this device has {have!r}"
    return None


def _match_mismatch(match: Mapping[str, Any], platform: Any) -> str | None:
    if not match or _match_score(match, platform):
        return None
    wanted = ", ".join(f"{k} {v!r}" for k, v in match.items())
    have = ", ".join(f"{k} {getattr(platform, k, None)!r}" for k in ("family", "soc", "model"))
    return f"its [match] is for {wanted}, this device has {have}"


def load_profile(
    platform: Any,
    *,
    tuned: Path | Literal["auto"] | None = "auto",
    workload: WorkloadKind | None = None,
    **overrides: Any,
) -> Profile:
    """Merge the profile for ``platform`` by precedence.

    Args:
        platform: a :class:`edgeload.platform.probe.Platform` (or anything with ``family``,
            ``soc`` and ``model`` attributes).
        tuned: the tuned profile file; ``"auto"`` looks it up (:func:`tuned_profile_path`),
            ``None`` skips it.  One whose ``[match]`` or ``[tuned]`` stamp names another
            device is ignored with a warning.
        workload: the kind of loader asking, ``"dataset"`` or ``"video"``: a file's table
            of that name applies on top of its ``[profile]`` (None: ``[profile]`` only).
        **overrides: profile keys given by the caller; they win over every file (the
            named settings in any case).

    Raises:
        ProfileError: a profile file holds a bad key or value.
        ArgumentError: an override is an unknown key or a bad value.
    """
    values: dict[str, Any] = {}
    sources = ["built-in"]
    best: tuple[int, str, ProfileFile] | None = None
    for name, path in platform_files():
        found = read_profile_file(path)
        score = _match_score(found.match, platform)
        if score and (best is None or score > best[0]):
            best = (score, name, found)
    if best is not None:
        values.update(_settings_for(best[2], workload))
        sources.append(best[1])

    stamp: dict[str, str] = {}
    tuned_path = tuned_profile_path() if tuned == "auto" else tuned
    if tuned_path is not None:
        if not tuned_path.is_file():
            raise ProfileError(
                f"tuned profile {tuned_path} does not exist; run `edgeload autotune` or unset {PROFILE_ENV}"
            )
        found = read_profile_file(tuned_path)
        mismatch = _match_mismatch(found.match, platform) or _stamp_mismatch(found.tuned, platform)
        settings = _settings_for(found, workload)
        if mismatch:
            log.warning(
                "ignoring tuned profile %s: %s; point %s at a profile for this device, or re-run "
                "`edgeload autotune`",
                tuned_path,
                mismatch,
                PROFILE_ENV,
            )
        elif settings:
            stamp = found.tuned
            values.update(settings)
            sources.append(f"tuned:{tuned_path}")
            tuned_mode, mode = stamp.get("power_mode"), getattr(platform, "power_mode", None)
            if tuned_mode and mode and tuned_mode != mode:
                # Still a better start than the defaults, so it is used; but its numbers
                # were measured with other cores online and other clocks.
                log.warning(
                    "tuned profile %s was measured at power mode %s, this device runs %s; "
                    "re-run `edgeload autotune` in this mode for numbers that fit it",
                    tuned_path,
                    tuned_mode,
                    mode,
                )

    given = check_overrides(overrides)
    if given:
        values.update(given)
        sources.append("arguments")
    profile = Profile(**values, source=" < ".join(sources), stamp=stamp)
    if profile.prefetch_min_bytes > profile.prefetch_max_bytes:
        raise ProfileError(
            f"{profile.source}: prefetch_min_bytes ({profile.prefetch_min_bytes}) is above "
            f"prefetch_max_bytes ({profile.prefetch_max_bytes}); fix one of them"
        )
    return profile


def _settings_for(found: ProfileFile, workload: str | None) -> dict[str, Any]:
    """A file's ``[profile]``, with the table of ``workload`` over it."""
    return {**found.settings, **found.workloads.get(workload or "", {})}
