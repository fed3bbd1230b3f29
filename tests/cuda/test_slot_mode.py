"""The one slot-memory rule both loaders use: the plan's mode, an asked one, or host."""

from __future__ import annotations

import pytest
from _datasets import DictDS

from edgeload import DataLoader, PlatformError, ProfileError
from edgeload.cuda.host_engine import HostEngine
from edgeload.cuda.slot_mode import slot_memory_mode
from edgeload.cuda.status import cuda_status

PLAN = ("mapped", "I/O-coherent Jetson")


def test_auto_takes_the_plan_and_without_a_device_stays_on_the_host():
    assert slot_memory_mode("auto", *PLAN) == PLAN
    mode, reason = slot_memory_mode("auto", *PLAN, to_device=False)
    assert mode == "host" and "no device=" in reason


def test_an_asked_mode_says_so_and_keeps_the_plan_in_view():
    assert slot_memory_mode("host", *PLAN) == (
        "host",
        "set by arguments (the plan: I/O-coherent Jetson)",
    )
    with HostEngine() as engine:
        mode, reason = slot_memory_mode("pinned", *PLAN, engine=engine)
    assert (mode, reason) == (
        "pinned",
        "set by arguments, on the host engine (the plan: I/O-coherent Jetson)",
    )


def test_slots_shared_with_processes_stay_on_the_host():
    assert slot_memory_mode("auto", *PLAN, shared=True) == (
        "host",
        "process workers write shared host slots",
    )
    assert slot_memory_mode("host", *PLAN, shared=True)[0] == "host"


def test_a_bad_or_unavailable_mode_is_refused_with_what_to_use():
    with pytest.raises(ProfileError, match="'nvmm'"):
        slot_memory_mode("nvmm", *PLAN)
    if cuda_status().usable:
        pytest.skip("this machine has CUDA: every mode may be available")
    with pytest.raises(PlatformError, match=r"memory_mode='pinned'.*'host'"):
        slot_memory_mode("pinned", *PLAN)


def test_the_dataloader_reports_the_same_rule():
    with DataLoader(DictDS(), batch_size=4, num_workers=2, worker_kind="thread",
                    memory_mode="host") as loader:  # fmt: skip
        stats = loader.stats()
        plan_reason = loader.plan.reasons["memory_mode"]
    assert (stats["memory_mode"], stats["memory_mode_reason"]) == slot_memory_mode(
        "host", loader.plan.memory_mode, plan_reason
    )
    assert stats["memory_mode_reason"].startswith("set by arguments (the plan: ")
    with HostEngine() as engine, DataLoader(
        DictDS(), batch_size=4, num_workers=2, worker_kind="process",
        multiprocessing_context="fork", memory_mode="pinned", engine=engine,
    ) as loader:  # fmt: skip
        stats = loader.stats()
    assert stats["memory_mode"] == "host"
    assert stats["memory_mode_reason"] == "process workers write shared host slots"
