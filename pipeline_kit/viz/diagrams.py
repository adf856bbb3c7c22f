"""Figures sized for a book column, and the diagrams the book needs beyond timelines.

The book's text column is about 680 px wide in a 1280 px window.  A figure saved at 100 dpi shows at
its natural size when it is at most ~6.8 inches wide, so 8-9 pt text stays 11-12 px on screen; a
12-inch figure is shrunk to little more than half and its labels become unreadable.  Everything here
draws at :data:`COLUMN_IN` inches with legends below the axes, not beside them:

* :func:`stacked_timelines` -- one or more timelines on one time axis (the column-width
  counterpart of :func:`~pipeline_kit.viz.draw_comparison`);
* :func:`memory_rows` -- live activations per rank, one row per schedule;
* :func:`call_flow` -- what ``get_forward_backward_func`` returns and how each family loops (M041);
* :func:`p2p_sequence` -- a sequence diagram of blocking send/receive programs (M053), laid out from
  :func:`~pipeline_kit.sim.blocking_p2p.run_blocking`'s semantics;
* :func:`speedup_waterfall` -- a speedup decomposed into factors, from ``decompose_speedup`` (M054);
* :class:`HTMLTable` -- a table that wraps to the column, where a printed table would be cut off
  (:class:`RawHTML` cells, such as links, go in unescaped).
"""

from __future__ import annotations

import html
import re
import textwrap

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from ..sim.blocking_p2p import run_blocking
from .figure import KitFigure
from .memory import draw_memory_panel
from .timeline import KIND_COLORS, Timeline, draw_timeline

COLUMN_IN = 6.7  # inches; at 100 dpi the figure shows unscaled in a 1280 px window


class RawHTML(str):
    """A table cell that is already HTML (a link, say): :class:`HTMLTable` inserts it unescaped."""


def _breakable(code: str) -> str:
    """Escaped code with a line-break opportunity after each ``_ . / , ( = -``: in a narrow column
    ``forward_backward_pipelining_with_interleaving`` breaks between its words and ``interleaved`` stays whole
    (the book's CSS keeps a table's code from breaking anywhere else)."""
    return re.sub(r"([_./,(=-])(?=.)", r"\1<wbr>", code)


class HTMLTable:
    """An HTML table from a header and rows; text between backticks in a cell is set as code.

    Jupyter (and the book) display it through ``_repr_html_``; ``str()`` gives the HTML.
    """

    def __init__(self, header, rows, caption: str | None = None):
        self.header, self.rows, self.caption = list(header), [list(r) for r in rows], caption

    @staticmethod
    def _cell(c, tag: str) -> str:
        if isinstance(c, RawHTML):
            return f"<{tag}>{c}</{tag}>"
        parts = html.escape(str(c)).split("`")
        inner = "".join(f"<code>{_breakable(p)}</code>" if i % 2 else p for i, p in enumerate(parts))
        return f"<{tag}>{inner}</{tag}>"

    def _repr_html_(self) -> str:
        head = "".join(self._cell(h, "th") for h in self.header)
        body = "".join("<tr>" + "".join(self._cell(c, "td") for c in row) + "</tr>" for row in self.rows)
        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return f'<table class="table pk-table">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    __str__ = _repr_html_


def _legend_below(fig: Figure, axes, ncol: int = 4) -> float:
    """Merge the legends of ``axes`` into one under the figure; returns the height (inches) it needs."""
    handles, labels = [], []
    for ax in axes:
        leg = ax.get_legend()
        if leg is None:
            continue
        for h, t in zip(leg.legend_handles, leg.get_texts()):
            if t.get_text() not in labels:
                handles.append(h)
                labels.append(t.get_text())
        leg.remove()
    if not handles:
        return 0.0
    ncol = min(ncol, len(handles))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
               handlelength=1.6, columnspacing=1.2)
    return 0.22 * -(-len(handles) // ncol) + 0.1


def stacked_timelines(timelines: list[Timeline], width: float = COLUMN_IN, row_in: float = 0.34,
                      xmax: float | None = None, **kwargs) -> Figure:
    """Timelines one above the other on a shared time axis, legend below; ``kwargs`` go to draw_timeline.

    The time axis ends at ``xmax``, by default just past the longest makespan: give several figures the
    same ``xmax`` and they compare at a glance.  Boxes are numbered where the number fits at a readable size.
    """
    kwargs.setdefault("labels", "auto")
    extra = 0.25 * bool(kwargs.get("phases")) + 0.4 * bool(kwargs.get("first_backward"))
    heights = [tl.pp * row_in + 0.45 + extra for tl in timelines]
    legend_in = 0.8
    fig = KitFigure(figsize=(width, sum(heights) + 0.45 + legend_in))
    axes = fig.subplots(len(timelines), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    xmax = xmax or max(tl.makespan for tl in timelines) * 1.01
    for i, (tl, ax) in enumerate(zip(timelines, axes)):
        draw_timeline(tl, ax, legend=True, tight=False, xmax=xmax, **kwargs)
        if i < len(timelines) - 1:
            ax.set_xlabel("")
    need = _legend_below(fig, axes, ncol=4)
    fig.tight_layout(rect=(0, need / fig.get_size_inches()[1], 1, 1))
    return fig


def memory_rows(timelines: dict[str, Timeline], width: float = COLUMN_IN, unit_per_chunk: bool = True) -> Figure:
    """Live activations per rank over the step, one row per schedule, ranks' peaks marked.

    With ``unit_per_chunk`` a count is scaled by ``1/chunks``, so rows compare in microbatches of a
    rank's whole share of the model (an interleaved chunk holds ``1/v`` of it).
    """
    names = list(timelines)
    fig = KitFigure(figsize=(width, 1.55 * len(names) + 0.9))
    axes = fig.subplots(len(names), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for ax, name in zip(axes, names):
        tl = timelines[name]
        draw_memory_panel(ax, tl, unit_per_chunk, peak_size=4.5)
        ax.set_title(name, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    axes[-1].set_xlabel(timelines[names[-1]].unit, fontsize=9)
    fig.supylabel("live activations\n(microbatches of a rank's share)" if unit_per_chunk
                  else "live activations (microbatch-chunks)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.35 / fig.get_size_inches()[1], 1, 1))
    return fig


def speedup_waterfall(factors, width: float = COLUMN_IN, title: str | None = None,
                      result_label: str = "what is left") -> Figure:
    """A waterfall of a decomposed speedup: the ideal bar, one falling step per factor, the result.

    ``factors`` is :func:`~pipeline_kit.layout.decompose_speedup`'s list (the first row is "ideal").
    """
    fig = KitFigure(figsize=(width, 3.3))
    ax = fig.subplots()
    names, lefts = [], []
    for i, f in enumerate(factors):
        if i == 0:
            ax.bar(i, f.speedup, color="#0072B2", width=0.6, gid="bar:ideal")
            ax.text(i, f.speedup, f"{f.speedup:.2f}x", ha="center", va="bottom", fontsize=8)
        else:
            before = factors[i - 1].speedup
            ax.bar(i, before - f.speedup, bottom=f.speedup, color="#D55E00", width=0.6, gid=f"bar:{f.name}")
            ax.plot([i - 1 + 0.3, i - 0.3], [before, before], color="#555555", lw=0.8)
            ax.text(i, before, f"x{f.factor:.3f}", ha="center", va="bottom", fontsize=8)
        names.append(f.name)
        lefts.append(f.speedup)
    n = len(factors)
    ax.plot([n - 1 + 0.3, n - 0.3], [lefts[-1], lefts[-1]], color="#555555", lw=0.8)
    ax.bar(n, lefts[-1], color="#009E73", width=0.6, gid="bar:result")
    ax.text(n, lefts[-1], f"{lefts[-1]:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(n + 1), [textwrap.fill(s, 10) for s in names] + [result_label], fontsize=8)
    ax.set_ylabel("speedup over one device", fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_ylim(0, factors[0].speedup * 1.12)
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def _box(ax, x, y, w, h, text, face, fontsize=7.5, ink="black", gid=None, wrap=34, mono=False):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.01,rounding_size=0.015",
                                facecolor=face, edgecolor="#444444", lw=0.7, gid=gid))
    body = "\n".join(textwrap.fill(line, wrap) for line in text.split("\n"))
    ax.text(x, y, body, ha="center", va="center", fontsize=fontsize, color=ink,
            family="monospace" if mono else None)


def _arrow(ax, a, b, text=None, style="-|>", color="#444444", ls="-", lw=0.9, fontsize=7.5, gid=None):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle=style, mutation_scale=9, color=color, lw=lw, linestyle=ls,
                                 shrinkA=0, shrinkB=0, gid=gid))
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2, text, ha="center", va="center", fontsize=fontsize,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6})


def call_flow(families: list[dict], width: float = COLUMN_IN) -> Figure:
    """A call-flow diagram: the selector on top, one column per family with its loop steps.

    ``families``: dicts with ``condition`` (the arrow's label), ``name`` (the function returned) and
    ``steps`` (strings, top to bottom; the book fills in counts computed from the kit's schedules).
    """
    n = len(families)
    rows = max(len(f["steps"]) for f in families)
    height = 1.7 + 0.95 * rows
    fig = KitFigure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, height)
    ax.axis("off")
    top = height - 0.3
    _box(ax, 0.5, top, 0.46, 0.32, "get_forward_backward_func()", "#E8E8E8", fontsize=8.5, mono=True, gid="selector")
    col_w = 1.0 / n
    for i, fam in enumerate(families):
        x = col_w * (i + 0.5)
        y = top - 1.0
        _arrow(ax, (0.5, top - 0.17), (x, y + 0.2), fam["condition"], gid=f"select:{i}")
        _box(ax, x, y, col_w - 0.03, 0.4, fam["name"], "#CFE3F2", fontsize=6.8, mono=True, wrap=80,
             gid=f"family:{i}")
        prev = y - 0.18
        for j, step in enumerate(fam["steps"]):
            sy = y - 0.85 - 0.95 * j
            face = "#FBE3D6" if "finalize" in step or "grad sync" in step else "#FFFFFF"
            _box(ax, x, sy, col_w - 0.04, 0.74, step, face, fontsize=7, wrap=int(38 * col_w / 0.333),
                 gid=f"step:{i}:{j}")
            _arrow(ax, (x, prev), (x, sy + 0.37))
            prev = sy - 0.37
    return fig


def _split(item):
    if isinstance(item, str):
        return "compute", [item]
    parts = [item] if isinstance(item, tuple) and item and isinstance(item[0], str) else list(item)
    return "call", parts


def _sequence_layout(programs):
    """Lamport-style rows for each item a rank reached, the message pairs, and the blocked items."""
    res = run_blocking(programs)
    items = [[_split(it) for it in prog] for prog in programs]
    reached = []
    for r, prog in enumerate(items):
        if r in res.blocked:
            w = res.blocked[r].comm
            idx = next(i for i, (k, parts) in enumerate(prog) if k == "call"
                       and any(p == (w.kind, w.peer, w.name) for p in parts))
            reached.append(idx + 1)
        else:
            reached.append(len(prog))
    # pair the k-th send a->b with the k-th receive b<-a, in posting order (an untagged channel)
    sends, recvs = {}, {}
    for r, prog in enumerate(items):
        for i, (k, parts) in enumerate(prog[:reached[r]]):
            if k == "call":
                for kind, peer, name in parts:
                    if kind == "recv":
                        recvs.setdefault((peer, r), []).append((r, i, name))
                    else:
                        sends.setdefault((r, peer), []).append((r, i, name, kind))
    pairs = []
    for ch, ss in sends.items():
        for s, v in zip(ss, recvs.get(ch, [])):
            pairs.append((s, v))
    row = [[0.0] * reached[r] for r in range(len(items))]
    for _ in range(4 * sum(reached) + 4):  # relax to a fixed point (a DAG once rendezvous pairs are merged)
        changed = False
        for r in range(len(items)):
            for i in range(reached[r]):
                want = row[r][i - 1] + 1 if i else 0.0
                for (sr, si, _, kind), (vr, vi, _) in pairs:
                    if (vr, vi) == (r, i):  # a receive completes once its send was posted
                        want = max(want, row[sr][si])
                    if kind == "send" and (sr, si) == (r, i):  # rendezvous: a send waits for its receive
                        want = max(want, row[vr][vi])
                if want > row[r][i]:
                    row[r][i] = want
                    changed = True
        if not changed:
            break
    return res, items, reached, row, pairs


def p2p_sequence(scenarios: dict[str, list], width: float = COLUMN_IN) -> Figure:
    """Sequence diagrams of P2P programs, one panel per scenario, ranks as lifelines, time downwards.

    A scenario is a list of per-rank programs in :mod:`pipeline_kit.sim.blocking_p2p`'s format.  Each
    item sits one row below the rank's previous item and no earlier than the call it pairs with, so
    arrows show which send met which receive.  A call that never completes is drawn red with a dashed
    arrow to the rank it waits for; the items a blocked rank never reaches are drawn faint.
    """
    laid = {title: _sequence_layout(progs) for title, progs in scenarios.items()}
    depth = max(max((len(p) for p in items), default=1) for _, items, *_ in laid.values())
    depth = max(depth, max(max((max(r, default=0) for r in row), default=0) + 1 for *_, row, _ in laid.values()))
    fig = KitFigure(figsize=(width, 0.26 * depth + 1.3))
    axes = fig.subplots(1, len(scenarios), squeeze=False)[0]
    for ax, (title, (res, items, reached, row, pairs)) in zip(axes, laid.items()):
        n = len(items)
        xs = [0.5 + r for r in range(n)]
        ax.set_xlim(0, n)
        ax.set_ylim(depth + 0.2, -1.4)
        ax.axis("off")
        for r in range(n):
            ax.plot([xs[r], xs[r]], [-0.6, depth], color="#BBBBBB", lw=0.8, zorder=0)
            ax.text(xs[r], -1.0, f"rank {r}", ha="center", va="center", fontsize=8, weight="bold")
        blocked_at = {r: reached[r] - 1 for r in res.blocked}
        for r, prog in enumerate(items):
            y_next = (row[r][-1] + 1) if row[r] else 0.0
            for i, (kind, parts) in enumerate(prog):
                if i < reached[r]:
                    y, faint = row[r][i], False
                else:
                    y, faint = y_next, True
                    y_next += 1
                blocked = blocked_at.get(r) == i
                if kind == "compute":
                    name = parts[0]
                    face = KIND_COLORS.get(name[0], "#999999")
                    ax.add_patch(FancyBboxPatch((xs[r] - 0.16, y - 0.36), 0.32, 0.72, boxstyle="round,pad=0.0",
                                                facecolor=face, edgecolor="none", alpha=0.25 if faint else 1.0,
                                                gid=f"op:{r}:{name}"))
                    ax.text(xs[r], y, name, ha="center", va="center", fontsize=7, color="white", weight="bold",
                            alpha=0.4 if faint else 1.0)
                    continue
                label = "\n".join(f"{k} {nm}{'<-' if k == 'recv' else '->'}{p}" for k, p, nm in parts)
                color = "#C00000" if blocked else ("#AAAAAA" if faint else "#222222")
                side = -1 if r == 0 else 1  # labels outside the lifelines: rank 0 to the left, the others right
                mark = "BLOCKED" if blocked else ""
                text = f"{mark} {label}".strip() if side < 0 else f"{label} {mark}".strip()
                ax.text(xs[r] + 0.12 * side, y, text, ha="right" if side < 0 else "left", va="center", fontsize=6.5,
                        color=color, family="monospace", gid=f"call:{r}:{i}")
                ax.plot([xs[r]], [y], marker="o", ms=3.5, color=color, zorder=3)
        for (sr, si, name, kind), (vr, vi, _) in pairs:
            if si < reached[sr] and vi < reached[vr]:
                dy = -0.12 if name[0] == "F" else 0.12  # an exchange's two arrows side by side
                _arrow(ax, (xs[sr], row[sr][si] + dy), (xs[vr], row[vr][vi] + dy), lw=0.9, gid=f"msg:{name}",
                       color=KIND_COLORS.get(name[0], "#444444"))
        for r, w in res.blocked.items():
            y = row[r][reached[r] - 1]
            _arrow(ax, (xs[r], y), (xs[w.peer], y), color="#C00000", ls="--", lw=0.9, gid=f"wait:{r}")
        verdict = "completes" if res.completed else ("circular wait" if res.cycle else "hangs")
        ax.set_title(f"{title}\n({verdict})", fontsize=8.5)
    fig.tight_layout()
    return fig
