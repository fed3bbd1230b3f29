"""Run by test_interrupt_points.py: Ctrl-C at each point of one loader step, in turn.

``python _interrupt_step.py KIND VIDEO`` builds a fresh loader per trial (``streams``:
a StreamLoader over two looping copies of VIDEO; ``streams-waiting``: one copy replayed
at its frame rate, so the consumer waits for each batch; ``thread`` / ``process``: the
DataLoader with two such workers), takes three batches, then raises KeyboardInterrupt
at point k of the fourth ``next()`` (k = 1, 2, ... until the step has fewer points).
A point is where CPython can run a signal handler in the main thread: a Python
function's entry ("call") and the return from a call into C ("c_return"). The step
assigns the new batch over the old one, so dropping the old batch is part of it, as
in a ``for`` loop. Each trial prints one line: ``k outcome close_s where threads segments``.
A hung close is ended by faulthandler after HANG_S, with every thread's stack.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import sys
import threading
import time

HANG_S = 60.0
_POINTS = ("call", "c_return")


class Interrupt:
    """A profile hook that raises KeyboardInterrupt at the k-th point."""

    def __init__(self, k: int) -> None:
        self.k, self.seen, self.where = k, 0, ""

    def __call__(self, frame, event, arg):
        if event not in _POINTS:
            return
        self.seen += 1
        if self.seen == self.k:
            sys.setprofile(None)
            code = frame.f_code
            name = getattr(arg, "__qualname__", "") if event == "c_return" else ""
            where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"
            self.where = f"{event}:{where}:{code.co_name}:{name}".replace(" ", "_")
            raise KeyboardInterrupt


def make_loader(kind: str, video: str):
    if kind.startswith("streams"):
        from edgeload.video import StreamLoader, VideoSource

        if kind == "streams-waiting":  # one 30 fps camera, batches of 4: get() times out
            return StreamLoader([VideoSource(video, loop=True, realtime=True)], size=(64, 48),
                                batch=4, deadline_ms=1000)  # fmt: skip
        sources = [VideoSource(video, loop=True), VideoSource(video, loop=True)]
        return StreamLoader(sources, size=(64, 48), batch=2)
    import numpy as np
    import torch.utils.data

    import edgeload

    class Frames(torch.utils.data.Dataset):
        def __len__(self):
            return 100000

        def __getitem__(self, i):
            return np.full((32, 32, 3), i % 251, np.uint8)

    return edgeload.DataLoader(
        Frames(), batch_size=8, num_workers=2, worker_kind=kind, shuffle=True
    )


def trial(kind: str, video: str, k: int) -> tuple[str, float, str]:
    """One trial: (outcome, seconds from the interrupt to closed, where)."""
    hook = Interrupt(k)
    held: dict[str, object] = {}
    loader = make_loader(kind, video)
    outcome, raised_at = "not interrupted", time.monotonic()
    try:
        with loader if kind.startswith("streams") else contextlib.nullcontext():
            it = iter(loader)
            for _ in range(3):
                held["batch"] = next(it)
            sys.setprofile(hook)
            try:
                held["batch"] = next(it)
            finally:
                sys.setprofile(None)
                raised_at = time.monotonic()
    except KeyboardInterrupt as exc:
        # Raised while another exception was handled, Python prints both tracebacks.
        outcome = "ok" if exc.__context__ is None else f"chained-to-{exc.__context__!r}"
    except BaseException as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    outcome = outcome.replace(" ", "_")
    if not kind.startswith("streams"):
        it = None  # the DataLoader's iterator ends with its last reference
    held.clear()
    loader = None
    return outcome, time.monotonic() - raised_at, hook.where or "-"


def main() -> None:
    kind, video = sys.argv[1], sys.argv[2]
    faulthandler.enable()
    for k in range(1, 10_000):
        faulthandler.dump_traceback_later(HANG_S, exit=True)
        outcome, close_s, where = trial(kind, video, k)
        faulthandler.cancel_dump_traceback_later()
        gc.collect()  # a loader in a reference cycle is collected, as it would be later
        threads = ",".join(t.name for t in threading.enumerate() if t.name.startswith("edgeload"))
        mine = f"edgeload-{os.getpid()}-"
        segments = ",".join(n for n in os.listdir("/dev/shm") if n.startswith(mine))
        if where == "-":  # the step had fewer than k points: every one was tried
            print(f"done {k - 1}", flush=True)
            break
        print(f"{k} {outcome} {close_s:.3f} {where} {threads or '-'} {segments or '-'}", flush=True)


if __name__ == "__main__":
    main()
