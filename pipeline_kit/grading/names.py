"""Where each name a test cell uses comes from: the grader's own code, or the student's kernel.

Why static: the grader decides, from the canonical notebook alone (instructor code), which names it computes
itself and which it must fetch as student data -- nothing the student writes can move a name from one side to
the other.  For a name used by a test cell, the last cell above it (or the cell itself) that binds the name
decides (see README.md, "How a test cell's names resolve"):

* a test cell -> the grader's namespace (``GRADER``);
* an ``import`` in a given cell -> that import, done by the grader (``IMPORT``);
* an answer cell, a given cell's variable, or nothing at all -> the student's kernel (``STUDENT``);
  a given cell's variable is also reported by :func:`audit`, because the student can overwrite it.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

GRADER, IMPORT, STUDENT = "grader", "import", "student"
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)


def python_source(source: str) -> str:
    """Cell source without IPython's magics and shell escapes (``%matplotlib inline``), for ``ast``."""
    return "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(python_source(source))
    except (SyntaxError, ValueError):
        return None


def normalized(source: str) -> str:
    """A cell's text as two cells are compared: no blank lines around it, no trailing spaces on its lines."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def visible_part(source: str) -> str:
    """A test cell as the student sees it: without the hidden-tests region (what nbgrader removes)."""
    return HIDDEN.sub("", source)


def _import_stmt(node, alias) -> str:
    name = alias.name + (f" as {alias.asname}" if alias.asname else "")
    if isinstance(node, ast.Import):
        return f"import {name}"
    return f"from {'.' * node.level}{node.module or ''} import {name}"


def bindings(tree: ast.Module) -> dict[str, tuple[str, str | None]]:
    """Top-level names a cell binds, in order: name -> (``"import"``, statement) or (``"value"``, None)."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    continue
                bound = alias.asname or alias.name.split(".")[0]
                stmt = _import_stmt(node, alias)
                if isinstance(node, ast.Import) and not alias.asname and "." in alias.name:
                    stmt = f"import {alias.name}"
                out[bound] = ("import", stmt)
            continue
        for name in _stored_names(node):
            out[name] = ("value", None)
    return out


def _stored_names(node) -> list[str]:
    """Names a top-level statement binds at module level (not inside functions, classes or comprehensions)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    names: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(n.name)
            continue
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.append(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.extend(a.asname or a.name.split(".")[0] for a in n.names if a.name != "*")
        elif isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
            names.append(n.target.id)
        stack.extend(ast.iter_child_nodes(n))
    return names


def used_names(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def kernel_prelude(source: str) -> str:
    """The top-level imports and assignments of a test cell's visible part: what the student's notebook had
    bound after running it, replayed in the kernel (nothing hidden, no check)."""
    visible = python_source(visible_part(source))
    try:
        tree = ast.parse(visible)
    except (SyntaxError, ValueError):
        return ""
    keep = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)
    return "\n".join(ast.get_source_segment(visible, node) or "" for node in tree.body if isinstance(node, keep))


def top_level_imports(source: str) -> str:
    """A cell's top-level ``import`` statements (outside its hidden part too), as source."""
    text = python_source(source)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ""
    return "\n".join(ast.get_source_segment(text, node) or "" for node in tree.body
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


@dataclass
class Origin:
    side: str               # GRADER, IMPORT or STUDENT
    statement: str | None   # the import statement, for IMPORT
    given_variable: bool    # STUDENT because a given cell assigned it (the rule the audit enforces)


class Resolver:
    """Name origins for every test cell of one canonical notebook (cells as ``(kind, grade_id, source)``)."""

    def __init__(self, cells: list[tuple[str, str, str]]):
        self.cells = cells
        self._bindings = []
        for kind, _, source in cells:
            tree = parse(source) if kind != "markdown" else None
            self._bindings.append(bindings(tree) if tree is not None else {})

    def origins(self, index: int) -> dict[str, Origin]:
        """Where each free name of test cell ``index`` comes from."""
        tree = parse(self.cells[index][2])
        if tree is None:
            return {}
        own = set(bindings(tree))
        out = {}
        for name in sorted(used_names(tree) - own):
            out[name] = self._origin(name, index)
        return {k: v for k, v in out.items() if v is not None}

    def _origin(self, name: str, index: int) -> Origin | None:
        for i in range(index - 1, -1, -1):
            kind = self.cells[i][0]
            binding = self._bindings[i].get(name)
            if binding is None:
                continue
            if kind == "test":
                return Origin(GRADER, None, False)
            if kind == "given" and binding[0] == "import":
                return Origin(IMPORT, binding[1], False)
            return Origin(STUDENT, None, kind == "given")
        if hasattr(builtins, name):
            return None
        return Origin(STUDENT, None, False)


def defining_sources(cells: list[tuple[str, str]], upto: int, wanted) -> list[str]:
    """The sources of the student's cells (``answer`` or ``extra``; cells given as ``(kind, source)``) above
    ``upto`` that last define each name in ``wanted``, in notebook order (what a kit-free run executes).  A name a
    given cell defines last is the lab's, not the student's: no cell is run for it."""
    picked: set[int] = set()
    for name in wanted:
        for i in range(upto - 1, -1, -1):
            kind, source = cells[i]
            if kind not in ("answer", "extra", "given"):
                continue
            tree = parse(source)
            if tree is not None and name in bindings(tree):
                if kind != "given":
                    picked.add(i)
                break
    return [cells[i][1] for i in sorted(picked)]


def audit(cells: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """``(test grade_id, name)`` for every test cell that reads a given cell's variable (rule 4)."""
    resolver = Resolver(cells)
    out = []
    for i, (kind, gid, _) in enumerate(cells):
        if kind == "test":
            out.extend((gid, name) for name, origin in resolver.origins(i).items() if origin.given_variable)
    return out
