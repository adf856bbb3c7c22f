"""The kit's modules import in layers: no import circles (imports inside functions count too), and in the grading
package the engine sits below the notebook-facing layer and the question modules below the lab modules that
re-export them."""

import ast
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "pipeline_kit"


def _modules() -> dict[str, Path]:
    out = {}
    for path in KIT.rglob("*.py"):
        name = ".".join(path.relative_to(KIT.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the kit's modules it imports anywhere in its source."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(max(node.level - 1, 0)):
                    base = base.rsplit(".", 1)[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    deps.add(full if full in mods else target)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_grading_layers():
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("pipeline_kit.grading.questions"):
            assert not {d for d in deps if d.startswith("pipeline_kit.grading.labs")}, name
    assert "pipeline_kit.grading.engine" not in graph["pipeline_kit.grading.notebook"]


def test_a_circle_is_found():
    """The finder itself: a made-up circle through three modules is reported."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
