"""The dataset benchmark's bare two-thread contender: torch's batches, in order; a failed
read raises instead of hanging; a generator closed early leaves no thread behind."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cv2")

from benchmarks.bench_dataset import bare_threads  # noqa: E402


class _Images:
    """Map-style: image ``i`` is a 6x5x3 uint8 array filled from ``i``; label ``i % 7``."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        if i == self.fail_at:
            raise ValueError(f"sample {i} is unreadable")
        return np.full((6, 5, 3), i % 251, np.uint8) + np.arange(3, dtype=np.uint8), i % 7


def _bare_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("bench-bare")]


@pytest.mark.parametrize("ahead", [1, 2])
def test_bare_threads_deliver_torchs_batches_in_order(ahead):
    dataset = _Images(23)  # 4 batches of 5 and a short one of 3
    want = list(torch.utils.data.DataLoader(dataset, batch_size=5, num_workers=0))
    got = list(bare_threads(dataset, 5, 2, ahead))
    assert len(got) == len(want) == 5
    for (gi, gl), (wi, wl) in zip(got, want):
        assert gi.dtype == wi.dtype and gl.dtype == wl.dtype
        assert torch.equal(gi, wi) and torch.equal(gl, wl)
    assert _bare_alive() == []


def test_a_failed_read_raises_naming_the_batch_and_stops_the_threads():
    with pytest.raises(RuntimeError, match="batch 2") as caught:
        list(bare_threads(_Images(40, fail_at=12), 5, 2, 2))
    assert isinstance(caught.value.__cause__, ValueError)
    assert _bare_alive() == []


def test_closing_early_joins_the_threads():
    batches = bare_threads(_Images(400), 5, 2, 2)
    next(batches)
    batches.close()
    assert _bare_alive() == []
