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
