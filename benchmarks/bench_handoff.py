"""pytest-benchmark: hand-off cost per item (edgeload thread/process vs torch DataLoader).

Run: ``.venv/bin/python -m pytest benchmarks/bench_handoff.py``. One round moves
``ITEMS`` items; divide the round time by ``ITEMS`` for the per-item cost (also stored
in ``extra_info``). ``scripts/bench.py handoff`` prints the same comparison as ratios.
"""

from __future__ import annotations

import pytest

from benchmarks.handoff import KINDS, MIB, make_runner

pytest.importorskip("torch")

ITEMS = 50


@pytest.mark.parametrize("size_mib", [1, 8])
@pytest.mark.parametrize("kind", KINDS)
def test_handoff(benchmark, kind, size_mib):
    runner = make_runner(kind, size_mib * MIB, ITEMS)
    benchmark.group = f"handoff {size_mib} MiB x {ITEMS} items"
    try:
        benchmark.pedantic(runner.run, args=(ITEMS,), rounds=5, iterations=1)
    finally:
        runner.close()
    benchmark.extra_info["per_item_ms"] = benchmark.stats.stats.median / ITEMS * 1e3
