"""How a check's verdict reads in the student's notebook: one ✓ or ✗ line with the points, the feedback, and --
only when the student's own code raised -- the student's frames, never the kit's.

Why a renderer of its own: IPython shows an exception as a traceback through every frame it crossed, and for a
failed check those frames are the kit's (the check, ``common.call``, the partial-credit runner): twenty-five lines a
student cannot act on, around the one line of feedback they need. IPython asks an exception for
``_render_traceback_`` before it formats one; the kit's check failures answer with these lines. The cell still fails
(nbgrader and nbval see an error), and the whole traceback stays one command away (``%tb``). No kit imports here
(but :mod:`pipeline_kit.language`, which imports none): :mod:`.questions.common` and :mod:`.tutor` both use it.
Every line is in the notebook's language.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import textwrap

from ..language import translated

RED, GREEN, DIM, BOLD, RESET = "\x1b[31m", "\x1b[32m", "\x1b[2m", "\x1b[1m", "\x1b[0m"
WIDTH = 100
FULL_TRACEBACK = "the full traceback: %tb"
KIT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the pipeline_kit package
_LIBRARIES = tuple({os.path.abspath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                          sysconfig.get_paths()["purelib"],
                                                          sysconfig.get_paths()["stdlib"])})


def points(earned: float, max_points: float) -> str:
    """``"2 / 2 points"``, ``"0.67 / 2 points"``, ``"1 / 1 point"``."""
    return translated(f"{round(earned, 2):g} / {max_points:g} point{'' if max_points == 1 else 's'}")


def headline(name: str, earned: float, max_points: float) -> str:
    """The verdict line: ``✓ m042_main_1f1b_order — 2 / 2 points`` or ``✗ ... — 0 / 2 points``."""
    return f"{'✓' if earned >= max_points else '✗'} {name} — {points(earned, max_points)}"  # (points: translated)


def manual_headline(name: str, max_points: float, answered: bool, earned: float | None = None) -> str:
    """A manually graded cell's line, never a ✓ or ✗: ``✎ plan_follow_sentence — 2 points possible, graded by your
    instructor (answered)``; with the instructor's score, ``✎ ... — 1.5 / 2 points, graded by your instructor``."""
    shown = f"{max_points:g} point{'' if max_points == 1 else 's'} possible" if earned is None else \
        points(earned, max_points)
    state = "" if earned is not None else translated(" (answered)") if answered else translated(" (not answered yet)")
    return translated(f"✎ {name} — {shown}, graded by your instructor{state}")


def wrapped(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(" ".join(text.split()), WIDTH, initial_indent=indent,
                         subsequent_indent=" " * len(indent) + "  ") or [indent]  # (a bullet on the first line only)


def is_students(filename: str) -> bool:
    """A frame of the student's own code: a notebook cell, or a file that is neither the kit's nor a library's."""
    if filename.startswith("<") and not filename.startswith("<ipython-input"):
        return False  # "<test cell ...>", "<check ...>", "<string>", "<frozen ...>"
    path = os.path.abspath(filename)
    return not (path.startswith(KIT + os.sep) or path.startswith(_LIBRARIES) or "site-packages" in path)


def students_frames(exc: BaseException | None) -> list[str]:
    """The traceback of the first exception in ``exc``'s chain that the student's code raised, from the student's
    first frame on (kit frames the student's code called into stay: they show what it passed), or ``[]``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        crossed_kit = False
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if crossed_kit and is_students(name):
                if isinstance(exc, NotImplementedError):
                    return []  # "not answered yet" says it all
                return traceback_lines(exc, tb)
            crossed_kit = crossed_kit or not is_students(name)
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return []


def students_line(exc: BaseException) -> str:
    """``line 3 of your code (in loss_func), `scale = 1 / 0``` -- the innermost frame of the student's own code in
    ``exc``'s traceback -- or "" where none is.  Plain text, so a probe can send it as data (the grade's kernel)
    and a verdict can show it (the notebook)."""
    import linecache
    found, tb = None, exc.__traceback__
    while tb is not None:
        if is_students(tb.tb_frame.f_code.co_filename):
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    code = found.tb_frame.f_code
    text = linecache.getline(code.co_filename, found.tb_lineno).strip()
    shown = f", `{text[:80]}`" if text else ""
    return translated(f"line {found.tb_lineno} of your code (in {code.co_name}){shown}")


def traceback_lines(exc: BaseException, tb) -> list[str]:
    """``exc``'s traceback from ``tb`` as IPython shows it (plain Python's where IPython is not running)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None:
        try:
            return list(shell.InteractiveTB.structured_traceback(type(exc), exc, tb))
        except Exception:  # noqa: BLE001 -- a formatter's bug must not hide the verdict; plain Python's format below
            pass
    import traceback

    return [line.rstrip("\n") for line in traceback.format_exception(type(exc), exc, tb)]


def failure_lines(title: str, messages: list[str], errors: list[BaseException], footer: str) -> list[str]:
    """The lines of a failed verdict: the ✗ title in red, each failing part's feedback, the student's frames of the
    first part that has some, and a dim footer."""
    lines = [f"{BOLD}{RED}{title}{RESET}"]
    for message in messages:
        lines += wrapped(message, "  • " if len(messages) > 1 else "  ")
    for exc in errors:
        frames = students_frames(exc)
        if frames:
            lines += ["", "  " + translated("raised in your code:"), *frames]
            break
    return lines + [f"{DIM}  {translated(footer)}{RESET}"]
