"""Every viz function a notebook cell ends with shows what it draws, in any kernel, whatever the matplotlib backend.

IPython decides what a cell's value looks like through its display formatter; the kit's figures,
the axes ``draw_timeline`` makes, ``render``'s ``(figure, metrics)`` pair must come out of it with
an ``image/png`` whether pyplot was imported or not, under any backend, with or without
``%matplotlib inline`` -- not only as ``<Figure size ...>`` or ``<Axes: ...>`` text; the HTML
players and the metrics table with a ``text/html``.  Under ``%matplotlib inline`` a cell shows each
picture once.  The stored outputs of the solution notebooks are checked for such text too (nbval
compares it without complaint).
"""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from figure_outputs import figures_without_pictures

pytest.importorskip("matplotlib")
pytest.importorskip("IPython")

from matplotlib.animation import FuncAnimation
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.viz import Timeline, animate, animation_html, draw_timeline, metrics_html, render

ROOT = Path(__file__).resolve().parent.parent

# Every helper a lab or chapter ends a cell with, formatted by a real IPython shell: fresh (no pyplot),
# then with pyplot imported under several backends, then after %matplotlib inline.  A helper's
# expected output: "png" (an image/png beside the text) or the text its text/html must contain.
PROBE = r"""
import base64, json, sys
import matplotlib
from IPython.core.interactiveshell import InteractiveShell

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.viz import (Timeline, animate, animation_html, bubble_vs_microbatches, draw_comparison, draw_memory,
                              draw_timeline, efficiency_vs_imbalance, interleaved_vs_not, metrics_html, render)
from pipeline_kit.viz.diagrams import memory_rows, stacked_timelines

shell = InteractiveShell.instance()
tl = Timeline.from_sim(simulate(build_schedule("1f1b", 2, 4)))
small = Timeline.from_sim(simulate(build_schedule("1f1b", 2, 2)))  # few frames: the players stay quick
helpers = {
    "draw_timeline": lambda: draw_timeline(tl),
    "draw_timeline(..., phases, first_backward, arrows)": lambda: draw_timeline(tl, phases=True, first_backward=True,
                                                                                 arrows=True),
    "draw_timeline(...).figure": lambda: draw_timeline(tl).figure,
    "draw_comparison": lambda: draw_comparison(tl, tl),
    "draw_memory": lambda: draw_memory({"1f1b": tl}),
    "bubble_vs_microbatches": lambda: bubble_vs_microbatches(pps=(2,), microbatches=range(1, 4)),
    "interleaved_vs_not": lambda: interleaved_vs_not(pp=2, microbatches=(2, 4), chunks=(1, 2)),
    "efficiency_vs_imbalance": lambda: efficiency_vs_imbalance(pp=2, microbatches=2, slowdowns=(1.0, 2.0)),
    "render": lambda: render("1f1b", 2, 4),
    "render, invalid configuration": lambda: render("interleaved", 4, 6, 2),
    "render(...)[0]": lambda: render("1f1b", 2, 4)[0],
    "stacked_timelines": lambda: stacked_timelines([tl, tl]),
    "memory_rows": lambda: memory_rows({"1f1b": tl}),
    "metrics_html": lambda: metrics_html(render("1f1b", 2, 4)[1]),
    "metrics_html, invalid configuration": lambda: metrics_html(render("interleaved", 4, 6, 2)[1]),
    "animation_html": lambda: animation_html(small),
    "animate": lambda: animate(small),
}
expect = {name: "png" for name in helpers}
expect.update({"metrics_html": "<table>", "metrics_html, invalid configuration": "not a valid configuration",
               "animation_html": "<script", "animate": "<script"})

def shown(names):
    out = {}
    for name in names:
        data, _ = shell.display_formatter.format(helpers[name]())
        if expect[name] == "png":
            png = data.get("image/png", b"")
            png = base64.b64decode(png) if isinstance(png, str) else png  # %matplotlib inline hands base64
            ok = isinstance(png, bytes) and png.startswith(b"\x89PNG") and len(png) > 2000
        else:
            ok = expect[name] in str(data.get("text/html", ""))
        out[name] = sorted(data) if ok else [f"no {expect[name]}"] + sorted(data)
    return out

published = []  # every mime bundle a cell put out: the displayhook's (its value) and display()'s
shell.displayhook.write_format_data = lambda data, md=None: published.append(data)
shell.displayhook.write_output_prompt = lambda: None  # no "Out[0]: " on stdout
shell.display_pub.publish = lambda data, metadata=None, **kw: published.append(data)

def cell_outputs(cells):
    out = {}
    for code in cells:
        published.clear()
        result = shell.run_cell(code)
        assert result.success, (code, result.error_in_exec)
        out[code] = [sorted(bundle) for bundle in published]
    return out

CELLS = ["draw_timeline(tl)", "draw_timeline(tl).figure", "draw_memory({'1f1b': tl})", "render('1f1b', 2, 4)",
         "fig, metrics = render('1f1b', 2, 4)", "ax = draw_timeline(tl)", "animate(small)", "animation_html(small)",
         "metrics_html(render('1f1b', 2, 4)[1])"]
shell.push({"tl": tl, "small": small, **{n: globals()[n] for n in
            ["draw_timeline", "draw_memory", "render", "animate", "animation_html", "metrics_html"]}})

# Every helper once; then one of each kind of value (a KitFigure, a KitAxes, render's pair, the
# HTML ones) per backend, to keep this fast.
ONE_OF_EACH = ["draw_memory", "draw_timeline", "render", "metrics_html", "animate"]
results = {"fresh kernel, no pyplot": shown(helpers)}
import matplotlib.pyplot as plt
for backend in sys.argv[1:]:
    plt.switch_backend(backend)
    results[f"pyplot, backend {backend}"] = shown(ONE_OF_EACH)
shell.enable_gui = lambda gui=None: None  # what ipykernel does for inline; the base shell has no GUI loop
shell.run_line_magic("matplotlib", "inline")
results["%matplotlib inline"] = shown(ONE_OF_EACH)
# Whole cells under inline: what the displayhook and the end-of-cell flush publish together.  The
# last one is the control: a pyplot figure left as the value shows twice, so a double would be seen.
shell.push({"plt": plt})
cells = cell_outputs(CELLS + ["plt.plot([1, 2]); plt.gcf()"])
print("RESULTS", json.dumps({"formatted": results, "cells under inline": cells}))
"""
BACKENDS = ["agg", "svg", "module://matplotlib_inline.backend_inline"]
PNG, HTML = ["image/png", "text/plain"], ["text/html", "text/plain"]


@pytest.fixture(scope="module")
def probe():
    proc = subprocess.run([sys.executable, "-c", PROBE, *BACKENDS], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")][-1]
    return json.loads(line.removeprefix("RESULTS "))


def test_every_viz_value_formats_as_a_picture_or_html_under_any_backend(probe):
    results = probe["formatted"]
    assert len(results) == len(BACKENDS) + 2
    html = {"metrics_html", "metrics_html, invalid configuration", "animation_html", "animate"}
    bad = [f"{where}: {name} -> {keys}" for where, shown in results.items() for name, keys in shown.items()
           if keys != (HTML if name in html else PNG)]
    assert not bad, "\n".join(bad)
    assert len(results["fresh kernel, no pyplot"]) == 17  # every helper was tried


def test_inline_shows_each_picture_once(probe):
    cells = probe["cells under inline"]
    assert cells.pop("plt.plot([1, 2]); plt.gcf()") == [PNG, PNG]  # the control: a pyplot figure shows twice
    assert cells.pop("fig, metrics = render('1f1b', 2, 4)") == []  # an assignment shows nothing
    assert cells.pop("ax = draw_timeline(tl)") == []
    for code in ["animate(small)", "animation_html(small)", "metrics_html(render('1f1b', 2, 4)[1])"]:
        assert cells.pop(code) == [HTML], code
    assert cells and all(outputs == [PNG] for outputs in cells.values()), cells  # one picture each


def sim(name="1f1b", pp=2, m=4):
    return Timeline.from_sim(simulate(build_schedule(name, pp, m)))


def test_values_keep_the_types_callers_use():
    fig, metrics = render("1f1b", 2, 4)  # render's pair still unpacks
    assert isinstance(fig, Figure) and metrics["makespan"] == 15.0
    pair = render("1f1b", 2, 4)
    assert isinstance(pair, tuple) and len(pair) == 2 and pair[1] == metrics and pair == (pair[0], metrics)
    copy = pickle.loads(pickle.dumps(pair))
    assert type(copy) is type(pair) and copy[1] == metrics and type(copy[0]) is type(pair[0])
    assert repr(pair).startswith("(<Figure size ")  # the text fallback reads as a plain pair's
    ax = draw_timeline(sim())
    assert isinstance(ax, Axes) and repr(ax).startswith("<Axes: title={'center': '1f1b, pp=2, M=4'}")
    assert repr(ax.figure).startswith("<Figure size ")
    own = Figure().subplots()
    assert draw_timeline(sim(), ax=own) is own and type(own) is Axes  # the caller's axes, as they came
    html = animation_html(sim("1f1b", 2, 2))
    assert isinstance(html, str) and html._repr_html_() == str(html) and "<script" in html
    assert type(html + "") is str and f"<div>{html}</div>".count("<script") == html.count("<script")
    table = metrics_html(metrics)
    assert isinstance(table, str) and table.startswith("<table>") and table._repr_html_() == table
    anim = animate(sim("1f1b", 2, 2))
    assert isinstance(anim, FuncAnimation) and repr(anim).startswith("<matplotlib.animation.FuncAnimation object")
    assert "<script" in anim._repr_html_()  # the player, with rcParams["animation.html"] left at "none"


def test_an_axes_picture_is_its_figure_and_not_blank():
    from io import BytesIO

    import numpy as np
    from matplotlib.image import imread

    ax = draw_timeline(sim())
    png = ax._repr_png_()
    assert png == ax.figure._repr_png_() == render.__globals__["png_bytes"](ax.figure)
    pixels = imread(BytesIO(png))
    assert pixels.shape[0] > 150 and pixels.shape[1] > 400
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 20  # colours, not a blank page


def test_animation_obeys_a_chosen_animation_html_setting():
    import matplotlib as mpl

    anim = animate(sim("1f1b", 2, 2))
    anim._draw_was_started = True  # nothing is rendered here: no "deleted without rendering" warning
    anim.to_html5_video = lambda *a, **k: "<video>"  # (it needs ffmpeg)
    with mpl.rc_context({"animation.html": "html5"}):
        assert anim._repr_html_() == "<video>"  # the user's choice wins


@pytest.mark.parametrize("notebook", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.stem)
def test_stored_solution_outputs_show_pictures_not_figure_text(notebook):
    assert not figures_without_pictures(notebook)


def test_the_stored_output_check_sees_every_value_left_as_text(tmp_path):
    import nbformat

    def result(data):
        return nbformat.v4.new_output("execute_result", data=data, execution_count=1)

    texts = {"<Figure size 640x480 with 1 Axes>": True, "<Axes: title={'center': '1f1b'}>": True,
             "<matplotlib.animation.FuncAnimation object at 0x7f3a2c>": True, "'<table><tr><td>makespan'": True,
             "'\\n<link rel=\"stylesheet\"\\nhref=...'": True, "'<p><b>not a valid configuration:</b> x</p>'": True,
             "(<Figure size 990x210 with 1 Axes>, {'makespan': 15.0})": True, "{'makespan': 15.0}": False,
             "'a <table> of numbers'": False, "<HTML, 116,056 characters>": False}
    cells = [nbformat.v4.new_code_cell("x", outputs=[result({"text/plain": text})]) for text in texts]
    cells += [nbformat.v4.new_code_cell("x", outputs=[result({"text/plain": text, other: "..."})])
              for text in texts for other in ("image/png", "text/html")]  # shown: the text is only the fallback
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    found = figures_without_pictures(path)
    assert [int(f.split(" cell ")[1].split(":")[0]) for f in found] == [n for n, bad in enumerate(texts.values())
                                                                        if bad]
