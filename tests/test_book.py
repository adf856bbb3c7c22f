"""The book builds offline with warnings as errors, and its built HTML holds together.

One build (every chapter executed by pipeline_kit, as a reader's build would) feeds every check:
each page of the table of contents exists, every internal link and image resolves, and each of
M041-M054 has its anchor.
"""

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from figure_outputs import figures_without_pictures

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


@pytest.fixture(scope="module")
def html(book_html) -> Path:
    return book_html  # built once per session (tests/conftest.py), shared with test_static_explorer.py


def toc_files() -> list[str]:
    toc = yaml.safe_load((BOOK / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])


def parse(path: Path) -> Links:
    p = Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_every_page_in_the_table_of_contents_exists(html):
    for f in toc_files():
        page = html / (f + ".html")
        assert page.exists(), f"{f} is in _toc.yml but {page} was not built"


def test_every_internal_link_and_image_resolves(html):
    pages = {p: parse(p) for p in html.rglob("*.html") if "_static" not in p.parts}
    problems = []
    for page, parsed in pages.items():
        for kind, targets in (("link", parsed.links), ("image", parsed.images)):
            for target in targets:
                url = urlparse(target)
                if url.scheme or target.startswith(("mailto:", "//")):
                    continue
                dest = page if not url.path else (page.parent / unquote(url.path)).resolve()
                if not dest.exists():
                    problems.append(f"{page.relative_to(html)}: {kind} {target} -> missing file")
                elif url.fragment and dest.suffix == ".html" and dest in pages \
                        and url.fragment not in pages[dest].ids:
                    problems.append(f"{page.relative_to(html)}: {kind} {target} -> no id {url.fragment!r}")
    assert not problems, "\n".join(problems[:30])


def test_each_question_has_an_anchor(html):
    ids = set()
    for page in html.rglob("*.html"):
        ids |= parse(page).ids
    missing = [f"m{n:03d}" for n in range(41, 55) if f"m{n:03d}" not in ids]
    assert not missing, f"no anchor for {missing}"


def test_numbers_are_computed_not_typed(html):
    """The PP8/M16 bubble appears in the bubble chapter as the simulator computed it."""
    text = re.sub(r"<[^>]+>", " ", (html / "chapters" / "bubble.html").read_text(encoding="utf-8"))
    assert "30.4%" in text


def test_executed_chapters_show_pictures_not_figure_text(html):
    """The build's executed notebooks: every figure a chapter shows is an image, never ``<Figure size ...>``."""
    executed = sorted((html.parent / "jupyter_execute").rglob("*.ipynb"))
    with_code = {p.stem for p in (BOOK / "chapters").glob("*.md") if "{code-cell}" in p.read_text(encoding="utf-8")}
    assert with_code and with_code <= {p.stem for p in executed}  # every chapter with code ran: none is missed
    found = [f for nb in executed for f in figures_without_pictures(nb)]
    assert not found, "\n".join(found)


class Sections(HTMLParser):
    """For each ``<section id=...>``: the text of every ``<kbd>`` inside it (sphinx-argparse writes each option's
    names as ``<kbd>--microbatches, -m</kbd>``), nested sections included; and every element id of the page."""

    def __init__(self):
        super().__init__()
        self.stack: list[str | None] = []
        self.kbd: dict[str, set[str]] = {}
        self.ids: set[str] = set()
        self._in_kbd = False
        self._text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "section":
            self.stack.append(a.get("id"))
            self.kbd.setdefault(a.get("id"), set())
        elif tag == "kbd":
            self._in_kbd, self._text = True, ""

    def handle_endtag(self, tag):
        if tag == "section" and self.stack:
            self.stack.pop()
        elif tag == "kbd" and self._in_kbd:
            self._in_kbd = False
            names = {n.strip() for n in self._text.split(",")}
            for sid in self.stack:
                self.kbd[sid] |= names

    def handle_data(self, data):
        if self._in_kbd:
            self._text += data


def parse_sections(path: Path) -> Sections:
    p = Sections()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _documented_arguments(parser) -> set[str]:
    """What the reference must show of one parser: each option's names, each positional's metavar (or dest)."""
    import argparse

    names = set()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names |= set(action.option_strings) or {action.metavar or action.dest}
    return names


def _subcommands(parser, path=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from _subcommands(sub, path + (name,))


def test_the_command_reference_shows_every_subcommand_and_option(html):
    """using/commands is generated from the parsers: every subcommand of ``python -m pipeline_kit`` (``gradebook
    merge`` too) has its section, holding each of its options, and the real runtime's every option is there."""
    from pipeline_kit.cli import build_parser
    from pipeline_kit.run import build_parser as run_parser

    page = parse_sections(html / "using" / "commands.html")
    problems = []
    commands = list(_subcommands(build_parser()))
    assert len(commands) >= 14, [c for c, _ in commands]
    for path, sub in commands:
        sid = "python-m-pipeline_kit-" + "-".join(path)
        if sid not in page.kbd:
            problems.append(f"no section for `{' '.join(path)}` (id {sid})")
            continue
        missing = _documented_arguments(sub) - page.kbd[sid]
        if missing:
            problems.append(f"`{' '.join(path)}` lacks {sorted(missing)}")
    missing = _documented_arguments(run_parser()) - page.kbd.get("torchrun-m-pipeline-kit-run", set())
    if missing:
        problems.append(f"pipeline_kit.run lacks {sorted(missing)}")
    assert not problems, "\n".join(problems)


def _api_directives() -> list[tuple[str, list[str] | None]]:
    """The automodule directives of using/api.md: (module, its explicit :members: list, or None for __all__)."""
    text = (BOOK / "using" / "api.md").read_text(encoding="utf-8")
    out = []
    for module, options in re.findall(r"\.\. automodule:: (\S+)\n((?:   :.*\n)*)", text):
        members = re.search(r":members:(.*)", options)
        names = [n.strip() for n in members.group(1).split(",") if n.strip()] if members else []
        out.append((module, names or (None if members else [])))
    return out


def test_the_api_reference_documents_every_public_name(html):
    """using/api is generated from the docstrings: every name in the ``__all__`` of each library package and of
    the grading engine has its entry (a re-export may be documented where it is defined), and so has every name
    the page lists for the modules without an ``__all__``."""
    import importlib

    ids = parse_sections(html / "using" / "api.html").ids
    directives = _api_directives()
    packages = {m for m, _ in directives}
    required = {f"pipeline_kit.{p}" for p in ("schedules", "sim", "trace", "layout", "plan", "viz", "launch",
                                              "runtime", "grading")}
    assert required <= packages, f"not on the API page: {sorted(required - packages)}"
    missing = []
    for module_name, members in directives:
        module = importlib.import_module(module_name)
        names = list(module.__all__) if members is None else members
        if members is None:
            assert hasattr(module, "__all__"), f"{module_name} has no __all__: list its public names on the page"
        for name in names:
            obj = getattr(module, name)
            home = getattr(obj, "__module__", None)
            if f"{module_name}.{name}" not in ids and not (home and f"{home}.{name}" in ids):
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names without an entry on the API page: {missing}"
    assert len(ids & {f"pipeline_kit.schedules.{n}" for n in importlib.import_module("pipeline_kit.schedules")
                      .__all__}) >= 30
