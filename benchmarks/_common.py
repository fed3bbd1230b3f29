"""What the benchmark modules share: CPU seconds, a measured child run, the report tail.

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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[1])


def cpu_s(*, children: bool = False) -> float:
    """CPU seconds of this process (and, with ``children``, its reaped children).

    The load of other work on a shared box moves this far less than wall time.
    """
    usages = [resource.RUSAGE_SELF] + ([resource.RUSAGE_CHILDREN] if children else [])
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, usages))


def run_child(cmd: Sequence[str], *, timeout_s: float) -> dict[str, Any]:
    """Run one contender's child process; its last stdout line is its JSON result.

    Adds ``peak_pss_mib``: the peak PSS of the child's process tree.
    """
    from edgeload.measure import run_measured

    # Children run as scripts (``python benchmarks/x.py``): this tree's ``benchmarks``
    # and ``edgeload`` come first on their path, not an installed copy's.
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, paths)])
    out, peak = run_measured(list(cmd), timeout_s=timeout_s)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_pss_mib"] = peak / 2**20
    return result


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
