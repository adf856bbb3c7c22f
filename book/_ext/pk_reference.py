"""Two small fixes that let the book's reference pages be generated from the code and still build with -W -n.

* The command reference (using/commands) comes from the argument parsers through sphinx-argparse, which parses
  every help string as reStructuredText.  The kit's help strings are plain text -- what ``--help`` prints --
  and they hold ``*`` (``pp*chunks``, ``'Et*2|t*2L'``) and backquotes that reST reads as unfinished markup.
  So help and descriptions are shown as the text they are, code-like defaults as code.
* The Python API reference (using/api) documents named tuples, whose fields autodoc lists with the docstring
  Python gives every field, "Alias for field number N": the class's own docstring already says what each
  field is, so those entries are skipped.
"""

from __future__ import annotations

import re

from docutils import nodes

_FIELD_ALIAS = re.compile(r"Alias for field number \d+")
_DEFAULT = re.compile(r"Default: ``(.*)``", re.S)


def _plain(elements, markdown_help=False, settings=None):
    """sphinx-argparse's render_list, for help written as plain text."""
    out = []
    for element in elements:
        if isinstance(element, nodes.definition):
            out += element
            continue
        text = str(element).strip()
        if not text:
            continue
        default = _DEFAULT.fullmatch(text)
        if default:
            value = default.group(1).replace(r"\`", "`")
            out.append(nodes.paragraph("", "", nodes.Text("Default: "), nodes.literal(value, value)))
        else:
            out.append(nodes.paragraph(text, text))
    return out


def _skip_field_aliases(app, what, name, obj, skip, options):
    doc = getattr(obj, "__doc__", None)
    if what == "class" and isinstance(obj, property) and doc and _FIELD_ALIAS.fullmatch(doc.strip()):
        return True
    return None


def setup(app):
    import sphinxarg.ext

    sphinxarg.ext.render_list = _plain
    app.connect("autodoc-skip-member", _skip_field_aliases)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
