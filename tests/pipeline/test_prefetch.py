"""Prefetcher: bounds, policies, END, timeouts, close; Hypothesis properties."""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeload.errors import ClosedError, WaitTimeout, WorkerTimeout
from edgeload.pipeline.prefetch import END, Prefetcher

# An op is ("put", nbytes), ("get",) or ("close",).
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 40)),
        st.tuples(st.just("get")),
        st.tuples(st.just("close")),
    ),
    max_size=60,
)


def _check_bounds(q: Prefetcher) -> None:
    s = q.stats()
    assert s.depth <= q.max_items
    assert q.max_bytes is None or s.bytes_held <= q.max_bytes


@settings(max_examples=150, deadline=None)
@given(
    ops=_ops,
    max_items=st.integers(1, 5),
    max_bytes=st.one_of(st.none(), st.integers(40, 100)),
    policy=st.sampled_from(["block", "latest"]),
)
def test_bounds_and_accounting_hold_for_any_sequence(ops, max_items, max_bytes, policy):
    dropped: list[int] = []
    q: Prefetcher[int] = Prefetcher(
        max_items=max_items, max_bytes=max_bytes, policy=policy, on_drop=dropped.append
    )
    produced: list[int] = []
    delivered: list[int] = []
    for op in ops:
        if op[0] == "put":
            try:
                q.put(len(produced), nbytes=op[1], timeout_s=0)
                produced.append(len(produced))
            except (TimeoutError, ClosedError):
                assert policy == "block" or q.closed
        elif op[0] == "get":
            with contextlib.suppress(WorkerTimeout, ClosedError):
                delivered.append(q.get(timeout_s=0))
        else:
            q.close()
        _check_bounds(q)
        if not q.closed:
            held = q.stats().depth
            assert len(delivered) + len(dropped) + held == len(produced)
    if policy == "block":
        assert dropped == []
        assert delivered == produced[: len(delivered)]  # once each, in order
    else:
        assert sorted(delivered + dropped) == sorted(set(delivered + dropped))
        assert delivered == sorted(delivered)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=40),
    max_items=st.integers(1, 4),
    max_bytes=st.integers(30, 60),
    policy=st.sampled_from(["block", "latest"]),
    consumer_pause=st.sampled_from([0.0, 0.0005]),
)
def test_threads_never_exceed_bounds_and_lose_nothing(
    sizes, max_items, max_bytes, policy, consumer_pause
):
    dropped: list[int] = []
    q: Prefetcher[int] = Prefetcher(
        max_items=max_items, max_bytes=max_bytes, policy=policy, on_drop=dropped.append
    )
    violations: list[str] = []

    def produce() -> None:
        for i, n in enumerate(sizes):
            q.put(i, nbytes=n, timeout_s=5)
            s = q.stats()
            if s.depth > max_items or s.bytes_held > max_bytes:
                violations.append(str(s))
        q.put_end()

    producer = threading.Thread(target=produce, name="test-producer")
    producer.start()
    delivered = []
    while (item := q.get(timeout_s=5)) is not END:
        delivered.append(item)
        _check_bounds(q)
        time.sleep(consumer_pause)
    producer.join(5)
    assert violations == []
    if policy == "block":
        assert delivered == list(range(len(sizes)))
    else:
        assert len(delivered) + len(dropped) == len(sizes) == q.stats().put_count
        assert q.stats().drops == len(dropped)
        assert sorted(delivered + dropped) == list(range(len(sizes)))
        assert delivered == sorted(delivered)


def test_latest_drops_the_oldest_and_hands_it_to_on_drop():
    dropped = []
    q: Prefetcher[str] = Prefetcher(max_items=2, policy="latest", on_drop=dropped.append)
    for item in "abcd":
        q.put(item)
    assert dropped == ["a", "b"]
    assert [q.get(timeout_s=1), q.get(timeout_s=1)] == ["c", "d"]
    assert q.stats().drops == 2


def test_latest_drops_by_bytes_too():
    q: Prefetcher[str] = Prefetcher(max_items=10, max_bytes=100, policy="latest")
    q.put("a", nbytes=60)
    q.put("b", nbytes=30)
    q.put("c", nbytes=50)  # a must go: 60 + 30 + 50 > 100
    assert q.stats().bytes_held == 80
    assert q.get(timeout_s=1) == "b"


def test_block_waits_for_room_and_counts_the_producer_wait():
    q: Prefetcher[int] = Prefetcher(max_items=1)
    q.put(1)
    threading.Timer(0.2, q.get, kwargs={"timeout_s": 1}).start()
    t0 = time.monotonic()
    q.put(2, timeout_s=2)
    assert time.monotonic() - t0 >= 0.15
    assert q.stats().producer_wait_s >= 0.15
    assert q.get(timeout_s=1) == 2


def test_end_comes_after_every_item_and_repeats():
    q: Prefetcher[int] = Prefetcher(max_items=4)
    q.put(1)
    q.put_end()
    assert list(q) == [1]
    assert q.get(timeout_s=0) is END
    with pytest.raises(ValueError, match="after put_end"):
        q.put(2)


def test_get_timeout_says_what_happened():
    q: Prefetcher[int] = Prefetcher(max_items=1, name="cams")
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout, match=r"cams: no item within 0.1 s"):
        q.get(timeout_s=0.1)
    assert 0.09 <= time.monotonic() - t0 < 2.0
    assert q.stats().consumer_wait_s >= 0.09


def test_put_timeout_when_nobody_consumes():
    q: Prefetcher[int] = Prefetcher(max_items=1, name="ds")
    q.put(1)
    with pytest.raises(WaitTimeout, match=r"ds: no room within 0.05 s \(depth 1/1"):
        q.put(2, timeout_s=0.05)


def _wait_until_blocked(thread: threading.Thread, timeout_s: float = 30.0) -> None:
    """Poll until ``thread`` waits (its top frame is a ``wait``: a lock, condition or the
    queue's wake-ups), so what follows happens while it is blocked, not before."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        if frame is not None and frame.f_code.co_name == "wait":
            return
        time.sleep(0.005)
    raise AssertionError(f"{thread.name} never blocked within {timeout_s} s")


def test_close_wakes_a_blocked_consumer_and_later_calls_raise():
    q: Prefetcher[int] = Prefetcher(max_items=1, name="pf")
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            q.get(timeout_s=10)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=consume, name="test-consumer")
    t.start()
    _wait_until_blocked(t)
    q.close()
    t.join(1)
    assert not t.is_alive()
    assert isinstance(errors[0], ClosedError)
    q.close()  # idempotent
    with pytest.raises(ClosedError, match="pf: put"):
        q.put(1)
    with pytest.raises(ClosedError, match="pf: get"):
        q.get(timeout_s=0)


def test_bad_arguments_are_refused_with_the_value():
    with pytest.raises(ValueError, match="policy must be 'block' or 'latest', got 'newest'"):
        Prefetcher(max_items=1, policy="newest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_items must be >= 1, got 0"):
        Prefetcher(max_items=0)
    q: Prefetcher[int] = Prefetcher(max_items=2, max_bytes=10)
    with pytest.raises(ValueError, match="item of 11 bytes cannot fit max_bytes=10"):
        q.put(1, nbytes=11)


def test_drain_returns_held_items_for_release():
    with Prefetcher(max_items=3) as q:
        q.put(1)
        q.put(2)
        assert q.drain() == [1, 2]
        assert q.stats().depth == 0
    assert q.closed


@settings(max_examples=20, deadline=None)
@given(
    producers=st.integers(1, 3),
    close_after=st.integers(0, 30),
    max_items=st.integers(1, 3),
    policy=st.sampled_from(["block", "latest"]),
)
def test_close_from_the_consumer_ends_every_producer_promptly(
    producers, close_after, max_items, policy
):
    q: Prefetcher[int] = Prefetcher(max_items=max_items, max_bytes=64, policy=policy)
    closed: list[int] = []
    violations: list[str] = []

    def produce() -> None:
        i = 0
        try:
            while True:  # a live source: only close() ends it
                q.put(i, nbytes=16, timeout_s=5)
                s = q.stats()
                if s.depth > max_items or s.bytes_held > 64:
                    violations.append(str(s))
                i += 1
        except ClosedError:
            closed.append(i)

    threads = [threading.Thread(target=produce, name=f"test-p{i}") for i in range(producers)]
    for t in threads:
        t.start()
    for _ in range(close_after):
        q.get(timeout_s=5)
    q.close()
    for t in threads:
        t.join(2)
    assert not any(t.is_alive() for t in threads)
    assert len(closed) == producers and violations == []
