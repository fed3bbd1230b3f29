#!/usr/bin/env python3
"""A detector on live cameras and files: StreamLoader -> model -> NMS -> boxes on each camera.

    python examples/detect.py rtsp://cam1/stream rtsp://cam2/stream --seconds 30 \\
        --imgsz 320 --model yolov8n.pt --out sheet.png

Every source is letterboxed into one ``imgsz`` x ``imgsz`` float RGB NCHW batch (the
input a YOLOv8 takes as it is), the model runs on the batch, NMS keeps the boxes, and
each frame's ``FrameMeta.to_source`` maps them back to that camera's own pixels.  At
the end it prints each stream's processed frames per second and capture-to-result age
(from edgeload's ``captured_at``, which cannot see the camera's encode and the network)
and saves the last annotated frame of every stream as a contact sheet (``--out x.png``)
or every batch's sheet as a video (``--out x.mp4``).

Models (``--model``):

- ``yolov8n.yaml`` (or any Ultralytics model YAML): built by the ``ultralytics``
  package offline, with random weights - it runs at a real detector's cost, its boxes
  mean nothing.
- ``PATH.pt``: a trained Ultralytics detection checkpoint.
- ``square``: :class:`BrightSquares`, a small torch module in this file that finds
  bright rectangles; it needs nothing but torch, so the example runs anywhere.

NMS: Ultralytics' own when torchvision's ``nms`` operator loads (a Jetson with NVIDIA's
torchvision, a Pi with PyPI's wheels); otherwise (PyPI's x86_64 torchvision on a CPU-only
torch, or no ultralytics) :func:`non_max_suppression` here, in plain torch.

``--print-boxes`` prints every box in source pixels:
``box stream=S seq=N x1 y1 x2 y2 conf=C class=K``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a clone without installing

from edgeload.video import FrameMeta, StreamLoader  # noqa: E402

STRIDE = 32  # YOLOv8's largest stride: its input sides are multiples of it
# Ultralytics' letterbox grey: the padding a YOLO model was trained with.
PAD_GREY = 114
# Candidates kept per image before NMS, by score (Ultralytics' max_nms is 30000; a
# random-weight model scores nearly every anchor, and the IoU matrix is this squared).
MAX_CANDIDATES = 3000
# Offset per class, pixels: boxes of different classes never overlap in class-aware NMS.
CLASS_OFFSET = 7680


# --- the stand-in detector --------------------------------------------------------------


class BrightSquares(torch.nn.Module):
    """Finds bright axis-aligned rectangles; output shaped as YOLOv8's head.

    A pixel is bright when all its channels exceed ``threshold``.  For every bright
    pixel the run of bright pixels through it, left/right along its row and up/down
    along its column, gives the box of the rectangle it lies in (exact for a filled
    rectangle).  One anchor every ``stride`` pixels, as a detector's grid.

    Input ``(B, 3, H, W)`` float in [0, 1]; output ``(B, 5, A)``: centre x, centre y,
    width, height (input pixels) and one class score (1 on a bright pixel, else 0).
    """

    def __init__(self, *, threshold: float = 0.75, stride: int = 4) -> None:
        super().__init__()
        self.threshold = threshold
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bright = x.min(dim=1).values > self.threshold  # (B, H, W)
        left, right = _runs(bright, 2)
        up, down = _runs(bright, 1)
        h, w = bright.shape[1:]
        ys = torch.arange(h, device=x.device).view(1, h, 1)
        xs = torch.arange(w, device=x.device).view(1, 1, w)
        # Pixel i covers [i, i + 1): the run from a to b spans [a, b + 1).
        x1, x2 = xs - left + 1, xs + right
        y1, y2 = ys - up + 1, ys + down
        s, o = self.stride, self.stride // 2
        out = torch.stack(
            [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, bright.to(x.dtype)], dim=1
        )[:, :, o::s, o::s]
        return out.flatten(2).to(x.dtype)


def _runs(mask: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pixel, how many consecutive True pixels end at it (counting back along
    ``dim``) and start at it (counting forward); 0 where ``mask`` is False."""

    def back(m: torch.Tensor) -> torch.Tensor:
        n = m.shape[dim]
        shape = [1] * m.dim()
        shape[dim] = n
        idx = torch.arange(n, device=m.device).view(shape).expand_as(m)
        last_false = torch.where(m, torch.full_like(idx, -1), idx).cummax(dim).values
        return (idx - last_false) * m

    return back(mask), back(mask.flip(dim)).flip(dim)


# --- NMS -----------------------------------------------------------------------------


def torchvision_nms_loads() -> bool:
    """Whether torchvision's compiled ``nms`` runs with this torch (not so for PyPI's
    x86_64 torchvision, built against CUDA torch, beside a CPU-only torch)."""
    try:
        import torchvision

        torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
    except Exception:  # an ImportError, or "operator torchvision::nms does not exist"
        return False
    return True


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every xyxy box in ``a`` (N, 4) with every one in ``b`` (M, 4): (N, M)."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(2)
    return inter / (area_a[:, None] + area_b[None, :] - inter).clamp(min=1e-9)


def non_max_suppression(
    prediction: torch.Tensor, *, conf: float = 0.25, iou: float = 0.45, max_det: int = 300
) -> list[torch.Tensor]:
    """YOLOv8 head output ``(B, 4 + classes, A)`` (xywh, class scores) to one
    ``(N, 6)`` tensor per image: x1, y1, x2, y2, score, class; greedy class-aware NMS
    in plain torch (the same rule as ``torchvision.ops.nms``)."""
    out = []
    for p in prediction.transpose(1, 2):  # (A, 4 + classes)
        score, cls = p[:, 4:].max(1)
        keep = score > conf
        p, score, cls = p[keep], score[keep], cls[keep]
        if score.numel() > MAX_CANDIDATES:
            top = score.topk(MAX_CANDIDATES).indices
            p, score, cls = p[top], score[top], cls[top]
        xy, wh = p[:, :2], p[:, 2:4] / 2
        boxes = torch.cat([xy - wh, xy + wh], 1)
        order = score.argsort(descending=True)
        boxes, score, cls = boxes[order], score[order], cls[order]
        shifted = boxes + cls[:, None].to(boxes.dtype) * CLASS_OFFSET
        overlaps = (box_iou(shifted, shifted) > iou).cpu().numpy()
        alive = np.ones(len(boxes), bool)
        kept = []
        for i in range(len(boxes)):  # highest score first: it removes what it overlaps
            if alive[i]:
                kept.append(i)
                if len(kept) == max_det:
                    break
                alive[overlaps[i]] = False
        idx = torch.as_tensor(kept, dtype=torch.long, device=boxes.device)
        out.append(torch.cat([boxes[idx], score[idx, None], cls[idx, None].to(boxes.dtype)], 1))
    return out


def pick_nms(conf: float, iou: float) -> tuple[Callable[[torch.Tensor], list[torch.Tensor]], str]:
    """Ultralytics' NMS where torchvision's operator loads, else the torch one here."""
    if torchvision_nms_loads():
        try:
            from ultralytics.utils.nms import non_max_suppression as ultralytics_nms
        except ImportError:
            pass
        else:
            return (lambda p: ultralytics_nms(p, conf, iou)), "ultralytics (torchvision)"
    return (lambda p: non_max_suppression(p, conf=conf, iou=iou)), "torch (examples/detect.py)"


# --- the model ---------------------------------------------------------------------------


def load_model(name: str) -> tuple[torch.nn.Module, dict[int, str]]:
    """The model's ``nn.Module`` in eval mode and its class names."""
    if name == "square":
        return BrightSquares().eval(), {0: "square"}
    try:
        from ultralytics import YOLO
    except ImportError as exc:
        raise SystemExit(
            f"--model {name}: needs the ultralytics package (pip install ultralytics), "
            f"which failed to import: {exc}; or use --model square"
        ) from exc
    if name.endswith(".pt") and not Path(name).exists():
        raise SystemExit(f"--model {name}: no such file; give a trained .pt, a model YAML "
                         "(yolov8n.yaml builds offline with random weights) or square")  # fmt: skip
    yolo = YOLO(name)
    try:
        # What Ultralytics' own predictor runs: convolutions and batch norms fused, and
        # the memory format that is fastest here (channels-last on x86 CPUs).
        from ultralytics.nn.autobackend import AutoBackend
    except ImportError:  # an older Ultralytics: the plain network
        return yolo.model.float().eval(), dict(yolo.names)
    net = AutoBackend(yolo.model, device=torch.device("cpu"), fuse=True, verbose=False)
    return net.eval(), dict(yolo.names)


def forward(model: torch.nn.Module, frames: torch.Tensor) -> torch.Tensor:
    """The head's decoded output ``(B, 4 + classes, A)`` (a YOLO in eval mode returns it
    first of a tuple)."""
    out = model(frames)
    return out[0] if isinstance(out, (tuple, list)) else out


# --- the loader --------------------------------------------------------------------------


def open_loader(sources: Sequence[str], imgsz: int) -> StreamLoader:
    """Float RGB NCHW batches, one place per stream, letterboxed as Ultralytics does:
    ``imgsz`` on the long side, each side a multiple of the stride (the rectangle for
    files of one aspect, else the square)."""
    return StreamLoader(list(sources), size=imgsz, stride=STRIDE, layout="NCHW",
                        color="rgb", resize="letterbox", dtype=torch.float32)  # fmt: skip


# --- drawing -------------------------------------------------------------------------------


def source_picture(frame: torch.Tensor, meta: FrameMeta) -> np.ndarray:
    """The frame the model saw, cut out of its letterbox and scaled to the source size
    (BGR uint8): the picture the source-pixel boxes are drawn on.  The loader hands
    over the resized frame only, so this is the model's view at the camera's size."""
    import cv2

    (sx, sy), (left, top), (w, h) = meta.scale, meta.pad, meta.source_size
    pw, ph = max(1, round(w * sx)), max(1, round(h * sy))
    rgb = frame[:, top : top + ph, left : left + pw].permute(1, 2, 0)
    if rgb.is_floating_point():
        rgb = rgb.mul(255).clamp_(0, 255)
    picture = np.ascontiguousarray(rgb.to(torch.uint8).cpu().numpy()[:, :, ::-1])
    return cv2.resize(picture, (w, h), interpolation=cv2.INTER_LINEAR)


def annotate(
    picture: np.ndarray, boxes: np.ndarray, names: dict[int, str], label: str
) -> np.ndarray:
    import cv2

    for x1, y1, x2, y2, score, cls in boxes:
        p1, p2 = (int(x1), int(y1)), (int(x2), int(y2))
        cv2.rectangle(picture, p1, p2, (0, 255, 0), 2)
        text = f"{names.get(int(cls), int(cls))} {score:.2f}"
        cv2.putText(picture, text, (p1[0], max(12, p1[1] - 4)), cv2.FONT_HERSHEY_SIMPLEX,
                    0.5, (0, 255, 0), 1)  # fmt: skip
    cv2.putText(picture, label, (8, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.7, (0, 0, 255), 2)
    return picture


def contact_sheet(pictures: Sequence[np.ndarray], *, tile_w: int = 480) -> np.ndarray:
    """Pictures side by side, two to a row, each scaled to ``tile_w`` wide."""
    import cv2

    tiles = [cv2.resize(p, (tile_w, max(1, p.shape[0] * tile_w // p.shape[1]))) for p in pictures]
    tile_h = max(t.shape[0] for t in tiles)
    cols = min(2, len(tiles))
    rows = (len(tiles) + cols - 1) // cols
    sheet = np.full((rows * tile_h, cols * tile_w, 3), PAD_GREY, np.uint8)
    for k, t in enumerate(tiles):
        r, c = divmod(k, cols)
        sheet[r * tile_h : r * tile_h + t.shape[0], c * tile_w : (c + 1) * tile_w] = t
    return sheet


# --- the loop ---------------------------------------------------------------------------


class StreamTally:
    """Per stream: frames processed and capture-to-result ages."""

    def __init__(self) -> None:
        self.frames = 0
        self.ages_ms: list[float] = []
        self.first: float | None = None
        self.last: float | None = None

    def add(self, now: float, captured_at: float) -> None:
        self.frames += 1
        self.ages_ms.append((now - captured_at) * 1000)
        self.first = now if self.first is None else self.first
        self.last = now

    def fps(self) -> float:
        if self.first is None or self.last is None or self.frames < 2:
            return 0.0
        return (self.frames - 1) / max(1e-9, self.last - self.first)

    def age(self, q: float) -> float:
        return float(np.percentile(self.ages_ms, q)) if self.ages_ms else float("nan")


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    model, names = load_model(args.model)
    nms, nms_name = pick_nms(args.conf, args.iou)
    loader = open_loader(args.sources, args.imgsz)
    if not args.threads:  # the plan's share of the cores for the model
        torch.set_num_threads(max(1, loader.plan.threads.torch))
    print(f"model {args.model}, NMS {nms_name}, {len(args.sources)} sources at "
          f"{loader.size[0]}x{loader.size[1]}, torch threads {torch.get_num_threads()}", flush=True)  # fmt: skip
    tallies: dict[int, StreamTally] = {}
    last: dict[int, tuple[np.ndarray, str]] = {}  # stream -> its last annotated frame
    writer = None
    video = args.out is not None and Path(args.out).suffix.lower() in (".mp4", ".avi", ".mkv")
    started = time.monotonic()
    with loader, torch.inference_mode():
        for batch in loader:
            dets = nms(forward(model, batch.frames))
            now = time.monotonic()
            for place, meta in enumerate(batch.meta):
                if meta is None:
                    continue
                boxes = dets[place].detach()
                src = torch.cat([meta.to_source(boxes[:, :4]), boxes[:, 4:]], 1).cpu().numpy()
                tally = tallies.setdefault(meta.stream_id, StreamTally())
                tally.add(now, meta.captured_at)
                if args.print_boxes:
                    for x1, y1, x2, y2, score, cls in src:
                        print(f"box stream={meta.stream_id} seq={meta.seq} {x1:.1f} {y1:.1f} "
                              f"{x2:.1f} {y2:.1f} conf={score:.3f} class={int(cls)}")  # fmt: skip
                if args.out:
                    label = f"cam {meta.stream_id}: {tally.fps():.1f} fps, {len(src)} boxes"
                    picture = source_picture(batch.frames[place], meta)
                    last[meta.stream_id] = (annotate(picture, src, names, label), label)
            if video and last:
                writer = _write_video(writer, args.out, [last[k][0] for k in sorted(last)])
            if now - started >= args.seconds:
                break
    if writer is not None:
        writer[0].release()
    for sid in sorted(tallies):
        t = tallies[sid]
        print(f"stream {sid}: {t.frames} frames, {t.fps():.1f} fps, capture-to-result age "
              f"p50 {t.age(50):.0f} ms p99 {t.age(99):.0f} ms", flush=True)  # fmt: skip
    if not tallies:
        print("no frames came in; check the sources", file=sys.stderr)
        return 1
    if args.out and not video:
        import cv2

        cv2.imwrite(args.out, contact_sheet([last[k][0] for k in sorted(last)]))
        print(f"saved {args.out}")
    elif video:
        print(f"saved {args.out}")
    return 0


def _write_video(writer: Any, path: str, pictures: list[np.ndarray]) -> Any:
    """Append one sheet to the video (opened on the first, at that sheet's size: later
    sheets, with more cameras in, are scaled to it)."""
    import cv2

    sheet = contact_sheet(pictures)
    if writer is None:
        fourcc = cv2.VideoWriter_fourcc(*("mp4v" if path.lower().endswith(".mp4") else "MJPG"))
        writer = (cv2.VideoWriter(path, fourcc, 10.0, (sheet.shape[1], sheet.shape[0])),
                  (sheet.shape[1], sheet.shape[0]))  # fmt: skip
    out, size = writer
    out.write(cv2.resize(sheet, size) if (sheet.shape[1], sheet.shape[0]) != size else sheet)
    return writer


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="files, RTSP/HTTP URLs or camera indices")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to run")
    parser.add_argument("--imgsz", type=int, default=320, help="model input, long side")
    parser.add_argument("--model", default="yolov8n.yaml",
                        help="an Ultralytics model YAML or .pt, or 'square' (torch only)")  # fmt: skip
    parser.add_argument("--conf", type=float, default=0.25, help="score threshold")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: the plan's)")
    parser.add_argument("--out", help="contact sheet (.png/.jpg) or video (.mp4/.avi)")
    parser.add_argument("--print-boxes", action="store_true", help="print every box")
    args = parser.parse_args(argv)
    if args.imgsz < 32 or args.imgsz % 32:
        parser.error(f"--imgsz must be a multiple of 32 (a YOLO's stride), got {args.imgsz}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
