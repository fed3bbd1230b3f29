"""What the benchmark modules share: CPU seconds, a measured child run, the rounds'
rotated order, the plain OpenCV loop, the report tail.

Each benchmark runs every contender in a fresh child process of its own script
(``--child NAME`` plus hidden arguments), samples that child's PSS from outside, and
ends by printing the report as JSON and saving it where ``--out`` says.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C", bound=Hashable)
R = TypeVar("R")

ROOT = str(Path(__file__).resolve().parents[1])


def cpu_s(*, children: bool = False) -> float:
    """CPU seconds of this process (and, with ``children``, its reaped children).

    The load of other work on a shared box moves this far less than wall time.
    """
    usages = [resource.RUSAGE_SELF] + ([resource.RUSAGE_CHILDREN] if children else [])
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, usages))


def run_child(
    cmd: Sequence[str], *, timeout_s: float, pss_interval_s: float | None = None
) -> dict[str, Any]:
    """Run one contender's child process; its last stdout line is its JSON result.

    Adds ``peak_pss_mib``: the peak PSS of the child's process tree, sampled every
    ``pss_interval_s`` (None: :data:`edgeload.measure.SAMPLE_INTERVAL_S`).
    """
    from edgeload.measure import SAMPLE_INTERVAL_S, run_measured

    # Children run as scripts (``python benchmarks/x.py``): this tree's ``benchmarks``
    # and ``edgeload`` come first on their path, not an installed copy's.
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, paths)])
    interval = SAMPLE_INTERVAL_S if pss_interval_s is None else pss_interval_s
    out, peak = run_measured(list(cmd), timeout_s=timeout_s, interval_s=interval)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_pss_mib"] = peak / 2**20
    return result


def rotated(contenders: Sequence[C], round_index: int) -> list[C]:
    """The order the contenders run in, in round ``round_index``: it starts at contender
    ``round_index mod n`` and wraps around.

    On the shared box whichever contender ran first in a round came out slowest (a
    cache, page-cache or frequency effect as large as the gaps being measured); over
    ``n`` rounds each contender runs in every position once, so that bias cancels.
    """
    k = round_index % len(contenders) if contenders else 0
    return [*contenders[k:], *contenders[:k]]


def interleave(
    contenders: Sequence[C],
    rounds: int,
    run_one: Callable[[C, int], R | None],
    *,
    label: Callable[[C], str] = str,
) -> tuple[dict[C, list[R]], list[list[str]]]:
    """Run every contender once per round, each round in its rotated order.

    ``run_one(contender, round_index)`` returns a result, or None for a run that failed
    (the benchmark records why itself; that round then lacks the contender).

    Returns:
        The results per contender, in round order, and each round's order (each
        contender as ``label`` names it), for the report's ``round_orders``.
    """
    runs: dict[C, list[R]] = {c: [] for c in contenders}
    orders: list[list[str]] = []
    for r in range(rounds):
        order = rotated(contenders, r)
        orders.append([label(c) for c in order])
        for c in order:
            got = run_one(c, r)
            if got is not None:
                runs[c].append(got)
    return runs, orders


def plain_batches(paths: Sequence[str], size: tuple[int, int]) -> Iterator[Any]:
    """The loop a user writes without a loader: ``cap.read()`` from each file in turn
    (OpenCV's default FFmpeg threads), ``cv2.resize`` into one preallocated batch,
    ``torch.from_numpy``; each file loops at its end.  Yields the batch tensor, which
    the next batch overwrites."""
    import cv2
    import numpy as np
    import torch

    caps = [cv2.VideoCapture(p) for p in paths]
    batch = np.empty((len(caps), size[1], size[0], 3), np.uint8)
    try:
        while True:
            for i, cap in enumerate(caps):
                ok, frame = cap.read()
                if not ok:
                    cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                    ok, frame = cap.read()
                if not ok:
                    raise RuntimeError(
                        f"{paths[i]}: no frame even after seeking to frame 0; is the "
                        "file a readable video?"
                    )
                cv2.resize(frame, size, dst=batch[i])
            yield torch.from_numpy(batch)
    finally:
        for cap in caps:
            cap.release()


def versions() -> dict[str, str]:
    """The software the figures were measured with (for the report)."""
    import cv2
    import numpy as np

    found = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "opencv": cv2.__version__,
    }
    try:
        import torch

        found["torch"] = torch.__version__
    except ImportError:
        found["torch"] = "missing"
    return found


@contextlib.contextmanager
def plan_ffmpeg_threads(threads: int) -> Iterator[None]:
    """StreamLoaders made inside the block give each stream ``threads`` FFmpeg threads
    instead of the plan's (0: FFmpeg's own choice): a benchmark-only override, to
    measure the plan's choice against the others.  The loader reads the count from its
    plan when it is made, so the override wraps the plan's thread decision."""
    from edgeload.platform import plan as plan_module

    choose = plan_module.choose_threads

    def forced(*args: Any, **kwargs: Any) -> tuple[int, int, str]:
        _, torch_threads, why = choose(*args, **kwargs)
        return threads, torch_threads, f"{why} (benchmark override: {threads} FFmpeg threads)"

    plan_module.choose_threads = forced  # type: ignore[assignment]
    try:
        yield
    finally:
        plan_module.choose_threads = choose


def os_threads() -> int:
    """This process's OS threads, FFmpeg's included (to check what a run really used)."""
    return len(os.listdir("/proc/self/task"))


CLOCK_CAMERA = Path(__file__).resolve().parents[1] / "tests" / "clock_camera.py"


def start_clock_cameras(
    cameras: int, size: str, port: int, *, bench: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """``cameras`` loopback RTSP cameras drawing their capture time in each frame
    (``tests/clock_camera.py``, Debian's Python for gst-rtsp-server): the process and the
    cameras' URLs."""
    proc = subprocess.Popen(
        ["/usr/bin/python3", str(CLOCK_CAMERA), "--port", str(port), "--cameras", str(cameras),
         "--size", size], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"bench {bench}: the clock cameras did not start: {line!r}")
    return proc, line.split()[1:]


def finish(report: dict[str, Any], out: str | None) -> int:
    """Print the report as JSON and save it to ``out`` (when given); the exit status."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text)
    return 0


def main(
    argv: list[str] | None,
    *,
    doc: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    child: Callable[[argparse.Namespace], dict[str, Any]],
    hidden: Sequence[tuple[str, dict[str, Any]]] = (),
) -> int:
    """A benchmark script's entry point: ``run`` the benchmark, or one ``--child``.

    Args:
        doc: the module docstring (its first line is the description).
        hidden: extra ``(flag, add_argument keywords)`` only the children take.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    for flag, kwargs in hidden:
        parser.add_argument(flag, help=argparse.SUPPRESS, **kwargs)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    return run(args)
