"""``edgeload demo``: several streams into batches, live, with what it costs.

With no sources it writes four sample clips (once, into the user cache dir) and
replays them in real time like four cameras.  It prints a status line a second
(batches/s, frame age, drops, memory), then a table per stream, and saves a contact
sheet of the last batch as a PNG.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._compat import zip_strict
from .._deps import require_cv2
from ..errors import ArgumentError, WorkerTimeout
from ..measure import tree_pss_bytes
from ..video.batch import Batch
from ..video.source import VideoSource
from ..video.streams import StreamLoader

_CLIP_SIZE = (640, 360)
_GRACE_S = 2.0  # past --seconds, the most the demo waits for a batch
_CLIP_FPS = 30
_CLIP_SECONDS = 4
_COLOURS = ((40, 40, 200), (40, 160, 40), (200, 90, 30), (160, 40, 160))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to ``parser``."""
    parser.add_argument("sources", nargs="*", help="files, URLs, camera indices or pipelines "
                        "(default: four sample clips replayed in real time)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to run")
    parser.add_argument("--size", default="640x640", help="output frame size WxH")
    parser.add_argument("--batch", type=int, default=None, help="frames per batch")
    parser.add_argument("--out", type=Path, default=Path("edgeload-demo.png"),
                        help="where to save the contact sheet of the last batch")  # fmt: skip


def cache_dir() -> Path:
    """edgeload's user cache directory (``$XDG_CACHE_HOME/edgeload`` or ``~/.cache/edgeload``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgeload"


def sample_clips(directory: Path, count: int = 4) -> list[Path]:
    """Write (once) ``count`` short synthetic camera clips; return their paths."""
    cv2 = require_cv2()
    directory.mkdir(parents=True, exist_ok=True)
    w, h = _CLIP_SIZE
    paths = []
    for index in range(count):
        path = directory / f"sample-cam{index}.mp4"
        paths.append(path)
        if path.exists():
            continue
        part = path.with_suffix(".part.mp4")
        writer = cv2.VideoWriter(str(part), cv2.VideoWriter_fourcc(*"mp4v"), _CLIP_FPS, (w, h))
        frame = np.empty((h, w, 3), np.uint8)
        for n in range(_CLIP_FPS * _CLIP_SECONDS):
            frame[:] = 30 + 10 * index
            x = int((w - 80) * (0.5 + 0.5 * np.sin(2 * np.pi * n / (_CLIP_FPS * 2) + index)))
            cv2.rectangle(frame, (x, h // 3), (x + 80, h // 3 + 80), _COLOURS[index % 4], -1)
            cv2.putText(frame, f"cam {index}  frame {n:03d}", (20, h - 30),
                        cv2.FONT_HERSHEY_SIMPLEX, 1.0, (255, 255, 255), 2)  # fmt: skip
            writer.write(frame)
        writer.release()
        part.rename(path)
    return paths


def _memory_mib() -> float:
    return tree_pss_bytes() / 2**20


def contact_sheet(batch: Batch, path: Path) -> Path:
    """Tile the valid frames of ``batch`` (NHWC, BGR) into one PNG at ``path``."""
    cv2 = require_cv2()
    frames = batch.frames.cpu().numpy()
    if frames.shape[-1] != 3:
        frames = frames.transpose(0, 2, 3, 1)
    tiles = [f if ok else np.zeros_like(f) for f, ok in zip_strict(frames, batch.valid.tolist())]
    cols = int(np.ceil(np.sqrt(len(tiles))))
    rows = -(-len(tiles) // cols)
    tiles += [np.zeros_like(tiles[0])] * (rows * cols - len(tiles))
    sheet = np.vstack([np.hstack(tiles[r * cols : (r + 1) * cols]) for r in range(rows)])
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), sheet):
        raise OSError(f"could not write the contact sheet to {path}")
    return path


def _status(loader: StreamLoader, elapsed: float) -> str:
    s = loader.stats()
    age = s["frame_age_ms"]
    states = ",".join(st["state"][:4] for st in s["streams"])
    return (f"[{elapsed:5.1f}s] {s['batch_rate']:6.1f} batches/s  age p50 {age['p50'] or 0:6.1f} "
            f"ms p99 {age['p99'] or 0:6.1f} ms  drops {s['drops']:5d}  mem {_memory_mib():6.1f} "
            f"MiB  [{states}]")  # fmt: skip


def _table(stats: dict[str, Any]) -> str:
    lines = [f"{'id':>3} {'stream':<34} {'state':<12} {'frames':>7} {'fps':>6} {'drops':>6} "
             f"{'reconn':>6}  last error"]  # fmt: skip
    for st in stats["streams"]:
        name = str(st["name"])[-34:]
        lines.append(
            f"{st['id']:>3} {name:<34} {st['state']:<12} {st.get('delivered', 0):>7} "
            f"{st.get('fps_measured', 0):>6.1f} {st['drops']:>6} {st.get('reconnects', 0):>6}  "
            f"{st.get('last_error') or '-'}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the demo; return the exit status."""
    try:
        w, h = (int(v) for v in str(args.size).lower().split("x"))
    except ValueError:
        w = h = 0
    if w < 1 or h < 1:
        raise ArgumentError(f"--size must look like 640x640, both > 0, got {args.size!r}")
    if not 0 < args.seconds < float("inf"):
        raise ArgumentError(f"--seconds must be a finite number > 0, got {args.seconds}")
    if args.sources:
        sources: list[Any] = list(args.sources)
    else:
        clips = sample_clips(cache_dir() / "demo")
        print(f"sample clips: {clips[0].parent} (4 x {_CLIP_SIZE[0]}x{_CLIP_SIZE[1]}, "
              f"replayed at {_CLIP_FPS} fps)")  # fmt: skip
        sources = [VideoSource(p, realtime=True, loop=True, name=p.name) for p in clips]
    last: Batch | None = None
    # No batch within the run's own length ends the run (the table says why), so a
    # camera that is down never holds the demo past --seconds for long.
    with StreamLoader(sources, size=(w, h), batch=args.batch,
                      timeout_s=args.seconds + _GRACE_S) as loader:  # fmt: skip
        print(loader.plan.describe())
        start = next_status = time.monotonic()
        while True:
            try:
                batch = next(loader)
            except (StopIteration, WorkerTimeout):
                break
            last = batch
            now = time.monotonic()
            if now >= next_status:
                print(_status(loader, now - start), flush=True)
                next_status = max(next_status + 1.0, now + 0.5)
            if now - start >= args.seconds:
                break
        stats = loader.stats()
    print()
    print(_table(stats))
    print(f"batches {stats['batches']}, frame age p50 {stats['frame_age_ms']['p50']} ms, "
          f"p99 {stats['frame_age_ms']['p99']} ms, drops {stats['drops']}")  # fmt: skip
    if last is None:
        print("no batch arrived; see the errors above")
        return 1
    print(f"contact sheet of the last batch: {contact_sheet(last, args.out)}")
    return 0
