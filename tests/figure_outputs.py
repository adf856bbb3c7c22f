"""Find plots that a notebook shows as text: a ``<Figure size ...>`` repr with no picture next to it.

A matplotlib figure displayed where no PNG formatter is active leaves only its text repr in the
output; nbval compares that text happily, so the stored outputs must be checked for it directly.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

FIGURE_TEXT = re.compile(r"<[\w.]*Figure size [^>]*>|<Axes: [^>]*>")  # Figure, KitFigure, matplotlib.figure.Figure


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return str(output.get("data", {}).get("text/plain", ""))


def figures_without_pictures(path: Path) -> list[str]:
    """``"<notebook> cell <n>: <repr>"`` for every figure or axes repr shown without an image beside it."""
    found = []
    for n, cell in enumerate(nbformat.read(path, as_version=4).cells):
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        for out in outputs:
            if any(k.startswith("image/") for k in out.get("data", {})):
                continue  # a picture, with its repr as the plain-text fallback
            for match in FIGURE_TEXT.findall(_text(out)):
                found.append(f"{path.name} cell {n}: {match}")
    return found
