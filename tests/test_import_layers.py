"""The kit's modules import in layers: no import circles (imports inside functions count too), every import runs
from a higher layer to a lower one (:data:`LAYERS`), the grading engine imports no lab's checks (the course sits
above it), and in the course the question modules sit below the lab modules that re-export them."""

import ast
import re
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
        if name.startswith("pipeline_kit.course.questions"):
            assert not {d for d in deps if d.startswith("pipeline_kit.course.labs")}, name
    assert "pipeline_kit.grading.engine" not in graph["pipeline_kit.grading.notebook"]


# The kit's packages, lowest first: a module imports only from its own layer or lower ones.
LAYERS = [
    # the rules everything shares (language: the feedback's and the figures' words in the reader's language)
    {"limits", "inputs", "arguments", "argtypes", "interrupts", "translation", "language"},
    {"schedules"}, {"trace"}, {"sim"}, {"layout"},  # no torch, no matplotlib
    {"runtime"}, {"run", "launch"},  # torch: the real pipeline and its launcher
    {"plan"},  # the planner: search and memory, drawing nothing
    {"viz"},  # the drawings (of schedules, traces and plans)
    {"grading"},  # the grading engine: sandbox, kernel, wire, batch, gradebook -- no lab by name
    {"course"},  # the course: each lab's checks by question, named by its canonical notebook
    {"cli", "__main__"},  # the command line
]


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else module
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_imports_run_downward():
    upward = sorted(f"{name} -> {dep}" for name, deps in _graph().items() if name != "pipeline_kit"
                    for dep in deps if dep != "pipeline_kit" and _layer(dep) > _layer(name))
    assert upward == []


def test_every_package_has_a_layer():
    tops = {name.split(".")[1] for name in _modules() if "." in name}
    assert tops <= set().union(*LAYERS), tops - set().union(*LAYERS)


def test_the_engine_imports_no_lab():
    """A lab is added by adding its notebook and its checks: the engine reaches a lab's checks only through the
    module its canonical notebook names (``metadata.pipeline_kit.checks``)."""
    graph = _graph()
    engine = {name: deps for name, deps in graph.items() if name.startswith("pipeline_kit.grading")}
    assert engine and not {f"{n} -> {d}" for n, deps in engine.items() for d in deps if ".course" in d}
    named = sorted(f"{path.name}:{node.lineno}: {node.value!r}" for path in (KIT / "grading").rglob("*.py")
                   for node in _code_strings(ast.parse(path.read_text())) if LAB_NAME.search(node.value))
    assert named == [], "the engine names a lab"


LAB_NAME = re.compile(r"\blab\d\d")


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module that are not docstrings (which may name a lab as an example)."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def test_a_circle_is_found():
    """The finder itself: a made-up circle through three modules is reported."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
