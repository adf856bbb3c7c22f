"""What the kit hands a notebook shows as a picture in any IPython kernel, whatever the matplotlib backend.

The kit draws on bare :class:`matplotlib.figure.Figure` objects, never through pyplot: no global
figure registry, no GUI, nothing to close.  The price is that IPython shows such a figure as a
picture only when some matplotlib integration happened to register a PNG formatter for ``Figure``
(``%matplotlib inline``, and not every kernel/backend combination does it on its own); otherwise
a student sees ``<Figure size 990x286.2 with 1 Axes>`` where the plot belongs.  An ``Axes``, a
tuple holding a figure, an HTML string or a matplotlib animation fares worse: no integration
formats them at all, so a cell ending in ``draw_timeline(tl)`` showed ``<Axes: title=...>``.

This module is the one place of the rule "every viz function's value, left as a cell's last value,
shows what it draws".  IPython's display formatter first asks the formatters registered for the
value's type (walking its MRO), then the value's own ``_repr_png_`` / ``_repr_html_``; so each
value the kit returns is one of these small subclasses, which keep the type callers rely on:

* :class:`KitFigure` -- a ``Figure`` that renders itself with the Agg canvas in ``_repr_png_``.
  Where a formatter is registered for ``Figure`` (``%matplotlib inline``), that one wins and draws
  the same picture; it is still one picture, as the kit's figures are not in pyplot's registry
  that inline flushes at the end of a cell.
* :class:`KitAxes` -- the axes of a figure the kit made itself (``draw_timeline(tl)`` with no
  ``ax``): ``_repr_png_`` is its figure's PNG.  Inline registers nothing for ``Axes``, so that is
  the one picture there too.  Axes a caller passes in are returned as they came.
* :class:`FigureTuple` -- ``(figure, data)`` as :func:`~pipeline_kit.viz.render` returns it: a
  real tuple (``fig, metrics = render(...)`` still works) that shows its figure.
* :class:`HTMLText` -- a ``str`` of HTML (the animation player, the metrics table) whose
  ``_repr_html_`` is itself: written into a page it is the string it always was, as a cell's value
  it is rendered, not quoted.
* :class:`KitAnimation` -- a ``FuncAnimation`` whose ``_repr_html_`` is the JS/HTML player
  (matplotlib's own returns nothing unless ``rcParams["animation.html"]`` is set; a setting there
  is still obeyed).

We chose this over registering global formatters when the kit is imported: it works in any kernel
however and whenever the kit was imported, and it leaves a user's other figures and their chosen
backend alone.  The plain-text fallbacks read as the base types' do (``<Figure size ...>``,
``<Axes: ...>``).  The live explorer uses :func:`png_bytes` directly for its ``ipywidgets.Image``.
"""

from __future__ import annotations

import io

import matplotlib as mpl
from matplotlib.animation import FuncAnimation
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["FigureTuple", "HTMLText", "KitAnimation", "KitAxes", "KitFigure", "png_bytes"]


def png_bytes(fig: Figure, tight: bool = True) -> bytes:
    """``fig`` as PNG, rasterised by Agg whatever backend is active (``tight``: crop to the drawing, as inline does)."""
    buf = io.BytesIO()
    if tight:
        fig.savefig(buf, format="png", bbox_inches="tight", facecolor="white")
    else:  # the explorer's margins are set and every millisecond counts: one draw, no bbox search, and
        # zlib level 1, which encodes its 1000x450 timelines in half the time of the default 6 for 25% more bytes
        canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)  # keep its renderer
        canvas.print_png(buf, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def _base_repr(obj, text: str, base: str) -> str:
    """``text`` (a repr) with ``obj``'s class name, where it opens the repr, read as ``base``."""
    name = type(obj).__name__
    return text.replace(name, base, 1) if text.lstrip("<").startswith(name) else text


class KitFigure(Figure):
    """A matplotlib ``Figure`` that IPython displays as a PNG picture even without ``%matplotlib inline``."""

    def _repr_png_(self) -> bytes:
        return png_bytes(self)

    def __repr__(self) -> str:  # the plain-text fallback reads as any figure's does
        return _base_repr(self, super().__repr__(), "Figure")


class KitAxes(Axes):
    """Axes that IPython displays as their figure's PNG (``fig.subplots(subplot_kw={"axes_class": KitAxes})``)."""

    def _repr_png_(self) -> bytes:
        return png_bytes(self.figure)

    def __repr__(self) -> str:  # <Axes: title=...>, as any axes
        return _base_repr(self, super().__repr__(), "Axes")


class FigureTuple(tuple):
    """A tuple whose first item is a figure; IPython displays it as that figure's PNG.

    It is an ordinary tuple otherwise: it unpacks, indexes, compares and pickles as one.
    """

    def _repr_png_(self) -> bytes | None:
        return png_bytes(self[0]) if self and isinstance(self[0], Figure) else None


class HTMLText(str):
    """A ``str`` of HTML that IPython renders when it is a cell's value (``str()`` of it is the plain string)."""

    __slots__ = ()
    SHORT = 2000  # characters: a longer one's plain-text fallback names its length instead of quoting it all

    def _repr_html_(self) -> str:
        return str(self)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's text/plain only; repr() is str's
        p.text(repr(str(self)) if len(self) <= self.SHORT else f"<HTML, {len(self):,} characters>")


class KitAnimation(FuncAnimation):
    """A ``FuncAnimation`` that IPython displays as its JS/HTML player (``to_jshtml``), with no rcParams set."""

    def _repr_html_(self) -> str | None:
        if mpl.rcParams["animation.html"] != "none":  # the user chose html5 video or jshtml: theirs
            return super()._repr_html_()
        return self.to_jshtml(default_mode="once")

    def __repr__(self) -> str:  # as matplotlib's animations read
        return f"<matplotlib.animation.FuncAnimation object at {id(self):#x}>"
