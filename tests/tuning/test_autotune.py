"""Deploy-time auto-tune: the search, the written profile, the command and its errors.

The video and dataset runs use the real loaders on tiny clips and a tiny dataset with
short trials; the search itself is checked on a known, deterministic objective.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _media import clip, media_dir
from hypothesis import example, given
from hypothesis import strategies as st

from edgeload import ProfileError, cli, plan_for, probe
from edgeload.platform import load_profile

# Internal: the TOML writer (round-tripped over arbitrary tables), the report table and
# the Measurement that builds a finished sweep's result without running one.
from edgeload.tuning._profile_file import render_toml
from edgeload.tuning._report import format_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # the package's own dependency below 3.11
    import tomli as tomllib
from edgeload.cli.autotune import parse_memory
from edgeload.tuning.tune import (
    Knob,
    Trial,
    TuneResult,
    VideoWorkload,
    autotune,
    coordinate_search,
    grid_size,
    pick_winner,
    write_profile,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"
SHORT = ["--trial-seconds", "0.3", "--warmup-seconds", "0.1"]


@pytest.fixture(scope="module")
def small_clip(tmp_path_factory):
    return clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)


@pytest.fixture
def config_home(tmp_path):
    """The private user config dir conftest's _no_tuned_profile points XDG_CONFIG_HOME at."""
    return tmp_path / "xdg" / "edgeload"


# --- the search on a known objective ---------------------------------------------------

KNOBS = [
    Knob("worker_kind", ("thread", "process"), ordered=False),
    Knob("num_workers", (1, 2, 3, 4, 6, 8, 12, 16)),
    Knob("thread_budget", tuple(range(1, 9))),
    Knob("prefetch_slots", (2, 3, 4, 6, 8, 12, 16, 24, 32)),
    Knob("memory_mode", ("host", "pinned", "mapped"), ordered=False),
]
START = {"worker_kind": "thread", "num_workers": 2, "thread_budget": 2, "prefetch_slots": 4,
         "memory_mode": "host"}  # fmt: skip


def throughput(config):
    """A loader-like objective with one best point: processes pay off, 8 of them best,
    5 threads, 12 slots, pinned memory; each step toward it gains >= 22%."""
    best_workers = 8 if config["worker_kind"] == "process" else 3
    workers = KNOBS[1].values
    distance = (
        abs(workers.index(config["num_workers"]) - workers.index(best_workers))
        + abs(config["thread_budget"] - 5)
        + abs(KNOBS[3].values.index(config["prefetch_slots"]) - 5)
        + (0 if config["memory_mode"] == "pinned" else 1)
    )
    kind_gain = 1.6 if config["worker_kind"] == "process" else 1.0
    return 1000.0 * kind_gain * math.exp(-0.2 * distance)


def test_search_reaches_the_optimum_in_far_fewer_trials_than_the_grid():
    calls = []

    def score(config):
        calls.append(dict(config))
        return throughput(config)

    found = coordinate_search(KNOBS, START, score, min_gain=0.05)
    assert found == {"worker_kind": "process", "num_workers": 8, "thread_budget": 5,
                     "prefetch_slots": 12, "memory_mode": "pinned"}  # fmt: skip
    assert len(calls) == len({tuple(sorted(c.items())) for c in calls})  # no repeats
    # 43 distinct trials here, against 3456 configurations in the full grid.
    assert len(calls) <= 50 < grid_size(KNOBS) / 50


def test_search_respects_a_ceiling_and_stops_at_its_edge():
    def score(config):  # each process worker costs memory; 6 of them fit
        over = config["worker_kind"] == "process" and config["num_workers"] > 6
        return None if over else throughput(config)

    found = coordinate_search(KNOBS, START, score, min_gain=0.05)
    assert found["worker_kind"] == "process"
    assert found["num_workers"] == 6
    assert found["thread_budget"] == 5 and found["prefetch_slots"] == 12


def test_search_steps_over_values_that_run_identically():
    # The loader caps workers at 4, so 6..16 all run as 4; the best (12 here, by value)
    # is unreachable, but the search must not stop at the plateau below a real gain.
    def capped(config):
        return {**config, "num_workers": min(config["num_workers"], 4)}

    def score(config):
        return 100.0 * config["thread_budget"] * min(config["num_workers"], 4)

    def identity(config):
        return tuple(sorted(capped(config).items()))

    knobs = [Knob("num_workers", (1, 2, 3, 4, 6, 8)), Knob("thread_budget", (1, 2, 3))]
    seen = []
    found = coordinate_search(knobs, {"num_workers": 6, "thread_budget": 1},
                              lambda c: seen.append(c) or score(c), identity=identity)  # fmt: skip
    assert found["thread_budget"] == 3
    assert min(found["num_workers"], 4) == 4
    assert len({identity(c) for c in seen}) == len(seen)


def test_winner_within_noise_of_the_fastest_is_the_one_using_less_memory():
    # (index, score, peak bytes)
    assert pick_winner([(0, 100.0, 500), (1, 103.0, 900)], min_gain=0.05) == (0, True)
    assert pick_winner([(0, 100.0, 500), (1, 130.0, 900)], min_gain=0.05) == (1, False)
    assert pick_winner([], min_gain=0.05) is None


# --- the written profile ---------------------------------------------------------------

scalars = st.one_of(
    st.text(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)


@given(st.dictionaries(st.text(min_size=1), scalars, max_size=8))
@example({"0\n": ""})  # a key ending in a newline once went out bare
def test_toml_writer_round_trips_through_tomllib(table):
    text = render_toml({"tuned": {"model": "x"}, "profile": table}, comment="a\nb")
    assert tomllib.loads(text) == {"tuned": {"model": "x"}, "profile": table}


def _result(config):
    from edgeload.tuning._workloads import Measurement

    m = Measurement(100, 1.0, 100.0, 1.0, 2.0, 200 << 20, 90.0, 120 << 20)
    return TuneResult("test", "throughput", 1 << 30, [Trial(0, config, "ok", m, 100.0)],
                      winner=0, reason="only one")  # fmt: skip


def test_profile_tuned_for_another_device_is_ignored_with_one_warning(tmp_path, caplog):
    orin = probe(str(FIXTURES / "jetson-orin-nano"))
    path = write_profile(_result({"num_workers": 3}), platform=orin, path=tmp_path / "p.toml")
    stamp = tomllib.loads(path.read_text())["tuned"]
    assert stamp["model"] == orin.model and stamp["l4t_release"] == orin.l4t_release
    assert load_profile(orin, tuned=path).num_workers == 3

    here = probe()
    with caplog.at_level(logging.WARNING, logger="edgeload"):
        profile = load_profile(here, tuned=path)
    assert "tuned:" not in profile.source
    warnings = [r for r in caplog.records if "ignoring tuned profile" in r.getMessage()]
    assert len(warnings) == 1 and orin.model in warnings[0].getMessage()


def test_memory_sizes_and_percentages():
    assert parse_memory("512M", usable_bytes=0) == 512 << 20
    assert parse_memory("1.5GiB", usable_bytes=0) == 3 << 29
    assert parse_memory("50%", usable_bytes=1000) == 500
    with pytest.raises(ValueError, match="--max-memory 'lots'"):
        parse_memory("lots", usable_bytes=1000)
    with pytest.raises(ValueError, match="percentage"):
        parse_memory("150%", usable_bytes=1000)


# --- real runs -------------------------------------------------------------------------


def test_video_autotune_writes_a_profile_that_changes_the_next_plan(
    small_clip, config_home, capsys
):
    here = probe()
    untuned = plan_for(streams=2, frame=(64, 48), platform=here)
    assert "tuned:" not in untuned.profile_source

    rc = cli.main(["autotune", "--video", str(small_clip), str(small_clip), "--size", "64x48",
                   *SHORT, "--budget-seconds", "15", "--max-trials", "5"])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "autotune [" in err  # the progress line
    assert "winner: trial" in out and "*" in out
    written = config_home / "profile.toml"
    data = tomllib.loads(written.read_text())
    assert data["tuned"]["model"] == here.model and data["tuned"]["version"]
    assert "profile" not in data and "dataset" not in data  # for video loaders only
    assert data["video"]["prefetch_min_bytes"] == data["video"]["prefetch_max_bytes"]
    assert "batch_size" not in data["video"]  # only written with --tune-batch

    tuned = plan_for(streams=2, frame=(64, 48), platform=here)
    assert tuned.profile_source.endswith(f"tuned:{written}")
    # The untuned budget is a fraction of RAM; the tuned one is the measured slot count.
    assert tuned.prefetch_bytes == data["video"]["prefetch_max_bytes"]
    assert tuned.prefetch_bytes != untuned.prefetch_bytes
    assert tuned.slot_count * tuned.slot_bytes == tuned.prefetch_bytes
    assert cli.main(["probe", "--streams", "2", "--frame", "64x48"]) == 0
    assert f"tuned:{written}" in capsys.readouterr().out  # `edgeload probe` names the source


def test_latency_objective_through_the_library(small_clip, config_home):
    result = autotune(VideoWorkload([str(small_clip)], size=(64, 48)), objective="latency",
                      trial_seconds=0.3, warmup_seconds=0.1, budget_seconds=10, max_trials=3)  # fmt: skip
    searched = [t for t in result.trials if t.recheck_of is None]
    assert 1 <= len(searched) <= 3 and result.best is not None
    for t in result.trials:  # a recheck repeats an earlier search trial's configuration
        assert t.recheck_of is None or t.config == result.trials[t.recheck_of].config
    m = result.best.measurement
    assert m is not None and 0 < m.latency_p50_ms <= m.latency_p99_ms
    assert result.best.score == pytest.approx(1000.0 / m.latency_p99_ms)
    assert m.peak_pss_bytes >= m.peak_own_bytes > 0 and m.items_per_s > 0
    assert not (config_home / "profile.toml").exists()  # the library call writes nothing


DATASET_MODULE = """
import numpy as np
from torch.utils.data import Dataset

class Squares(Dataset):
    def __len__(self):
        return 256
    def __getitem__(self, i):
        return np.full((16, 16), i, dtype=np.float32)

def make():
    return Squares()
"""


def test_dataset_autotune_from_a_factory(tmp_path, config_home, monkeypatch, capsys):
    (tmp_path / "tinydata.py").write_text(DATASET_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out_path = tmp_path / "tuned.toml"
    rc = cli.main(["autotune", "--dataset", "tinydata:make", "--batch-size", "16", *SHORT,
                   "--budget-seconds", "12", "--max-trials", "3", "--output", str(out_path),
                   "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 0, err
    report = json.loads(out)
    assert report["profile_path"] == str(out_path)
    assert report["trials"][0]["items_per_s"] > 0
    settings = tomllib.loads(out_path.read_text())["dataset"]
    assert {"worker_kind", "num_workers", "thread_budget", "prefetch_min_bytes"} <= set(settings)
    assert not (config_home / "profile.toml").exists()  # --output went elsewhere


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--video", "/no/such/clip.mp4"], "/no/such/clip.mp4"),
        (["--video", "{text}"], "not-a-video.mp4"),
        (["--dataset", "no_such_module_xyz:make"], "cannot import module 'no_such_module_xyz'"),
        (["--dataset", "json:no_such_factory"], "has no callable 'no_such_factory'"),
        (["--dataset", "json"], "expected module:factory"),
        (["--video", "{clip}", "--max-memory", "1M"], "below what one batch needs"),
        (["--video", "{clip}", "--max-memory", "lots"], "--max-memory 'lots'"),
    ],
)
def test_bad_input_is_one_line_and_runs_no_trial(
    args, message, small_clip, tmp_path, config_home, capsys
):
    text = tmp_path / "not-a-video.mp4"
    text.write_text("this is not a video\n")
    args = [a.format(clip=small_clip, text=text) for a in args]
    rc = cli.main(["autotune", *args, *SHORT, "--budget-seconds", "5"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "trial 0" not in err and out == ""
    assert not config_home.exists()


def test_ctrl_c_keeps_the_trials_and_writes_nothing(small_clip, tmp_path, sigint_reaches_children):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    env.pop("EDGELOAD_PROFILE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeload", "autotune", "--video", str(small_clip),
         "--size", "64x48", "--trial-seconds", "1", "--warmup-seconds", "0.1",
         "--budget-seconds", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        for line in proc.stderr:  # wait until trial 1 has started: trial 0 is done
            if "trial 1:" in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130
    assert "interrupted" in out and "nothing written" in out
    assert " 0 " in out.splitlines()[1] or "*0" in out.splitlines()[1]  # trial 0 is kept
    assert not (tmp_path / "xdg" / "edgeload" / "profile.toml").exists()


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["autotune", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--video", "--dataset", "--max-memory", "--budget-seconds", "--objective",
                 "--output", "--system", "--json", "--plot", "--write-partial"):  # fmt: skip
        assert flag in out


def _two_trials():
    from edgeload.tuning._workloads import Measurement

    slow = Measurement(100, 1.0, 100.0, 1.0, 2.0, 200 << 20, 90.0, 120 << 20)
    fast = Measurement(150, 1.0, 150.0, 1.0, 2.0, 260 << 20, 95.0, 180 << 20)
    return TuneResult("test", "throughput", 1 << 30,
                      [Trial(0, {"num_workers": 1}, "ok", slow, 100.0),
                       Trial(1, {"num_workers": 2}, "ok", fast, 150.0)],
                      winner=1, reason="faster")  # fmt: skip


def test_plot_is_a_png_of_every_trial(tmp_path):
    pytest.importorskip("matplotlib")
    # In a fresh interpreter, as `edgeload autotune --plot` runs: matplotlib's FreeType
    # once crashed at import in a test worker that had loaded GStreamer, OpenCV and
    # torch's libraries through many earlier tests.
    code = (
        "import sys; sys.path[:0] = sys.argv[2:]\n"
        "from test_autotune import _two_trials\n"
        "from edgeload.tuning._report import save_plot\n"
        "print(save_plot(_two_trials(), sys.argv[1]))\n"
    )
    target = tmp_path / "plots" / "trials.png"
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run(
        [sys.executable, "-c", code, str(target), here, str(Path(here).parent),
         str(Path(here).parents[1])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size > 5000


def test_plot_without_matplotlib_names_the_extra(tmp_path, monkeypatch, capsys, small_clip):
    from edgeload.tuning._report import save_plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an absent package does
    with pytest.raises(ImportError, match=r"edgeload\[plot\]"):
        save_plot(_two_trials(), tmp_path / "t.png")
    rc = cli.main(["autotune", "--video", str(small_clip), "--plot", str(tmp_path / "t.png")])
    assert rc == 2  # refused before any trial
    err = capsys.readouterr().err
    assert "edgeload[plot]" in err and "trial 0" not in err


def test_profile_write_replaces_whole_files_and_names_an_unwritable_place(tmp_path):
    here = probe()
    target = tmp_path / "cfg" / "profile.toml"
    write_profile(_result({"num_workers": 2}), platform=here, path=target)
    write_profile(_result({"num_workers": 4}), platform=here, path=target)
    assert tomllib.loads(target.read_text())["profile"] == {"num_workers": 4}
    assert sorted(p.name for p in target.parent.iterdir()) == ["profile.toml"]  # no temp left
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"cannot write the tuned profile to .*a-file"):
        write_profile(_result({"num_workers": 2}), platform=here, path=blocker / "p.toml")


class MemoryHungryWorkload:
    """A real Workload: each worker holds 40 MiB of touched memory and adds throughput."""

    kind = "dataset"
    name = "synthetic: 40 MiB per worker"
    batch = 4
    knob_names = ("num_workers",)
    per_worker = 40 << 20

    def check(self):
        pass

    def plan_args(self, batch):
        return {"item_bytes": 1024, "batch": batch}

    def batch_bytes(self, batch):
        return 1024 * batch

    @contextlib.contextmanager
    def open(self, config):
        workers = config["num_workers"]
        held = np.ones(workers * self.per_worker, np.uint8)  # written, so it is resident

        def batches():
            while True:
                time.sleep(0.004 / workers)
                yield 10, None

        try:
            yield batches()
        finally:
            del held


def test_trials_over_the_memory_ceiling_are_rejected_by_measured_pss():
    from edgeload.measure import tree_own_bytes

    gc.collect()  # memory an earlier test left for the collector must not free mid-run
    # Own memory (anonymous + shared PSS): library pages' PSS falls whenever another
    # process maps the same torch (tens of MiB with a CUDA build), which let 3 workers
    # pass a ceiling on the whole PSS.
    ceiling = tree_own_bytes() + (100 << 20)  # 2 workers (80 MiB) fit, 3 (120 MiB) do not
    # The budget only caps a box so slow the search would not end; it is not the stop.
    result = autotune(MemoryHungryWorkload(), max_memory_bytes=ceiling, trial_seconds=0.2,
                      warmup_seconds=0.05, budget_seconds=120)  # fmt: skip
    by_workers = {t.config["num_workers"]: t for t in result.trials}
    assert by_workers[3].status == "over memory"
    assert by_workers[3].measurement.peak_own_bytes > ceiling
    assert result.best is not None and result.best.config["num_workers"] == 2
    assert result.best.measurement.peak_own_bytes <= ceiling


def _interrupt_before_trial(n):
    def progress(result, config):
        if config is not None and len(result.trials) == n:
            raise KeyboardInterrupt

    return progress


def test_interrupted_run_keeps_its_trials_and_can_still_be_written(tmp_path):
    result = autotune(MemoryHungryWorkload(), trial_seconds=0.2, warmup_seconds=0.05,
                      budget_seconds=20, progress=_interrupt_before_trial(2))  # fmt: skip
    assert result.interrupted and len(result.trials) == 2 and result.winner in (0, 1)
    assert "interrupted" in format_table(result)
    path = result.write(tmp_path / "partial.toml", platform=probe())  # --write-partial
    written = tomllib.loads(path.read_text())["dataset"]
    assert written == dict(result.trials[result.winner].config)


def test_one_measured_trial_tunes_nothing_and_writes_nothing(tmp_path):
    result = autotune(MemoryHungryWorkload(), trial_seconds=0.2, warmup_seconds=0.05,
                      budget_seconds=20, progress=_interrupt_before_trial(1))  # fmt: skip
    assert len(result.trials) == 1 and result.trials[0].score is not None
    assert result.winner is None
    assert "1 configuration(s) measured (trial 0 (the untuned plan)" in result.reason
    assert "nothing was tuned" in result.reason
    with pytest.raises(ProfileError, match="no trial was accepted"):
        result.write(tmp_path / "partial.toml", platform=probe())
    assert not (tmp_path / "partial.toml").exists()


class BatchWorkload(MemoryHungryWorkload):
    """Bigger batches amortise a fixed per-batch cost, up to 16 (then nothing gains)."""

    name = "synthetic: fixed cost per batch"
    batch = 4
    knob_names = ("num_workers", "batch_size")
    per_worker = 0

    @contextlib.contextmanager
    def open(self, config):
        size = config["batch_size"]

        def batches():
            while True:
                time.sleep(0.004)
                yield min(size, 16), None

        yield batches()


def test_batch_size_is_searched_and_written_only_when_asked(tmp_path):
    plain = autotune(BatchWorkload(), trial_seconds=0.15, warmup_seconds=0.05,
                     budget_seconds=20, max_trials=2)  # fmt: skip
    assert {t.config["batch_size"] for t in plain.trials} == {4}
    assert "batch_size" not in plain.settings()

    tuned = autotune(BatchWorkload(), trial_seconds=0.15, warmup_seconds=0.05,
                     budget_seconds=120, tune_batch=True)  # fmt: skip
    assert tuned.best is not None and tuned.best.config["batch_size"] == 16
    assert tuned.settings()["batch_size"] == 16


# --- what the profile says, and when it is written --------------------------------------


def test_a_winner_below_the_minimum_gain_leaves_the_baseline():
    from edgeload.tuning._workloads import Measurement
    from edgeload.tuning.tune import choose_winner

    def result(score_1, peak_1=120 << 20):
        base = Measurement(100, 1.0, 100.0, 1.0, 2.0, 200 << 20, 90.0, 120 << 20)
        other = Measurement(100, 1.0, score_1, 1.0, 2.0, 200 << 20, 90.0, peak_1)
        return TuneResult("test", "throughput", 1 << 30, grid_size=8,
                          trials=[Trial(0, {"num_workers": 1}, "ok", base, 100.0),
                                  Trial(1, {"num_workers": 2}, "ok", other, score_1)])  # fmt: skip

    plus_1 = result(101.0)
    choose_winner(plus_1, 0.05)
    assert plus_1.winner == 0 and "already best" in plus_1.reason
    leaner = result(102.0, peak_1=60 << 20)  # less memory is no gain in the objective
    choose_winner(leaner, 0.05)
    assert leaner.winner == 0
    plus_10 = result(110.0)
    choose_winner(plus_10, 0.05)
    assert plus_10.winner == 1 and "+10% vs the untuned plan" in plus_10.reason
    assert pick_winner([(0, 100.0, 500), (1, 103.0, 400)], min_gain=0.05, baseline=0) == (0, False)


def test_one_trial_in_the_budget_writes_no_profile_and_exits_with_one_line(
    small_clip, tmp_path, config_home, capsys
):
    out_path = tmp_path / "tuned.toml"
    rc = cli.main(["autotune", "--video", str(small_clip), "--size", "64x48", *SHORT,
                   "--budget-seconds", "20", "--max-trials", "1", "--output", str(out_path)])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 2
    assert "*" not in out  # the table shows the one trial, and no winner
    error = [line for line in err.splitlines() if not line.startswith("autotune [")]
    assert len(error) == 1, err
    assert "nothing written: 1 configuration(s) measured (trial 0" in error[0]
    assert "nothing was tuned" in error[0] and "--budget-seconds" in error[0]
    assert not out_path.exists() and not config_home.exists()


def _tuned(kind, config):
    from edgeload.tuning._workloads import Measurement

    m = Measurement(100, 1.0, 100.0, 1.0, 2.0, 200 << 20, 90.0, 120 << 20)
    return TuneResult("test", "throughput", 1 << 30,
                      [Trial(0, {"num_workers": 1}, "ok", m, 100.0), Trial(1, config, "ok", m, 150.0)],
                      winner=1, reason="faster", kind=kind)  # fmt: skip


def test_a_dataset_tune_does_not_change_video_loaders(tmp_path, monkeypatch):
    here = probe()
    path = tmp_path / "profile.toml"
    budget = 3 << 20
    write_profile(_tuned("dataset", {"prefetch_bytes": budget, "num_workers": 3}),
                  platform=here, path=path)  # fmt: skip
    monkeypatch.setenv("EDGELOAD_PROFILE", str(path))
    video = plan_for(streams=2, frame=(64, 48), platform=here)
    assert "tuned:" not in video.profile_source
    assert video.prefetch_bytes != budget
    dataset = plan_for(item_bytes=4096, batch=8, platform=here)
    assert dataset.profile_source.endswith(f"tuned:{path}")
    assert dataset.prefetch_bytes == budget
    # A video tune later goes to its own table; the dataset's stays.
    write_profile(_tuned("video", {"prefetch_bytes": 2 * budget}), platform=here, path=path)
    tables = tomllib.loads(path.read_text())
    assert tables["dataset"]["num_workers"] == 3
    assert tables["video"]["prefetch_max_bytes"] == 2 * budget
    assert plan_for(streams=2, frame=(64, 48), platform=here).prefetch_bytes == 2 * budget
    assert plan_for(item_bytes=4096, batch=8, platform=here).prefetch_bytes == budget


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("def make():\n    return None\n", "make() returned None, not a dataset"),
        ("def make():\n    return 42\n", "make() returned 42 (type int), not a dataset"),
    ],
)
def test_a_factory_that_returns_no_dataset_says_so_in_one_line(
    body, says, tmp_path, config_home, monkeypatch, capsys
):
    (tmp_path / "nodata.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nodata", raising=False)
    rc = cli.main(["autotune", "--dataset", "nodata:make", *SHORT, "--budget-seconds", "5"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert says in err and "Traceback" not in err
    assert not config_home.exists()
