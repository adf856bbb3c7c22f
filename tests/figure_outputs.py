"""Find plots that a notebook shows as text: a ``<Figure size ...>`` repr with no picture next to it.

A matplotlib figure displayed where no PNG formatter is active leaves only its text repr in the
output; nbval compares that text happily, so the stored outputs must be checked for it directly.
So do axes (``<Axes: ...>``), an animation (``<matplotlib.animation.FuncAnimation object at ...>``)
and HTML left as a quoted string (``'<table>...'``, the player's ``'\\n<link ...'``): each is the
cell's value shown as text where its picture or its rendered HTML belongs.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

FIGURE_TEXT = re.compile(r"<[\w.]*Figure size [^>]*>"  # Figure, KitFigure, matplotlib.figure.Figure
                         r"|<Axes: [^>]*>"
                         r"|<[\w.]*Animation object at 0x[0-9a-fA-F]+>"
                         r"|^'(?:\\n)?<(?:table|p|div|link|script)\b[^']{0,60}", re.MULTILINE)  # an HTML str's repr


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return str(output.get("data", {}).get("text/plain", ""))


def figures_without_pictures(path: Path) -> list[str]:
    """``"<notebook> cell <n>: <repr>"`` for every figure, axes, animation or HTML-string repr shown without an
    image (or the HTML) beside it."""
    found = []
    for n, cell in enumerate(nbformat.read(path, as_version=4).cells):
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        for out in outputs:
            if any(k.startswith("image/") or k == "text/html" for k in out.get("data", {})):
                continue  # a picture or rendered HTML, with its repr as the plain-text fallback
            for match in FIGURE_TEXT.findall(_text(out)):
                found.append(f"{path.name} cell {n}: {match}")
    return found
