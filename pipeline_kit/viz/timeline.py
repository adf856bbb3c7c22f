"""Gantt timelines of pipeline schedules, simulated or measured, drawn alike.

One row per rank, time across.  Forward / backward / input-grad / weight-grad boxes have distinct
colour-blind-safe colours (Okabe-Ito), weight-grad boxes hatched white as well, carry their microbatch
number where it fits, and get lighter with the model chunk; idle time is hatched grey -- the bubble you
can see.  Optional: P2P arrows, the warmup / steady / cooldown phase of each rank, and the first backward
(the M043 question).

What is drawn is a :class:`~pipeline_kit.trace.Timeline` (the trace module: built from a simulator
result or a ``pipeline_kit.run`` trace, with the same per-op fields, so a simulated and a real run
stack on one time axis).  This module only draws; idle gaps, phases and the first backward are
read by the trace module.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from matplotlib import patheffects
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import PathPatch
from matplotlib.path import Path
from matplotlib.textpath import TextPath

from ..trace import Timeline
from .figure import KitAxes, KitFigure

__all__ = ["IDLE_COLOR", "KIND_COLORS", "KIND_NAMES", "PHASE_COLORS", "Timeline", "count_boxes", "draw_comparison",
           "draw_timeline"]  # Timeline: re-exported from the trace module

# Okabe & Ito (2008), distinguishable with every common colour-vision deficiency.
KIND_COLORS = {"F": "#0072B2", "B": "#D55E00", "I": "#E69F00", "W": "#009E73"}
KIND_NAMES = {"F": "forward", "B": "backward", "I": "input-grad", "W": "weight-grad"}
IDLE_COLOR = "#BBBBBB"
PHASE_COLORS = {"warmup": "#56B4E9", "steady": "#CC79A7", "cooldown": "#F0E442"}
# Weight-grad boxes are hatched as well as green: I and W tell apart in any colour vision, in grey print and in
# the pale colours of a later chunk.
KIND_HATCH = {"W": "///"}
HATCH_COLOR = "#FFFFFF"
BOX_GAP_PT = 1.2  # white between neighbouring boxes, at least (points)
LABEL_PT = (5.0, 9.0)  # a box's number is 5 to 9 pt tall: "auto" leaves it out of a box too narrow for 5 pt


@functools.lru_cache(maxsize=512)
def _number_marker(n: int) -> tuple[Path, float]:
    """The digits of ``n`` as a marker path, centred, and their width over their height; built once per number
    (text layout is slow)."""
    path = TextPath((0, 0), str(n), size=1.0)
    (x0, y0), (x1, y1) = path.get_extents().get_points()
    return Path(path.vertices - [(x0 + x1) / 2, (y0 + y1) / 2], path.codes), (x1 - x0) / (y1 - y0)


@functools.lru_cache(maxsize=16)
def _widest(digits: int) -> float:
    """The width over the height of the widest number of so many digits: boxes of one width are numbered alike,
    whichever their numbers."""
    return float(max(_number_marker(int(str(d) * digits))[1] for d in range(1, 10)))


def _shade(color: str, chunk: int, chunks: int) -> tuple[float, float, float]:
    """Lighter for later chunks: chunk 0 full colour, the last chunk mixed halfway with white."""
    if chunks <= 1:
        return to_rgb(color)
    t = 0.55 * chunk / (chunks - 1)
    r, g, b = to_rgb(color)
    return (r + (1 - r) * t, g + (1 - g) * t, b + (1 - b) * t)


def _box(x0: float, x1: float, y: float, h: float = 0.8):
    return [(x0, y - h / 2), (x1, y - h / 2), (x1, y + h / 2), (x0, y + h / 2)]


def _boxes_path(ops: list[dict], y_of: dict[int, int], h: float = 0.8, gap: float = 0.0) -> Path:
    """All ``ops`` as closed rectangles in one path (5 vertices each), inset so neighbours separate: by 4% of
    a box's width, or ``gap`` (in time units) if that is more, up to half the box."""
    verts, codes = [], []
    for o in ops:
        x0, x1, y = o["start"], o["end"], y_of[o["rank"]]
        inset = min(max(0.04 * (x1 - x0), gap), 0.5 * (x1 - x0))
        x0, x1 = x0 + inset / 2, x1 - inset / 2
        verts += [(x0, y - h / 2), (x1, y - h / 2), (x1, y + h / 2), (x0, y + h / 2), (x0, y - h / 2)]
        codes += [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY]
    if not verts:  # nothing (yet): an empty path, e.g. in an animation's first frames
        return Path(np.empty((0, 2)))
    return Path(verts, codes)


def count_boxes(patch) -> int:
    """How many op boxes a drawn ``ops:*`` patch holds (for tests and tools)."""
    codes = patch.get_path().codes
    return 0 if codes is None else int(np.count_nonzero(codes == Path.MOVETO))


def _number_boxes(ax, boxes: list[tuple[dict, str, tuple | None]], y_of: dict[int, int], pt_per_unit: float,
                  row_pt: float, every: bool) -> None:
    """Number the boxes: ``boxes`` holds (op, ink, halo), halo the face colour of a hatched box (its number
    gets a rim of that colour, clear of the hatching) or None.

    The numbers of a timeline share one size, the largest that :data:`LABEL_PT`, 0.42 of a row and its
    narrower boxes allow (the first quartile of what each box allows); a box narrower than that gets its
    number smaller, and none when even 5 pt digits would not fit (a margin of 1 pt), unless ``every``:
    then its number shrinks to as little as 3 pt.

    The numbers are text-shaped markers, one line artist per (number, ink, size): the renderer rasterises
    each glyph once and stamps it, so hundreds of labels cost milliseconds where one Text artist each
    would take most of a second.
    """
    low, high = LABEL_PT
    top = min(high, 0.42 * row_pt)
    fits = []  # (op, ink, halo, the largest size its box allows)
    for o, ink, halo in boxes:
        width = (o["end"] - o["start"]) * pt_per_unit
        room = min(0.96 * width, width - BOX_GAP_PT) - 1.0  # the box as drawn, less a margin
        fit = min(top, room / _widest(len(str(o["microbatch"]))))
        if fit >= low or every:
            fits.append((o, ink, halo, fit))
    if not fits:
        return
    common = sorted(f[3] for f in fits)[len(fits) // 4]
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for o, ink, halo, fit in fits:
        size = math.floor(max(3.0, min(common, fit)) * 2) / 2  # a few sizes, so a few artists
        groups.setdefault((o["microbatch"], ink, size, halo), []).append(((o["start"] + o["end"]) / 2,
                                                                         y_of[o["rank"]]))
    for (mb, ink, size, halo), points in sorted(groups.items(), key=lambda g: g[0][:3]):
        path, aspect = _number_marker(mb)
        xs, ys = zip(*points)
        # a marker's larger side is its markersize: the height for one digit, the width for wider numbers
        ms = size * max(1.0, aspect)
        if halo is not None:
            ax.plot(xs, ys, ls="none", marker=path, markersize=ms, color=halo, markeredgecolor=halo,
                    markeredgewidth=2.0, zorder=2.9, gid="label-halo")
        ax.plot(xs, ys, ls="none", marker=path, markersize=ms, color=ink, markeredgewidth=0, zorder=3,
                gid=f"labels:{mb}")


def draw_timeline(tl: Timeline, ax=None, arrows: bool = False, phases: bool = False, first_backward: bool = False,
                  labels: bool | str = True, legend: bool = True, tight: bool = True, xmax: float | None = None):
    """Draw ``tl`` on ``ax`` (a new figure if None) and return the axes.

    Axes made here are :class:`~pipeline_kit.viz.figure.KitAxes`: as a notebook cell's last value
    they show as the picture, whatever the backend.  An ``ax`` passed in is returned as it came.

    ``labels``: True puts the microbatch number in every box, shrunk to fit; ``"auto"`` only in boxes wide
    enough for it at a readable size (:data:`LABEL_PT`).  ``xmax``: the right end of the time axis (a
    figure of several timelines shares one), by default just past the makespan.  ``tight=False`` skips
    ``tight_layout`` (the caller fixed the margins): together with ``"auto"`` they keep the explorer's
    redraw of a 1,000-box timeline under a fifth of a second.

    Artists carry gids so tests and tools can find them: ``ops:F`` (one polygon per forward),
    ``ops:B`` / ``ops:I`` / ``ops:W``, ``idle`` (the bubble), ``arrows``, ``phase:<rank>``.
    """
    if ax is None:
        fig = KitFigure(figsize=(max(6.0, min(16.0, 0.25 * len(tl.ops) / max(tl.pp, 1) + 3)), 0.55 * tl.pp + 1.6))
        ax = fig.subplots(subplot_kw={"axes_class": KitAxes})
    y_of = {r: tl.pp - 1 - r for r in range(tl.pp)}  # rank 0 on top
    xmax = xmax or (tl.makespan * 1.01 if tl.makespan else 1)
    ytop = tl.pp - 0.4 + (0.25 if phases else 0) + (0.45 if first_backward else 0)
    boxes: list[tuple[dict, str, tuple | None]] = []  # (op, ink, halo): the boxes to number
    pos, (w_in, h_in) = ax.get_position(), ax.figure.get_size_inches()
    pt_per_unit = 72 * w_in * pos.width / xmax  # (an estimate: a later tight_layout widens the axes a little)
    gap = BOX_GAP_PT / pt_per_unit
    # The bubble: each rank's row is hatched from 0 to the makespan and the opaque op boxes cover
    # the busy parts, so every idle gap shows hatched (one hatched shape per rank, not per gap,
    # keeps a fragmented timeline fast to draw).
    rows = [_box(0.0, tl.makespan, y_of[r], 0.8) for r in range(tl.pp)]
    coll = PolyCollection(rows, facecolors="white", edgecolors=IDLE_COLOR, hatch="////", linewidths=0.0, zorder=0.5)
    coll.set_gid("idle")
    ax.add_collection(coll)
    for kind in "FBIW":
        for chunk in range(tl.chunks):
            ops = [o for o in tl.ops if o["kind"] == kind and o["chunk"] == chunk]
            if not ops:
                continue
            # One compound path per (kind, chunk): a thousand boxes draw as fast as one.
            face = _shade(KIND_COLORS[kind], chunk, tl.chunks)
            patch = PathPatch(_boxes_path(ops, y_of, gap=gap), facecolor=face, edgecolor="none",
                              hatch=KIND_HATCH.get(kind), hatchcolor=HATCH_COLOR, gid=f"ops:{kind}:{chunk}")
            ax.add_artist(patch)  # not add_patch: its per-segment autoscaling is slow, limits are set below
            if labels:
                ink = "black" if 0.299 * face[0] + 0.587 * face[1] + 0.114 * face[2] > 0.55 else "white"
                halo = face if kind in KIND_HATCH else None
                boxes += [(o, ink, halo) for o in ops]
    if boxes:
        _number_boxes(ax, boxes, y_of, pt_per_unit, row_pt=72 * h_in * pos.height / (ytop + 0.6), every=labels is True)
    if arrows and tl.transfers:
        # One arrow per message, from inside the sender's row into the receiver's, over the boxes and phase bars,
        # with a white edge so it reads on any box colour.
        halo = [patheffects.withStroke(linewidth=2.8, foreground="white")]
        for t in tl.transfers:
            y0, y1 = y_of[t["src"]], y_of[t["dst"]]
            down = 1 if y1 < y0 else -1
            ax.annotate("", xy=(t["end"], y1 + 0.3 * down), xytext=(t["start"], y0 - 0.3 * down), zorder=4,
                        arrowprops={"arrowstyle": "-|>", "mutation_scale": 12, "color": "#1A1A1A", "lw": 1.3,
                                    "shrinkA": 0, "shrinkB": 0, "path_effects": halo}, gid="arrows")
    for w in tl.waits:
        ax.plot([w["start"], w["end"]], [y_of[w["rank"]] - 0.45] * 2, color="#000000", lw=1.2, solid_capstyle="butt",
                gid="wait")
    if phases:
        for r in range(tl.pp):
            for name, (a, b) in tl.phases(r).items():
                ax.add_patch(_phase_patch(a, b, y_of[r] + 0.47, name, r))
    if first_backward:
        fb = tl.first_backward()
        if fb is not None:
            ax.axvline(fb["start"], color="#000000", lw=1.0, ls="--", gid="first-backward")
            ax.annotate(f"first backward: {fb['op']} on rank {fb['rank']} at {fb['start']:.4g}",
                        xy=(fb["start"], y_of[fb["rank"]]), xytext=(fb["start"] + 0.02 * tl.makespan, tl.pp - 0.25),
                        fontsize=8, va="bottom", bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0},
                        arrowprops={"arrowstyle": "->", "lw": 0.8}, gid="first-backward-label")
    ax.set_xlim(0, xmax)
    ax.set_ylim(-0.6, ytop)
    ax.set_yticks([y_of[r] for r in range(tl.pp)], [_rank_label(tl, r) for r in range(tl.pp)])
    ax.set_xlabel(tl.unit)
    if tl.title:
        ax.set_title(tl.title, fontsize=10)
    if legend:
        from matplotlib.patches import Patch
        handles = [Patch(facecolor=KIND_COLORS[k], hatch=KIND_HATCH.get(k), hatchcolor=HATCH_COLOR, edgecolor="none",
                         label=KIND_NAMES[k]) for k in "FBIW" if any(o["kind"] == k for o in tl.ops)]
        handles.append(Patch(facecolor="white", edgecolor=IDLE_COLOR, hatch="////", label="idle (bubble)"))
        if tl.chunks > 1:
            handles.append(Patch(facecolor=_shade(KIND_COLORS["F"], tl.chunks - 1, tl.chunks),
                                 label=_chunk_legend(tl)))
        if phases:
            handles += [Patch(facecolor=c, label=name) for name, c in PHASE_COLORS.items()]
        if tl.waits:
            from matplotlib.lines import Line2D
            handles.append(Line2D([], [], color="black", lw=1.2, label="waiting for P2P"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    if tight:
        ax.figure.tight_layout()
    return ax


def _rank_label(tl: Timeline, rank: int) -> str:
    """``rank 0`` or, with several chunks, ``rank 0`` over the stages it holds (``stages 0, 7`` in a V)."""
    stages = tl.stages_of(rank)
    if tl.chunks == 1 or not stages:
        return f"rank {rank}"
    return f"rank {rank}\nstage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))}"


def _chunk_legend(tl: Timeline) -> str:
    if tl.placement == "v":
        return f"lighter: chunk 1 = stage {2 * tl.pp - 1}-rank (V)"
    return "lighter: chunk 1" if tl.chunks == 2 else f"lighter: chunks 1..{tl.chunks - 1}"


def _phase_patch(a: float, b: float, y: float, name: str, rank: int):
    from matplotlib.patches import Rectangle
    patch = Rectangle((a, y - 0.06), max(b - a, 0.0), 0.12, facecolor=PHASE_COLORS[name], edgecolor="none",
                      gid=f"phase:{rank}:{name}")
    return patch


def draw_comparison(top: Timeline, bottom: Timeline, **kwargs) -> Figure:
    """Two timelines one above the other on a shared time axis (e.g. simulated vs measured).

    The bottom one gets a legend of its own when its colours differ from the top's (other op kinds or
    chunks, e.g. 1F1B above ZB-V); otherwise the top's legend serves both.
    """
    pp = max(top.pp, bottom.pp)
    fig = KitFigure(figsize=(12, 1.1 * pp + 2.4))
    axes = fig.subplots(2, 1, sharex=True)

    def colours(tl: Timeline):
        return {o["kind"] for o in tl.ops}, tl.chunks

    right = max(top.makespan, bottom.makespan) * 1.01
    draw_timeline(top, axes[0], legend=True, xmax=right, **kwargs)
    draw_timeline(bottom, axes[1], legend=colours(bottom) != colours(top), xmax=right, **kwargs)
    axes[0].set_xlabel("")
    fig.tight_layout()
    return fig
