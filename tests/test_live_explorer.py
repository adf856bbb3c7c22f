"""The live explorer and a lab, as a student sees them: a real JupyterLab in headless Chromium.

One server and one browser for the module (starting them is most of the time).  A fresh notebook
calls ``explorer()``: a picture must appear, and pressing an arrow key on a slider must change both
the picture and the bubble fraction.  Then ``labs/lab08_interleaved`` runs its given cells (all but
the one that launches ``torchrun``): two of them return figures, which must show as pictures.
Nowhere may an error or a ``<Figure size ...>`` text appear.
"""

import re
import shutil
from pathlib import Path

import pytest
import nbformat
from figure_outputs import FIGURE_TEXT
from headless_chromium import chromium_or_skip
from jupyterlab_browser import Lab, jupyterlab, write_notebook

pytest.importorskip("jupyterlab")

ROOT = Path(__file__).resolve().parent.parent
LAB = "lab08_interleaved.ipynb"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyterlab")
    write_notebook(root / "explorer.ipynb", "from pipeline_kit.viz import explorer\nexplorer()")
    shutil.copy(ROOT / "labs" / LAB, root / LAB)
    driver = chromium_or_skip()
    try:
        with jupyterlab(root) as (base, token):
            yield Lab(driver, base, token)
    finally:
        driver.quit()


def problems(lab: Lab, index: int) -> list[str]:
    """What cell ``index`` shows that a student must not see: errors, tracebacks, figure text."""
    found = []
    for out in lab.outputs(index):
        text = out.get_property("textContent") or ""
        # An exception or stderr renders as the stderr type; a widget the page cannot show says so in text.
        if out.get_attribute("data-mime-type") == "application/vnd.jupyter.stderr" or "Traceback" in text \
                or "Error displaying widget" in text or "Model not found" in text:
            found.append(f"cell {index} shows an error: {text[:300]}")
        found += [f"cell {index} shows {m!r} instead of a picture" for m in FIGURE_TEXT.findall(text)]
    return found


def bubble_fraction(driver) -> str:
    """The explorer's "bubble fraction" figure, read afresh (each redraw replaces the table)."""
    return driver.execute_script("""
        for (const row of document.querySelectorAll('.jp-OutputArea-output .widget-html tr'))
            if (row.cells[0].textContent.includes('bubble fraction')) return row.cells[1].textContent;""")


def test_explorer_draws_and_redraws_in_jupyterlab(lab, tmp_path):
    lab.open("explorer.ipynb")
    lab.run([0])
    d = lab.driver
    img = lab.widget_image(0)
    before = (img.get_attribute("src"), bubble_fraction(d))
    assert before[1] == "0.2727"  # 1F1B, pp = 4, M = 8: 3 / 11
    handle = lab.slider_handle("microbatches")
    lab.press(handle, img, "ArrowRight")  # M = 9
    lab.wait(lambda: bubble_fraction(d) != before[1], 30, "the bubble fraction to follow the slider")
    assert img.get_attribute("src") != before[0] and img.get_property("naturalWidth") > 600
    assert bubble_fraction(d) == "0.2500"  # 3 / 12
    d.save_screenshot(str(tmp_path / "explorer.png"))
    assert not problems(lab, 0)


def test_a_lab_given_cells_show_pictures_and_no_errors(lab, tmp_path):
    nb = nbformat.read(ROOT / "labs" / LAB, as_version=4)
    given = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not c.metadata.get("nbgrader", {})
             .get("solution") and not c.metadata.get("nbgrader", {}).get("grade") and "torchrun(" not in c.source
             and "grade_me(" not in c.source]  # (the self-grade: tests/test_tutor_browser.py)
    figures = [i for i in given if re.search(r"^draw_\w+\(", nb.cells[i].source, re.M)]  # a figure as the value
    assert len(given) >= 3 and len(figures) >= 2
    lab.open(LAB)
    lab.run(given)
    for i in figures:
        lab.wait(lambda i=i: [e for e in lab.outputs(i) if e.find_elements("css selector", "img")],
                 30, f"a picture in cell {i}", cell=i)
    lab.driver.execute_script("arguments[0].scrollIntoView()", lab.outputs(figures[-1])[0])
    lab.driver.save_screenshot(str(tmp_path / "lab.png"))  # to look at when it fails
    assert [p for i in given for p in problems(lab, i)] == []
