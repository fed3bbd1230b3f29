"""SlotPool: page-aligned slots, the lease rule, growth then copies, shared memory."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeload.errors import ArgumentError, ClosedError, PlatformError, WaitTimeout
from edgeload.pipeline.slots import (
    PAGE_SIZE,
    SlotPool,
    allocate_backing,
    attach,
    check_shm_space,
)


def _shm_files(pool_pid: int | None = None) -> set[str]:
    prefix = f"edgeload-{pool_pid or os.getpid()}-"
    return {n for n in os.listdir("/dev/shm") if n.startswith(prefix)}


def _produce(pool: SlotPool, value: int) -> np.ndarray:
    slot = pool.acquire(timeout_s=1)
    slot.array[...] = value
    return pool.lease(slot)


@pytest.mark.parametrize("shared", [False, True])
def test_slots_are_page_aligned_and_leases_are_zero_copy(shared):
    with SlotPool((3, 5, 7), np.float32, count=3, shared=shared) as pool:
        slots = [pool.acquire(timeout_s=1) for _ in range(3)]
        for slot in slots:
            assert slot.array.ctypes.data % PAGE_SIZE == 0
            assert slot.array.shape == (3, 5, 7) and slot.array.dtype == np.float32
            assert (slot.ref is not None) == shared
        slots[0].array[...] = 1.5
        view = pool.lease(slots[0])
        assert np.shares_memory(view, slots[0].array)
        assert float(view.sum()) == 1.5 * 105
        for slot in slots[1:]:
            pool.release(slot)


def test_a_kept_tensor_is_never_overwritten_and_its_slot_returns_when_dropped():
    torch = pytest.importorskip("torch")
    with SlotPool((4, 4), np.uint8, count=3) as pool:
        tensor = torch.from_numpy(_produce(pool, 7)[1:])  # a view of a view, then torch
        gc.collect()
        # The slot behind `tensor` stays leased; the others carry every later batch.
        for value in range(10, 20):
            batch = _produce(pool, value)
            assert int(batch[0, 0]) == value
            assert not np.shares_memory(batch, tensor.numpy())
            del batch
        assert bool((tensor == 7).all())
        assert pool.stats().leased == 1 and pool.stats().copies == 0
        del tensor
        assert pool.stats().leased == 0 and pool.stats().free == 3


def test_numpy_views_keep_the_slot_leased():
    with SlotPool((8,), np.int64, count=2) as pool:
        view = _produce(pool, 3)[::2].reshape(2, 2).T
        assert pool.stats().leased == 1
        other = _produce(pool, 4)
        del other
        assert view.tolist() == [[3, 3], [3, 3]]
        del view
        assert pool.stats().leased == 0


def test_list_of_many_batches_are_distinct_and_correct_grow_then_copy(caplog):
    caplog.set_level(logging.WARNING, logger="edgeload")
    slot_bytes = PAGE_SIZE
    with SlotPool((16,), np.int32, count=2, max_bytes=4 * slot_bytes, name="kept") as pool:
        batches = [_produce(pool, i) for i in range(50)]
        assert [int(b[0]) for b in batches] == list(range(50))
        assert all(int(b.min()) == int(b.max()) for b in batches)
        stats = pool.stats()
        assert stats.count == 4  # grew to max_bytes, never beyond
        assert stats.leased == 3  # one slot stays with the producers
        assert stats.copies == 47
    warnings = [r for r in caplog.records if "later batches are copies" in r.getMessage()]
    assert len(warnings) == 1
    assert "kept" in warnings[0].getMessage()
    assert [int(b[0]) for b in batches] == list(range(50))  # still valid after close


def test_reserve_keeps_slots_for_producers_that_fill_several_at_once():
    with SlotPool((4,), np.uint8, count=5, reserve=3) as pool:
        kept = [_produce(pool, i) for i in range(6)]
        assert pool.stats().leased == 2 and pool.stats().copies == 4
        # Three batches open at once (e.g. one per stream) still find slots.
        slots = [pool.acquire(timeout_s=0) for _ in range(3)]
        for slot in slots:
            pool.release(slot)
        assert [int(b[0]) for b in kept] == list(range(6))
    with pytest.raises(ValueError, match="reserve must be between 0 and count=2, got 3"):
        SlotPool((4,), count=2, reserve=3)


def test_acquire_times_out_with_a_clear_message_when_producers_hold_every_slot():
    with SlotPool((4,), np.uint8, count=1, name="cams") as pool:
        slot = pool.acquire(timeout_s=1)
        with pytest.raises(WaitTimeout, match=r"cams: no free slot within 0.05 s \(1 slots"):
            pool.acquire(timeout_s=0.05)
        pool.release(slot)
        with pytest.raises(ValueError, match="slot 0 is not acquired"):
            pool.release(slot)


def test_close_unlinks_shared_memory_and_kept_batches_stay_valid():
    before = _shm_files()
    pool = SlotPool((1024,), np.uint8, count=4, shared=True)
    assert len(_shm_files() - before) == 1
    kept = _produce(pool, 9)
    pool.close()
    pool.close()  # idempotent
    assert _shm_files() == before
    assert int(kept.sum()) == 9 * 1024
    with pytest.raises(ClosedError, match="slots: acquire"):
        pool.acquire(timeout_s=0)


def test_an_unclosed_pool_is_cleaned_up_by_garbage_collection():
    before = _shm_files()
    pool = SlotPool((64,), np.uint8, count=2, shared=True)
    pool.acquire(timeout_s=1)
    assert _shm_files() != before
    del pool
    gc.collect()
    assert _shm_files() == before


def test_attach_writes_the_same_memory_in_another_mapping():
    with SlotPool((2, 3), np.int16, count=2, shared=True) as pool:
        slot = pool.acquire(timeout_s=1)
        assert slot.ref is not None
        other = attach(slot.ref)
        other[...] = np.arange(6, dtype=np.int16).reshape(2, 3)
        assert pool.lease(slot).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_shm_too_small_names_shm_size_before_creating_anything():
    before = _shm_files()
    free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
    with pytest.raises(PlatformError, match=r"--shm-size=\d+m.*worker_kind='thread'"):
        SlotPool((1 << 20,), np.uint8, count=free // (1 << 20) + 8, shared=True)
    assert _shm_files() == before
    with pytest.raises(PlatformError, match="not usable"):
        check_shm_space(1, shm_dir="/nonexistent-shm-dir")


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="count must be >= 1, got 0"):
        SlotPool((4,), count=0)
    with pytest.raises(ValueError, match=r"max_bytes=10 is below 2 slots"):
        SlotPool((4,), count=2, max_bytes=10)
    with pytest.raises(ArgumentError, match=r"memory mode must be one of .*, got 'vram'"):
        allocate_backing("vram", 10)
    with pytest.raises(ArgumentError, match="at least 1 byte, got 0"):
        allocate_backing("host", 0)


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(st.one_of(st.booleans(), st.integers(0, 20)), max_size=60),
    count=st.integers(1, 4),
    extra=st.integers(0, 3),
    reserve=st.integers(1, 4),
)
def test_kept_batches_never_change_under_any_keep_drop_sequence(ops, count, extra, reserve):
    # True: produce and keep; False: produce and drop at once; n: drop kept batch n.
    reserve = min(reserve, count)
    max_bytes = (count + extra) * PAGE_SIZE
    kept: dict[int, np.ndarray] = {}
    with SlotPool((8,), np.int64, count=count, max_bytes=max_bytes, reserve=reserve) as pool:
        for step, op in enumerate(ops):
            if isinstance(op, bool):
                batch = _produce(pool, step)
                if op:
                    kept[step] = batch
                del batch
            elif kept:
                kept.pop(sorted(kept)[op % len(kept)])
            assert all(int(b.min()) == int(b.max()) == k for k, b in kept.items())
            stats = pool.stats()
            assert stats.nbytes <= max_bytes
            assert stats.leased <= len(kept)  # copies hold no slot
            assert stats.free + stats.acquired + stats.leased == stats.count
            assert stats.count - stats.leased >= reserve  # the producers' share


def test_latest_prefetch_recycles_dropped_slots():
    from edgeload.pipeline.prefetch import END, Prefetcher

    with SlotPool((32,), np.int32, count=6) as pool:
        queue = Prefetcher(max_items=2, policy="latest", on_drop=pool.release)

        def produce() -> None:
            for i in range(200):
                slot = pool.acquire(timeout_s=5)
                slot.array[...] = i
                queue.put(slot)
            queue.put_end()

        producer = threading.Thread(target=produce, name="test-camera")
        producer.start()
        seen = []
        while (slot := queue.get(timeout_s=5)) is not END:
            batch = pool.lease(slot)
            seen.append(int(batch[0]))
            assert int(batch.min()) == int(batch.max())
            time.sleep(0.001)
        del batch
        producer.join(5)
        stats = queue.stats()
        assert len(seen) + stats.drops == 200
        assert seen == sorted(seen) and seen[-1] == 199
        assert pool.stats().count == 6 and pool.stats().free == 6


def _pool_starts_in_a_new_process(shm_dir):
    """Start (and close) a shared pool in ``shm_dir`` in a fresh process, as the next
    program would; what the directory held while that pool lived, less its own."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "from edgeload.pipeline.slots import SlotPool\n"
        "before = set(os.listdir(sys.argv[1]))\n"
        "with SlotPool((4, 64), 'uint8', count=2, shared=True, shm_dir=sys.argv[1]):\n"
        "    mine = set(os.listdir(sys.argv[1])) - before\n"
        "    print('\\n'.join(sorted(set(os.listdir(sys.argv[1])) - mine)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(shm_dir)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return sorted(out.stdout.split())


def test_segments_of_a_killed_process_are_swept_by_the_next_one(tmp_path):
    """SIGKILL leaves the owner no chance to unlink; the next pool that starts removes them."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, os, time\n"
        "from edgeload.pipeline.slots import SlotPool\n"
        "pool = SlotPool((4, 64), 'uint8', count=2, shared=True, shm_dir=sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        # Old enough to sweep, but the owner still holds its lock: kept.
        left = sorted(os.listdir(tmp_path))
        assert left
        for name in left:
            os.utime(tmp_path / name, (time.time() - 3600, time.time() - 3600))
        assert _pool_starts_in_a_new_process(tmp_path) == left
        assert sorted(os.listdir(tmp_path)) == left
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        child.kill()
        child.wait(timeout=10)
        child.stdout.close()
    assert sorted(os.listdir(tmp_path)) == left  # nothing could unlink them
    assert _pool_starts_in_a_new_process(tmp_path) == []  # swept before it listed them
    assert os.listdir(tmp_path) == []


def test_a_fresh_segment_is_not_swept_before_its_owner_locks_it(tmp_path):
    orphan = tmp_path / "edgeload-1-slots-deadbeef"
    orphan.write_bytes(b"x" * 16)  # no owner, but just created: too young to judge
    assert _pool_starts_in_a_new_process(tmp_path) == [orphan.name]
    assert orphan.exists()


def test_managed_slots_get_one_allocation_each():
    """Managed memory attaches to a stream per allocation, so slots must not share one."""
    # Internal: which allocation backs a slot is seen only through the GPU lease registry.
    from edgeload.cuda._lease import find_owner
    from edgeload.cuda.host_engine import HostEngine

    def allocations(mode):
        with HostEngine() as engine, SlotPool(
            (2, 8), "uint8", count=3, mode=mode, engine=engine
        ) as pool:
            slots = [pool.acquire(timeout_s=1) for _ in range(3)]
            return len({id(find_owner(slot.array)) for slot in slots})

    assert allocations("managed") == 3
    assert allocations("pinned") == 1  # other modes share one allocation
