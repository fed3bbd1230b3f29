"""WorkerPool with real threads and processes: results, failures, death, hangs, Ctrl-C."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

from edgeload.errors import ClosedError, EdgeloadError, WorkerError, WorkerTimeout
from edgeload.pipeline.slots import SlotPool, attach
from edgeload.pipeline.workers import WorkerPool, choose_start_method, current_worker

KINDS = ["thread", "process"]


def square(x: int) -> tuple[int, int, str]:
    info = current_worker()
    assert info is not None
    return x * x, info.id, info.kind


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("cannot travel")
        self.lock = threading.Lock()


def raise_unpicklable(x: int) -> int:
    raise Unpicklable()


def sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def thread_env(_: object) -> str:
    return os.environ.get("OMP_NUM_THREADS", "")


def fill_slot(ref) -> int:
    attach(ref)[...] = ref.slot_index + 100
    return ref.slot_index


def bad_init(info) -> None:
    raise RuntimeError(f"cannot open shard {info.id}")


def keep_state(info) -> None:
    info.state["offset"] = 1000 * (info.id + 1)


def use_state(x: int) -> int:
    info = current_worker()
    assert info is not None
    return info.state["offset"] + x


@pytest.mark.parametrize("kind", KINDS)
def test_results_come_back_tagged_with_their_index(kind):
    with WorkerPool(square, kind=kind, num_workers=2, name="sq") as pool:
        indices = [pool.submit(i) for i in range(8)]
        results = [pool.get(timeout_s=10) for _ in indices]
        assert pool.pending == 0
    by_index = {r.index: r for r in results}
    assert sorted(by_index) == indices
    assert all(by_index[i].value[0] == i * i for i in indices)
    assert {r.worker for r in results} == {0, 1}  # round-robin
    assert all(r.value[1] == r.worker and r.value[2] == kind for r in results)
    assert (pool.start_method is None) == (kind == "thread")


@pytest.mark.parametrize("kind", KINDS)
def test_init_fn_state_and_explicit_worker(kind):
    with WorkerPool(use_state, kind=kind, num_workers=2, init_fn=keep_state) as pool:
        pool.submit(5, worker=1)
        result = pool.get(timeout_s=10)
    assert (result.worker, result.value) == (1, 2005)


@pytest.mark.parametrize("kind", KINDS)
def test_worker_exception_reaches_the_consumer_with_cause_traceback_and_index(kind):
    with WorkerPool(fail_on_three, kind=kind, num_workers=2) as pool:
        for i in range(5):
            pool.submit(i)
        values, error = [], None
        for _ in range(5):
            try:
                values.append(pool.get(timeout_s=10).value)
            except WorkerError as exc:
                error = exc
    assert sorted(values) == [0, 1, 2, 4]  # nothing else swallowed
    assert error is not None and error.index == 3
    assert isinstance(error.__cause__, ValueError) and str(error.__cause__) == "bad item 3"
    assert "fail_on_three" in (error.traceback_text or "")
    assert "raise ValueError" in (error.traceback_text or "")
    assert "fail_on_three on item 3 raised ValueError: bad item 3" in str(error)


def test_an_unpicklable_exception_still_arrives_as_text():
    with WorkerPool(raise_unpicklable, kind="process") as pool:
        pool.submit(0)
        with pytest.raises(WorkerError, match="Unpicklable: cannot travel") as info:
            pool.get(timeout_s=10)
    assert info.value.__cause__ is None
    assert "raise Unpicklable()" in (info.value.traceback_text or "")


@pytest.mark.parametrize("kind", KINDS)
def test_init_fn_failure_is_reported(kind):
    with WorkerPool(square, kind=kind, init_fn=bad_init, timeout_s=10) as pool:
        pool.submit(1)
        with pytest.raises(WorkerError, match="init_fn raised RuntimeError: cannot open shard 0"):
            pool.get()
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match=r"ended|exited") as info:  # not a hang
            pool.submit(2)
            pool.get()
        assert time.monotonic() - t0 < 30.0  # ~ms expected; the bound only rules out a hang
        assert info.value.index == 0  # never run: lost with the worker


def test_sigkill_of_a_worker_process_is_reported_with_pid_and_signal_at_once():
    with WorkerPool(sleep_for, kind="process", num_workers=2, timeout_s=60) as pool:
        pool.submit(0.0, worker=1)
        pool.get()  # worker 1 is up
        victim = pool.pids[1]
        index = pool.submit(30.0, worker=1)
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match=rf"pid {victim}\) was killed by SIGKILL") as info:
            pool.get()
        assert time.monotonic() - t0 < 6.0  # noticed at once, not by the 60 s timeout
        assert info.value.index == index and info.value.worker == f"pid {victim}"
        with pytest.raises(WorkerError, match="SIGKILL"):  # the pool stays broken
            pool.submit(1.0, worker=0)


def test_a_killed_worker_leaves_no_shared_memory_once_the_pool_closes():
    prefix = f"edgeload-{os.getpid()}-"
    slots = SlotPool((4096,), np.uint8, count=2, shared=True)
    with WorkerPool(fill_slot, kind="process") as pool:
        pool.submit(slots.acquire(timeout_s=1).ref)
        pool.get(timeout_s=10)  # the worker has the segment mapped
        os.kill(pool.pids[0], signal.SIGKILL)
        with pytest.raises(WorkerError, match="SIGKILL"):  # from submit or get: a race
            pool.submit(slots.acquire(timeout_s=1).ref)
            pool.get(timeout_s=5)
    slots.close()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_hung_worker_makes_get_time_out_with_a_clear_message(kind):
    release = threading.Event()
    fn = release.wait if kind == "thread" else sleep_for
    with WorkerPool(fn, kind=kind, timeout_s=0.3, name="stuck") as pool:
        pool.submit(10.0)
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeout, match=r"stuck: no result within 0.3 s .*may be hung"):
            pool.get()
        assert 0.25 <= time.monotonic() - t0 < 10.0
        release.set()
        pool.close(timeout_s=0.2)


def mark_and_sleep(task: tuple[str, int, float]) -> int:
    directory, index, seconds = task
    open(os.path.join(directory, str(index)), "w").close()
    time.sleep(seconds)
    return index


@pytest.mark.parametrize("kind", KINDS)
def test_close_with_work_pending_is_prompt_and_final(kind, tmp_path):
    pool = WorkerPool(mark_and_sleep, kind=kind, num_workers=2)
    for i in range(8):
        pool.submit((str(tmp_path), i, 1.0))
    pool.get(timeout_s=30)
    pool.close(timeout_s=30.0)
    # Each worker finishes the task in hand and drops the ones queued behind it: of the
    # 8 tasks, at most 2 per worker ever started (all 8 would mean close() ran them).
    assert len(os.listdir(tmp_path)) <= 4
    pool.close()  # idempotent
    with pytest.raises(ClosedError, match="workers: submit"):
        pool.submit(1)
    with pytest.raises(ClosedError, match="workers: get"):
        pool.get()


def test_process_workers_write_shared_slots_in_place():
    slots = SlotPool((64, 64), np.int32, count=4, shared=True)
    pool = WorkerPool(fill_slot, kind="process", num_workers=2)
    with slots, pool:
        acquired = {}
        for _ in range(4):
            slot = slots.acquire(timeout_s=1)
            acquired[pool.submit(slot.ref)] = slot
        views = []
        for _ in range(4):
            result = pool.get(timeout_s=10)
            views.append(slots.lease(acquired[result.index]))
            assert int(views[-1].min()) == int(views[-1].max()) == result.value + 100
        assert len({int(v[0, 0]) for v in views}) == 4


def test_process_workers_cap_library_threads():
    with WorkerPool(thread_env, kind="process", threads_per_worker=2) as pool:
        pool.submit(None)
        assert pool.get(timeout_s=10).value == "2"


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="kind must be 'thread' or 'process', got 'fiber'"):
        WorkerPool(square, kind="fiber")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_workers must be >= 1, got 0"):
        WorkerPool(square, num_workers=0)
    # fork inherits fn (as torch's workers do); a spawned worker must unpickle it
    with pytest.raises(
        ValueError, match=r"spawn process workers need a picklable fn.*kind='thread'"
    ):
        WorkerPool(lambda x: x, kind="process", start_method="spawn")
    with pytest.raises(ValueError, match="start_method must be one of"):
        choose_start_method("teleport")
    assert choose_start_method() in ("fork", "forkserver", "spawn")
    with WorkerPool(square) as pool, pytest.raises(EdgeloadError, match="no task pending"):
        pool.get()


_CTRL_C_SCRIPT = """
import sys, threading, time
import numpy as np
import psutil
from edgeload.pipeline.slots import SlotPool, attach
from edgeload.pipeline.prefetch import Prefetcher
from edgeload.pipeline.workers import WorkerPool

def fill(ref):
    attach(ref)[...] = 1
    time.sleep(0.01)
    return ref.slot_index

if __name__ == "__main__":
    slots = SlotPool((256, 256), np.uint8, count=6, shared=True)
    pool = WorkerPool(fill, kind="process", num_workers=2, name="ctrlc")
    queue = Prefetcher(max_items=2)
    threads = WorkerPool(time.sleep, kind="thread", num_workers=1, name="side")
    threads.submit(0.05)
    print(" ".join(str(p) for p in pool.pids), flush=True)
    held = {}
    CLOSE
    while True:
        while len(held) < 4:
            slot = slots.acquire(timeout_s=5)
            held[pool.submit(slot.ref)] = slot
        result = pool.get(timeout_s=5)
        queue.put(slots.lease(held.pop(result.index)), timeout_s=5)
        batch = queue.get(timeout_s=5)
        if EXIT_NOW:
            sys.exit(0)
"""


def _run_script(tmp_path, *, close: str = "pass", exit_now: str = "False") -> subprocess.Popen:
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(_CTRL_C_SCRIPT).replace("CLOSE", close).replace("EXIT_NOW", exit_now)
    )
    return subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


# Ctrl-C at random moments, under load, is tested in test_interrupts.py.


def test_interpreter_exit_without_close_cleans_up(tmp_path):
    proc = _run_script(tmp_path, exit_now="True")
    assert proc.stdout is not None
    worker_pids = [int(p) for p in proc.stdout.readline().split()]
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert stderr == ""
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"edgeload-{proc.pid}-")]
    assert _gone(worker_pids)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unclosed_pool_is_shut_down_by_garbage_collection(kind):
    pool = WorkerPool(square, kind=kind, num_workers=2)
    pool.submit(2)
    assert pool.get(timeout_s=10).value[0] == 4
    del pool  # the leak check after this test fails if threads or processes survive


# Python 3.12+ warns when forking with threads alive (here: BLAS); asked for explicitly.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_explicit_start_methods_work(start_method):
    with WorkerPool(square, kind="process", start_method=start_method) as pool:
        assert pool.start_method == start_method
        pool.submit(3)
        assert pool.get(timeout_s=20).value == (9, 0, "process")
    assert current_worker() is None


# Held by a thread of this process while a pool forks: each child gets it held by a
# thread it does not have, as a child forked while another thread was inside glibc 2.31's
# dynamic loader gets that loader's lock.
_HELD_AT_FORK = threading.Lock()


@pytest.fixture
def fork_behind_a_held_lock(monkeypatch):
    """Forked workers block on ``_HELD_AT_FORK`` before they run; returns the Event that
    makes the holder let go (later forks then start)."""
    from edgeload.pipeline import _processes

    monkeypatch.setattr(_processes, "FORK_START_TIMEOUT_S", 1.5)
    cap_threads = _processes.limit_library_threads

    def start_behind_the_lock(num_threads: int) -> None:
        with _HELD_AT_FORK:
            cap_threads(num_threads)

    monkeypatch.setattr(_processes, "limit_library_threads", start_behind_the_lock)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _HELD_AT_FORK:
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    yield release
    release.set()
    holder.join(10)


def test_a_forked_worker_stuck_before_it_runs_is_forked_again_with_its_tasks(
    fork_behind_a_held_lock, caplog
):
    with WorkerPool(
        square, kind="process", num_workers=2, start_method="fork", timeout_s=60
    ) as pool:
        stuck = pool.pids
        fork_behind_a_held_lock.set()
        indices = [pool.submit(x) for x in range(6)]
        results = {r.index: r.value[0] for r in (pool.get() for _ in indices)}
        assert results == {i: x * x for i, x in zip(indices, range(6))}
        assert set(pool.pids).isdisjoint(stuck)
    assert not [pid for pid in stuck if psutil.pid_exists(pid)]  # killed and reaped
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned
    for pid in stuck:
        assert any(
            f"(pid {pid}) was forked" in text
            and "stuck on a lock another thread of this process held at the fork" in text
            and "multiprocessing_context='forkserver'" in text
            for text in warned
        ), warned


def test_a_worker_whose_every_fork_is_stuck_is_an_error_not_a_hang(fork_behind_a_held_lock):
    with WorkerPool(square, kind="process", start_method="fork") as pool:
        pool.submit(2)
        with pytest.raises(WorkerError, match=r"as each of its 3 forks was; .*'spawn'") as info:
            pool.get(timeout_s=None)
        pids = pool.pids
    assert info.value.index == 0  # the task it took with it is named
    assert not [pid for pid in pids if psutil.pid_exists(pid)]


def os_threads(_: object) -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_blas_pools_are_capped_before_numpy_loads_in_the_worker(start_method):
    # numpy (imported with edgeload, before fn) sizes its OpenBLAS pool from the
    # environment at start-up: with the cap there, the worker has no extra threads.
    with WorkerPool(os_threads, kind="process", start_method=start_method) as pool:
        pool.submit(None)
        assert pool.get(timeout_s=20).value == 1


def return_lock(_: object) -> object:
    return threading.Lock()


def test_an_unpicklable_result_becomes_a_worker_error():
    with WorkerPool(return_lock, kind="process") as pool:
        pool.submit(None)
        with pytest.raises(WorkerError, match=r"item 0 raised .*lock"):
            pool.get(timeout_s=10)
        pool.submit(None)  # the worker survives it
        with pytest.raises(WorkerError, match="lock"):
            pool.get(timeout_s=10)


# --- full pipes: a worker that stops reading, one that stops writing, both ways full ---

BIG = 4 << 20  # far more than a socket buffer holds (~200 KiB on Linux)


def echo(data: bytes) -> bytes:
    return data


def big_result_then_stop(_: object) -> bytes:
    # Stop this whole process 1 s from now: by then it is blocked writing the result
    # into a pipe the parent is not reading, so it stops half-way through the message.
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGSTOP)).start()
    return b"r" * (8 * BIG)


def test_tasks_and_results_larger_than_the_pipes_do_not_deadlock():
    # Before: the parent blocked writing task 2 while the worker blocked writing
    # result 1, forever. Now sends never block, and waiting reads what has arrived.
    with WorkerPool(echo, kind="process", timeout_s=60) as pool:
        t0 = time.monotonic()
        for i in range(6):
            pool.submit(bytes([i]) * BIG)
        assert time.monotonic() - t0 < 10.0  # ~ms expected: queued, not written
        got = sorted(pool.get().value[:1] for _ in range(6))
    assert got == [bytes([i]) for i in range(6)]


def test_a_worker_that_stops_reading_makes_get_raise_naming_it():
    with WorkerPool(echo, kind="process", timeout_s=60, name="deaf") as pool:
        pool.submit(b"x")
        pool.get()  # up and serving
        victim = pool.pids[0]
        os.kill(victim, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            for _ in range(4):
                pool.submit(b"t" * BIG)  # would block forever on the full pipe before
            assert time.monotonic() - t0 < 10.0
            with pytest.raises(
                WorkerTimeout, match=rf"pid {victim}\); it has not read 1[0-9.]+ MiB"
            ):
                pool.get(timeout_s=1.0)
            assert time.monotonic() - t0 < 15.0
        finally:
            os.kill(victim, signal.SIGCONT)


def _wait_until_stopped(pid: int, *, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, f"worker {pid} never stopped itself"
        time.sleep(0.05)


def test_a_worker_that_stops_half_way_through_a_result_makes_get_raise_naming_it():
    with WorkerPool(big_result_then_stop, kind="process", timeout_s=60, name="mute") as pool:
        pool.submit(None)
        victim = pool.pids[0]
        # The worker stops itself 1 s after it starts the task, mid-write; on a loaded
        # box its start-up alone can take seconds, so wait for the stop, not a guess.
        _wait_until_stopped(victim, within_s=60.0)
        try:
            t0 = time.monotonic()
            with pytest.raises(WorkerTimeout, match=rf"pid {victim}\); it stopped after writing"):
                pool.get(timeout_s=1.0)
            assert time.monotonic() - t0 < 15.0  # recv never blocks on the partial message
        finally:
            os.kill(victim, signal.SIGCONT)


def test_a_message_to_a_gone_worker_leaves_nothing_for_the_collector_to_report():
    # Internal: the process channel itself. A pickled message is a view of a BytesIO; a
    # failed send's traceback kept in a cycle made that BytesIO's close raise BufferError
    # when the collector freed it (Python 3.13, Pi OS Trixie's: the trixie session).
    import gc
    import multiprocessing

    from edgeload.pipeline._processes import Channel

    here, there = multiprocessing.Pipe(duplex=True)
    there.close()
    channel = Channel(here)
    seen: list[BaseException | None] = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(u.exc_value)
    try:
        try:
            channel.put(list(range(1000)))
        except (BrokenPipeError, ConnectionResetError) as exc:
            channel.kept = exc  # type: ignore[attr-defined]  # channel -> exc -> its frame -> channel
        else:
            pytest.fail("a send to a closed pipe did not fail")
        del channel
        gc.collect()
    finally:
        sys.unraisablehook = hook
        here.close()
    assert seen == []
