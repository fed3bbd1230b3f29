"""Model-ready batches on the CPU: the StreamLoader's conversion against the user's own.

The user's way is what every detector script writes on its uint8 batch:
``x.float().div(255)`` and, with a mean and std, ``(x - mean) / std`` (new tensors
each step).  The loader's is :class:`edgeload.video._convert.Converter`: one copy to
float into a kept output and one in-place multiply-add.  Both take the same uint8
NCHW batch and keep only the latest result, as a plain ``for batch in loader`` loop
does; rounds alternate the two, and each reports the median milliseconds per batch.

Run: ``python benchmarks/bench_convert.py [--rounds 7] [--batches 60] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from edgeload.video._convert import Converter

_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _user(
    frames: torch.Tensor, mean: torch.Tensor | None, std: torch.Tensor | None
) -> torch.Tensor:
    out = frames.float().div(255)
    return out if mean is None or std is None else (out - mean) / std


def _timed(step, frames: torch.Tensor, batches: int) -> float:
    kept = None
    start = time.perf_counter()
    for _ in range(batches):
        kept = step(frames)
    del kept
    return (time.perf_counter() - start) / batches * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); median ms per batch")
    for shape in ((4, 3, 320, 320), (4, 3, 640, 640), (8, 3, 384, 640)):
        frames = torch.randint(0, 256, shape, dtype=torch.uint8)
        for normalise in (False, True):
            mean = torch.tensor(_MEAN).view(3, 1, 1) if normalise else None
            std = torch.tensor(_STD).view(3, 1, 1) if normalise else None
            conv = Converter(dtype=torch.float32, mean=_MEAN if normalise else None,
                             std=_STD if normalise else None, layout="NCHW")  # fmt: skip
            got, want = conv.on_cpu(frames), _user(frames, mean, std)
            if not torch.allclose(got, want, atol=1e-5):
                raise SystemExit("the loader's conversion differs from the user's")
            user, loader = [], []
            for _ in range(args.rounds):
                user.append(_timed(functools.partial(_user, mean=mean, std=std), frames,
                                   args.batches))  # fmt: skip
                loader.append(_timed(conv.on_cpu, frames, args.batches))
            u, lo = statistics.median(user), statistics.median(loader)
            what = "div(255) + normalise" if normalise else "div(255)"
            print(
                f"{shape!s:18} {what:22} user {u:7.3f}  loader {lo:7.3f}  "
                f"ratio {lo / u:.2f}  (outputs made: {conv.stats()['outputs_made']})"
            )


if __name__ == "__main__":
    main()
