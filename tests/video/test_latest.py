"""``latest`` means fresh: convert only what ships, and say where a frame's age counts from."""

from __future__ import annotations

import statistics
import time

import pytest
from _media import clip, media_dir

from edgeload.video import StreamLoader, VideoSource

# Internal: the assembler's conversion-on-ship and the reader's capture clock, measured
# without the timing noise of a whole loader.
from edgeload.video._assembler import Assembler, BatchPools
from edgeload.video._mux import Demand
from edgeload.video._reader import CaptureClock, LiveEdge
from edgeload.video.source import FrameInfo


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    return clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=2.0)


def test_a_slow_consumer_gets_frames_converted_for_it_not_for_the_bin(replay):
    # 30 fps cameras, a model taking 100 ms: two of every three frames never ship.
    cams = [VideoSource(replay, realtime=True, loop=True) for _ in range(2)]
    with StreamLoader(cams, size=(64, 64)) as loader:
        for i, _ in enumerate(loader):
            time.sleep(0.1)
            if i == 15:
                break
        streams = loader.stats()["streams"]
    for s in streams:
        assert s["unconverted"] > s["delivered"]  # decoded, dropped before conversion
        # Converting each frame would be ~3x the delivered; allow jitter on a busy box.
        assert s["frames"] <= 1.5 * s["delivered"] + 3, s


def test_every_streams_convert_every_frame(replay):
    with StreamLoader([VideoSource(replay)], size=(64, 64), batch=4) as loader:
        for _ in loader:
            time.sleep(0.01)
        s = loader.stats()["streams"][0]
    assert s["unconverted"] == 0 and s["frames"] == s["delivered"] == 60


def test_age_origins_are_named_and_a_replay_counts_from_its_schedule(replay):
    cams = [VideoSource(replay, realtime=True, loop=True), VideoSource(replay, loop=True)]
    metas = []
    with StreamLoader(cams, size=(64, 64), policy="latest") as loader:
        for i, batch in enumerate(loader):
            metas += [m for m in batch.meta if m is not None and m.stream_id == 0]
            time.sleep(0.05)
            if i == 12:
                break
        stats = loader.stats()
    assert [s["age_from"] for s in stats["streams"]] == ["schedule", "grab"]
    assert stats["frame_age_from"] == ["grab", "schedule"]
    # On the replay's schedule, capture times are exactly seq / fps apart, whatever
    # the box's load did to when each frame was grabbed.
    pairs = [(metas[i], metas[i + 1]) for i in range(len(metas) - 1)]
    pairs = [(a, b) for a, b in pairs if 0 < b.seq - a.seq < 60]
    assert pairs
    for a, b in pairs:
        assert b.captured_at - a.captured_at == pytest.approx((b.seq - a.seq) / 30, abs=1e-6)


def test_capture_clock_anchors_on_the_least_delayed_frame():
    clock = CaptureClock()
    # Frame 0 sat 300 ms in a buffer; frame 1 arrived 33 ms after its capture time.
    assert clock.captured_at(10.300, 0.0) == pytest.approx(10.300)
    assert clock.captured_at(10.333 - 0.267, 33.0) == pytest.approx(10.066)
    assert clock.captured_at(10.400, 66.0) == pytest.approx(10.033 + 0.066, abs=1e-3)
    clock.captured_at(11.0, 5.0)  # timestamps went back: a new anchor
    assert clock.captured_at(11.1, 105.0) == pytest.approx(11.1)
    frozen = CaptureClock()
    frozen.captured_at(1.0, 0.0)
    assert frozen.captured_at(2.0, 0.0) == 2.0  # no timestamps: counts from the grab
    assert not frozen.timestamps and clock.timestamps


def test_live_edge_drops_the_burst_then_stays_live():
    edge = LiveEdge(interval_s=1 / 30, start=0.0)
    assert edge.is_backlog(0.050, 0.100)  # the first grab's wait may be the decoder starting
    assert edge.is_backlog(0.100, 0.102)  # came back at once: buffered
    assert edge.is_backlog(0.102, 0.104)
    assert not edge.is_backlog(0.104, 0.130)  # waited for the network: live
    assert not edge.is_backlog(0.130, 0.131)  # and live from then on
    stuck = LiveEdge(interval_s=1 / 30, start=0.0)
    assert stuck.is_backlog(0.0, 0.001)
    assert not stuck.is_backlog(3.5, 3.501)  # never waits: gives up after MAX_CATCH_UP_S


def test_demand_opens_one_frame_interval_and_a_margin_before_the_consumer_is_due():
    pending = [0]
    demand = Demand(lambda: pending[0])
    assert demand.wants(0.0, 1 / 30)  # no cadence yet: convert
    demand.taken(1.0)
    demand.asked(1.08)
    demand.taken(1.10)  # the model takes 80 ms
    assert not demand.wants(1.11, 1 / 30)
    # Due at 1.18: the window opens one interval and a margin before (3 ms and twice
    # the reader's delivery time, at most half an interval).
    assert demand.wants(1.145, 1 / 30)
    assert not demand.wants(1.14, 1 / 30)
    assert demand.wants(1.14, 1 / 30, 0.002)  # a slower reader starts earlier
    assert not demand.wants(1.129, 1 / 30, 1.0)  # but never a whole interval earlier
    assert demand.wants(1.131, 1 / 30, 1.0)
    pending[0] = 1
    assert not demand.wants(1.17, 1 / 30)  # a batch already waits for the consumer
    assert demand.wants(1.19, 1 / 30)  # the consumer is late: keep that batch fresh
    demand.asked(1.20)
    assert demand.wants(1.201, 1 / 30)  # the consumer waits: everything ships


def test_latest_streams_beside_every_streams_convert_only_what_ships(replay):
    # A 30 fps camera beside a file, a model taking 150 ms: the camera's frame in each
    # batch is the last one before a newer batch opens; the others never ship.
    cams = [VideoSource(replay, realtime=True, loop=True, policy="latest"),
            VideoSource(replay, loop=True, policy="every")]  # fmt: skip
    with StreamLoader(cams, size=(64, 64)) as loader:
        for i, _ in enumerate(loader):
            time.sleep(0.15)
            if i == 20:
                break
        cam, file = loader.stats()["streams"]
    assert file["unconverted"] == 0
    assert cam["unconverted"] > cam["delivered"], cam  # decoded, dropped before conversion
    # About one per delivered frame once the cadence is learnt (converting each would
    # be 5-6); slack for the first batches and a busy box.
    assert cam["frames"] <= 3 * cam["delivered"] + 3, cam


def test_latest_frames_placed_before_the_consumers_take_wait_for_newer_ones():
    # Two cameras' frames reach the open batch just after the consumer took the one
    # before: shipped as they are, they would be a whole model step old on delivery.
    pools = BatchPools(lambda n: (n, 2, 2, 3), count=4, memory_mode="host", engine=None)
    asm = Assembler(pools, batch=None, deadline_s=0.05, active=lambda: [0, 1])
    asm.set_streams([0, 1])
    for sid in (0, 1):
        asm.rules.latest.add(sid)

    def place(sid, seq):
        batch, at = asm.claim(sid, latest=True)
        asm.commit(batch, at, FrameInfo(seq=seq, pts_ms=0.0, captured_at=time.monotonic()))

    try:
        place(0, 1)
        place(1, 1)
        asm.taken()
        assert asm.seal_next() is None  # both stale: not full
        time.sleep(0.1)
        assert asm.seal_next() is None  # and the deadline waits for a newer frame
        asm.deadline_s = 60.0
        place(0, 2)
        assert asm.seal_next() is None  # stream 1's frame is still the stale one
        place(1, 2)
        sealed = asm.seal_next()
        assert sealed is not None and list(sealed.seq) == [2, 2] and sealed.valid.all()
        sealed.pool.release(sealed.slot)
        place(0, 3)
        place(1, 3)
        asm.taken()
        place(0, 4)
        assert asm.seal_next() is None
        asm.asked()  # the consumer waits: stream 1's stale frame ships, no wait for a newer
        sealed = asm.seal_next()
        assert sealed is not None and list(sealed.seq) == [4, 3]
        sealed.pool.release(sealed.slot)
    finally:
        asm.release_open()
        pools.close()


@pytest.mark.parametrize("batch", [None, 4])
def test_a_latest_frame_beside_every_streams_is_fresh_when_the_consumer_takes_it(replay, batch):
    # A 30 fps camera beside a looping file, and a model taking 150 ms: the file fills
    # batches ahead into the prefetch queue.  A camera frame placed when its batch was
    # sealed waited there with it, ~1 s at the median (docs/performance.md); copied in
    # as the batch is handed over, it is at most a frame interval or two old (~50 ms).
    cams = [VideoSource(replay, realtime=True, loop=True, policy="latest"),
            VideoSource(replay, loop=True, policy="every")]  # fmt: skip
    ages, file_seqs, batches = [], [], 0
    with StreamLoader(cams, size=(64, 64), batch=batch) as loader:
        for i, got in enumerate(loader):
            batches += 1
            for m in got.meta:
                if m is not None and m.stream_id == 0 and i >= 5:  # cadence learnt
                    ages.append(m.age_ms)
                elif m is not None and m.stream_id == 1:
                    file_seqs.append(m.seq)
            time.sleep(0.15)
            if i == 24:
                break
        cam, file = loader.stats()["streams"]
    assert cam["age_from"] == "schedule"  # the replay's own clock: its true age
    assert len(ages) >= 10, ages  # the camera is in most batches (~every one)
    assert statistics.median(ages) < 500, ages  # 10x the ~50 ms expected
    # The file's frames all arrive, in order, none dropped to make room.
    assert file_seqs == list(range(file_seqs[0], file_seqs[0] + len(file_seqs)))
    assert file["drops"] == 0 and file["unconverted"] == 0
