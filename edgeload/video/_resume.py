"""What a :class:`~edgeload.video.streams.StreamLoader` saves for resume, and its restore.

``state_dict()`` is each file stream's next frame index (after the last frame the
consumer received; prefetched batches are not state), as plain ints and strings.
A fresh loader with the same file sources continues there: its readers seek, or
read and discard where seeking is inexact.  Live streams have nothing to resume.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._compat import zip_strict
from ..checkpoint import KEY_VERSION, check_version

STATE_VERSION = 1

KEY_STREAMS = "streams"
KEY_URI = "uri"
KEY_FRAME = "frame"


def loader_state(streams: Iterable[Any]) -> dict[str, Any]:
    """The numbers behind ``StreamLoader.state_dict()``."""
    return {
        KEY_VERSION: STATE_VERSION,
        KEY_STREAMS: [
            {KEY_URI: str(s.source.uri), KEY_FRAME: s.last_seq + 1}
            for s in streams
            if s.source.kind == "file"
        ],
    }


def load_loader_state(streams: Iterable[Any], state: dict[str, Any], *, started: bool) -> None:
    """The work behind ``StreamLoader.load_state_dict()``: each file stream resumes.

    Raises:
        ValueError: the loader has ``started`` (resume is for a fresh one), or the
            state is of another version or other sources.
    """
    if started:
        raise ValueError(
            "StreamLoader.load_state_dict() must come before iteration starts; "
            "make a new loader and load the state into it"
        )
    check_version(state, "StreamLoader", STATE_VERSION)
    files = [s for s in streams if s.source.kind == "file"]
    saved = state.get(KEY_STREAMS, [])
    if [str(s.source.uri) for s in files] != [e[KEY_URI] for e in saved]:
        raise ValueError(
            f"StreamLoader state is for files {[e[KEY_URI] for e in saved]}, this loader has "
            f"{[str(s.source.uri) for s in files]}; give the same file sources in the same order"
        )
    for stream, entry in zip_strict(files, saved):
        stream.last_seq = int(entry[KEY_FRAME]) - 1
