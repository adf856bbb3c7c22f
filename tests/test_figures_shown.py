"""Every figure the kit hands a notebook shows as a picture, in any kernel, whatever the matplotlib backend.

IPython decides what a cell's value looks like through its display formatter; a kit figure must
come out of it with an ``image/png`` whether pyplot was imported or not, under any backend, with or
without ``%matplotlib inline`` -- not only as ``<Figure size ...>`` text.  The stored outputs of the
solution notebooks are checked for such text too (nbval compares it without complaint).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from figure_outputs import figures_without_pictures

pytest.importorskip("matplotlib")
pytest.importorskip("IPython")

ROOT = Path(__file__).resolve().parent.parent

# Every figure helper the labs and chapters display, formatted by a real IPython shell: fresh (no
# pyplot), then with pyplot imported under several backends, then after %matplotlib inline.
PROBE = r"""
import base64, json, sys
import matplotlib
from IPython.core.interactiveshell import InteractiveShell

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.viz import (Timeline, bubble_vs_microbatches, draw_comparison, draw_memory, draw_timeline,
                              efficiency_vs_imbalance, interleaved_vs_not, render)

shell = InteractiveShell.instance()
tl = Timeline.from_sim(simulate(build_schedule("1f1b", 2, 4)))
helpers = {
    "draw_timeline(...).figure": lambda: draw_timeline(tl).figure,
    "draw_comparison": lambda: draw_comparison(tl, tl),
    "draw_memory": lambda: draw_memory({"1f1b": tl}),
    "bubble_vs_microbatches": lambda: bubble_vs_microbatches(pps=(2,), microbatches=range(1, 4)),
    "interleaved_vs_not": lambda: interleaved_vs_not(pp=2, microbatches=(2, 4), chunks=(1, 2)),
    "efficiency_vs_imbalance": lambda: efficiency_vs_imbalance(pp=2, microbatches=2, slowdowns=(1.0, 2.0)),
    "render(...)[0]": lambda: render("1f1b", 2, 4)[0],
}

def shown(names):
    out = {}
    for name in names:
        make = helpers[name]
        data, _ = shell.display_formatter.format(make())
        png = data.get("image/png", b"")
        png = base64.b64decode(png) if isinstance(png, str) else png  # %matplotlib inline hands base64
        out[name] = sorted(data) if isinstance(png, bytes) and png.startswith(b"\x89PNG") else ["no PNG"]
    return out

# Every helper once; then one of them (they all make the same KitFigure) per backend, to keep this fast.
results = {"fresh kernel, no pyplot": shown(helpers)}
import matplotlib.pyplot as plt
for backend in sys.argv[1:]:
    plt.switch_backend(backend)
    results[f"pyplot, backend {backend}"] = shown(["draw_memory"])
shell.enable_gui = lambda gui=None: None  # what ipykernel does for inline; the base shell has no GUI loop
shell.run_line_magic("matplotlib", "inline")
results["%matplotlib inline"] = shown(["draw_memory"])
print(json.dumps(results))
"""
BACKENDS = ["agg", "svg", "module://matplotlib_inline.backend_inline"]


def test_every_kit_figure_formats_as_png_under_any_backend():
    proc = subprocess.run([sys.executable, "-c", PROBE, *BACKENDS], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(BACKENDS) + 2
    bad = [f"{where}: {name} -> {keys}" for where, shown in results.items() for name, keys in shown.items()
           if keys != ["image/png", "text/plain"]]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("notebook", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.stem)
def test_stored_solution_outputs_show_pictures_not_figure_text(notebook):
    assert not figures_without_pictures(notebook)
