"""What a translation must keep of its English: the book's catalogs (book/editions.py) and the labs'
(:mod:`pipeline_kit.grading.lab_catalogs`) are held to the same rule.

Why a check: a translator rewrites the words around a MyST role, a code span, math or a link, and a role's key, a
function's name or a link's target changed in passing would still build -- as a wrong number, a name that does not
exist, a dead link.  Each of them must come through as it was; only a cross-reference's text (``{term}`词
<word>```) may be translated, its target not.  A code span's line break is a space (CommonMark), so a span that a
translation joins onto one line is the same span.
"""

from __future__ import annotations

import re
from pathlib import Path

XREF = ("term", "ref", "doc", "numref")  # cross-reference roles: their text may be translated, their target not
ROLE = re.compile(r"\{([\w:.-]+)\}`([^`]*)`")
CODE = re.compile(r"(?<![}`])`([^`]+)`")
MATH = re.compile(r"\$[^$]+\$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
_BREAK = re.compile(r"[ \t]*\n[ \t]*")


def _markup(text: str) -> list[str]:
    """What a translation must keep as it is: each role's target (its text may be translated where it names a
    target in ``<...>``), code, math and link targets."""
    out = []
    for role, body in ROLE.findall(text):
        target = re.search(r"<([^<>]+)>\s*$", body)
        if target or role in XREF:  # {term}`word` and {term}`词 <word>` point at the same entry
            out.append(f"{{{role}}}<{target.group(1) if target else body}>")
        else:
            out.append(f"{{{role}}}`{body}`")
    stripped = ROLE.sub("", text)
    out += [f"`{_BREAK.sub(' ', c)}`" for c in CODE.findall(stripped)] + MATH.findall(stripped) \
        + LINK.findall(stripped)
    return sorted(out)


def markup_problems(msgid: str, msgstr: str) -> list[str]:
    """The roles, code, math or link targets of ``msgid`` that ``msgstr`` lost or changed (empty: none)."""
    want, have = _markup(msgid), _markup(msgstr)
    return sorted({m for m in want if want.count(m) > have.count(m)})


def read_catalog(path: Path):
    """The gettext catalog at ``path`` (Babel's ``Catalog``): the book's, the labs' and the kit's are read alike."""
    from babel.messages.pofile import read_po
    with path.open("rb") as fh:
        return read_po(fh)
