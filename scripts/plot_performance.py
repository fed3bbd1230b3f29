#!/usr/bin/env python3
"""Draw the plots of ``docs/performance.md`` into ``docs/img/``.

The figures below are copied from the runs that page reports (its tables name the
box and the date; the dated run log is in git history, docs/performance.md before
the rewrite). No benchmark runs here: ``scripts/bench.py AREA --out r.json`` writes
a run's own results. Needs matplotlib: ``python scripts/plot_performance.py [--out DIR]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Live cameras, AMD box, 2026-12-02 10:40-10:56: p99 of the true capture-to-model age
# per round (ms). A pair is the lowest and highest of the rounds where the page gives
# only those.
LIVE_P99 = {
    80: {
        "edgeload StreamLoader": [85, 86, 86],
        "OpenCV latest-frame threads": [111, 112, 112],
        "ultralytics LoadStreams": [110, 112, 118],
        "vidgear CamGear, newest frame": [163, 174],
    },
    10: {
        "edgeload StreamLoader": [63, 63, 65],
        "OpenCV latest-frame threads": [107, 112, 114],
        "ultralytics LoadStreams": [136, 141],
        "vidgear CamGear, newest frame": [103, 162],
    },
}
LIVE_TARGET_MS = {80: 113, 10: 43}
LIVE_FLOOR_MS = 35  # of the true age at the median, before any client has the frame
VIDGEAR_DEFAULTS_P99 = {80: "10,537-10,649 ms", 10: "2,978-2,984 ms"}

# 4 x 720p H.264 -> 640x640, CPU ms per frame by part (perf, cpu-clock, 999 Hz),
# medians of 3 rounds; runs A (20:05) and B (20:27), 2026-12-01, AMD box.
CPU_PARTS = ("H.264 decode (libavcodec)", "resize, frame copies (cv2)",
             "YUV -> BGR (libswscale)", "interpreter, numpy, torch",
             "kernel, libc, other")  # fmt: skip
CPU_720P = {
    "ceiling, run A": (4.92, 1.51, 0.60, 0.035 + 0.001, 0.128 + 0.091 + 0.031),
    "edgeload, run A": (4.62, 1.35, 0.51, 0.170 + 0.029 + 0.034, 0.176 + 0.113 + 0.046),
    "ceiling, run B": (5.20, 1.48, 0.64, 0.040, 0.146 + 0.107 + 0.031),
    "edgeload, run B": (5.34, 1.63, 0.64, 0.226 + 0.035 + 0.014, 0.176 + 0.125 + 0.040),
}

# One StreamLoader, N looping 640x360 files -> 320x320, `every`: the process's own PSS
# (anonymous, slots) in MiB; 2026-12-01 18:06-18:09, AMD box, 2 rounds.
MEMORY_STREAMS = {1: (159.5, 1.5), 4: (181.2, 7.0), 8: (193.5, 16.4),
                  16: (234.6, 32.8), 32: (311.2, 60.9)}  # fmt: skip
MEMORY_BARE_32 = 307.1  # 32 plain cv2.VideoCapture read in turn, no loader


def plot_live(plt: object, out: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)  # type: ignore[attr-defined]
    names = list(LIVE_P99[80])
    for ax, consumer in zip(axes, (80, 10)):
        for y, name in enumerate(names):
            values = LIVE_P99[consumer][name]
            colour = "tab:green" if name.startswith("edgeload") else "tab:grey"
            ax.plot([min(values), max(values)], [y, y], color=colour, lw=6, alpha=0.35)
            ax.plot(values, [y] * len(values), "o", color=colour, ms=5)
        ax.axvline(LIVE_TARGET_MS[consumer], color="tab:red", ls="--", lw=1)
        ax.text(LIVE_TARGET_MS[consumer] + 2, len(names) - 0.6, "target", color="tab:red",
                fontsize=8)  # fmt: skip
        ax.axvspan(0, LIVE_FLOOR_MS, color="tab:blue", alpha=0.08)
        ax.text(2, -0.7, "floor", color="tab:blue", fontsize=8)
        ax.set_xlim(0, 190)
        ax.set_ylim(-1, len(names))
        ax.set_title(f"{consumer} ms consumer (vidgear defaults: {VIDGEAR_DEFAULTS_P99[consumer]})",
                     fontsize=9)  # fmt: skip
        ax.set_xlabel("p99 true age, ms (a dot per round)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(names)), names)
    axes[0].invert_yaxis()
    fig.suptitle("4 RTSP cameras, 960x540 at 30 fps -> 640x640 (2-core x86, no GPU)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    path = out / "perf-live-p99.png"
    fig.savefig(path, dpi=110)
    return path


def plot_cpu(plt: object, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 3.8))  # type: ignore[attr-defined]
    labels = list(CPU_720P)
    colours = ("#8da0cb", "#a6d854", "#e5c494", "#fc8d62", "#b3b3b3")
    left = [0.0] * len(labels)
    for i, (part, colour) in enumerate(zip(CPU_PARTS, colours)):
        widths = [CPU_720P[label][i] for label in labels]
        ax.barh(labels, widths, left=left, color=colour, label=part)
        left = [a + b for a, b in zip(left, widths)]
    for y, total in enumerate(left):
        ax.text(total + 0.05, y, f"{total:.2f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("CPU ms per frame (all threads, FFmpeg's included)")
    ax.set_xlim(0, 9.5)
    ax.set_title("4 x 720p H.264 -> 640x640: the loader against decode and resize alone",
                 fontsize=10)  # fmt: skip
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.45, -0.22), ncol=3)
    fig.tight_layout()
    path = out / "perf-cpu-720p.png"
    fig.savefig(path, dpi=110)
    return path


def plot_memory(plt: object, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))  # type: ignore[attr-defined]
    streams = list(MEMORY_STREAMS)
    anon = [MEMORY_STREAMS[n][0] for n in streams]
    slots = [MEMORY_STREAMS[n][1] for n in streams]
    ax.plot(streams, anon, "o-", color="#8da0cb", label="anonymous (FFmpeg, OpenCV, Python)")
    ax.plot(streams, [a + s for a, s in zip(anon, slots)], "o-", color="tab:green",
            label="anonymous + batch slots")  # fmt: skip
    ax.plot(
        [32], [MEMORY_BARE_32], "s", color="tab:grey", label="32 plain OpenCV captures, no loader"
    )
    for n, a, s in zip(streams, anon, slots):
        ax.annotate(f"{a + s:.0f}", (n, a + s), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)  # fmt: skip
    ax.set_xticks(streams)
    ax.set_xlabel("streams (looping 640x360 files -> 320x320)")
    ax.set_ylabel("process's own PSS, MiB")
    ax.set_ylim(0, 420)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Memory against streams, one StreamLoader (2-core x86)", fontsize=10)
    fig.tight_layout()
    path = out / "perf-memory-streams.png"
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    for draw in (plot_live, plot_cpu, plot_memory):
        print(draw(plt, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
