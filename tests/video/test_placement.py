"""Where frames go in an open batch: the fixed-size and one-place-per-stream rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeload.pipeline.slots import SlotPool

# Internal: the placement rules over arbitrary stream and batch counts (hypothesis).
from edgeload.video._assembler import OpenBatch, Placement


@pytest.fixture(scope="module")
def pool():
    with SlotPool((8, 2, 2, 3), np.uint8, count=2) as p:
        yield p


def _open(pool, size):
    slot = pool.acquire(timeout_s=1)
    return OpenBatch(pool, slot, size)


def _claim(rules, batch, sid, latest):
    found = rules.find([batch], sid, latest)
    if found is not None:
        batch.meta.stream_id[found[1]] = sid
    return found


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 8),
    streams=st.integers(1, 5),
    order=st.lists(st.integers(0, 4), max_size=40),
)
def test_latest_streams_never_take_more_than_their_share_of_a_fixed_batch(
    pool, size, streams, order
):
    rules = Placement(size, active=lambda: list(range(streams)))
    batch = _open(pool, size)
    try:
        share = math.ceil(size / streams)
        for sid in (s % streams for s in order):
            held_before = int((batch.meta.stream_id == sid).sum())
            free_before = int((batch.meta.stream_id < 0).sum())
            found = _claim(rules, batch, sid, latest=True)
            held = int((batch.meta.stream_id == sid).sum())
            assert held <= share
            if held_before or (free_before and held_before < share):
                assert found is not None  # a latest frame always lands while it may
            else:
                assert found is None
    finally:
        pool.release(batch.slot)


def test_every_streams_fill_a_fixed_batch_first_come_then_wait(pool):
    rules = Placement(3, active=lambda: [0, 1])
    batch = _open(pool, 3)
    try:
        got = [_claim(rules, batch, sid, latest=False) for sid in (1, 1, 0, 0)]
        assert [g[1] if g else None for g in got] == [0, 1, 2, None]
        batch.meta.valid[:2] = True
        batch.filled = 2  # as the assembler counts its commits
        assert not rules.may_seal(batch)  # a commit leaves the mux asleep until the last
        batch.meta.valid[:] = True
        batch.filled = 3
        assert rules.full(batch)
        assert rules.may_seal(batch)
    finally:
        pool.release(batch.slot)


def test_one_place_per_stream_follows_the_stream_order(pool):
    rules = Placement(None, active=lambda: [7, 3])
    rules.places = {7: 0, 3: 1}
    assert rules.size() == 2
    batch = _open(pool, 2)
    try:
        assert _claim(rules, batch, 3, latest=False)[1] == 1
        assert _claim(rules, batch, 3, latest=False) is None  # every: waits for the next
        assert _claim(rules, batch, 3, latest=True)[1] == 1  # latest: overwrites its own
        assert _claim(rules, batch, 9, latest=True) is None  # removed: no place
        batch.meta.valid[1] = True
        assert not rules.full(batch)  # stream 7 is active and has not delivered
        batch.meta.valid[0] = True
        assert rules.full(batch)
    finally:
        pool.release(batch.slot)


def test_a_stale_latest_frame_does_not_fill_a_batch_and_is_replaced_first(pool):
    rules = Placement(2, active=lambda: [0, 1])
    rules.latest = {0, 1}
    batch = _open(pool, 2)
    try:
        _claim(rules, batch, 0, latest=True)
        _claim(rules, batch, 1, latest=True)
        batch.meta.valid[:] = True
        batch.stale[0] = True  # placed before the consumer's last take
        assert not rules.full(batch)
        assert _claim(rules, batch, 0, latest=True)[1] == 0  # its own stale frame goes
        batch.stale[0] = False
        assert rules.full(batch)
    finally:
        pool.release(batch.slot)


@pytest.mark.parametrize("fixed", [None, 3])
def test_beside_every_streams_a_batch_leaves_latest_places_to_the_hand_over(pool, fixed):
    active = [0, 1, 2]  # 0 latest, 1 and 2 every
    rules = Placement(fixed, active=lambda: active)
    rules.places, rules.latest, rules.hand_over = {0: 0, 1: 1, 2: 2}, {0}, True
    batch = _open(pool, 3)
    try:
        assert rules.handing_over() and rules.waited_for() == [1, 2]
        places = [_claim(rules, batch, sid, latest=False) for sid in (1, 2, 1)]
        taken = [1, 2] if fixed is None else [0, 1]  # a fixed batch: first come
        assert [p[1] if p else None for p in places] == [*taken, None]  # one place kept
        batch.meta.valid[taken] = True
        assert rules.full(batch)  # sealed without the latest frame: it comes at hand-over
        active[:] = [0]  # the files ended: the camera fills batches itself again
        assert not rules.handing_over() and rules.waited_for() == [0]
        assert not rules.full(batch)
    finally:
        pool.release(batch.slot)
