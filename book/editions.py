"""Build the book in both languages, and keep the Chinese catalogs in step with the English source.

Why gettext: the English pages are the one source.  Sphinx splits them into messages (a paragraph, a list item,
a heading), ``book/locale/zh_CN/LC_MESSAGES/<page>.po`` holds each message's Chinese, and the Chinese edition is
the same build with those catalogs applied -- the same executed cells, so every figure and every number is the
one the kit computed for the English edition.  When an English message changes, ``--update`` marks its
translation fuzzy (or adds it untranslated) and ``--check`` counts them: the test suite runs the check, so an
English edit cannot land without its Chinese.

    python book/editions.py                      # both editions: book/_build/html and book/_build/html/zh
    python book/editions.py --path-output DIR -W -n --keep-going
    python book/editions.py --update             # after editing English: refresh the catalogs, print the counts
    python book/editions.py --check              # exit 1 unless every message is translated and none is fuzzy

The English build executes every notebook once, into a fresh jupyter-cache; the Chinese build reads that cache,
so it executes nothing.  ``jupyter-book build book`` alone still builds the English edition.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

BOOK = Path(__file__).resolve().parent
LOCALE = BOOK / "locale"
LANG = "zh_CN"
sys.path.insert(0, str(BOOK / "_ext"))
from pk_i18n import ENGLISH_ONLY  # noqa: E402  (the build's check and this one skip the same pages)

from pipeline_kit.translation import markup_problems  # noqa: E402
ZH_TITLE = "pipeline-kit：按 Megatron 的方式学流水线并行"


def _book_config() -> dict:
    """The book's ``_config.yml``, its local extensions' folders made absolute (a copy of the config lives
    elsewhere, and Jupyter Book reads those folders relative to the config file)."""
    cfg = yaml.safe_load((BOOK / "_config.yml").read_text(encoding="utf-8"))
    local = cfg.get("sphinx", {}).get("local_extensions") or {}
    for name, folder in local.items():
        local[name] = str(BOOK / folder)
    return cfg


def _config(out: Path, lang: str | None, cache: Path) -> Path:
    """The book's own ``_config.yml`` with the notebooks run through ``cache``, and for ``lang`` its catalogs."""
    cfg = _book_config()
    cfg["execute"] = {**cfg.get("execute", {}), "execute_notebooks": "cache", "cache": str(cache)}
    sphinx = cfg.setdefault("sphinx", {}).setdefault("config", {})
    sphinx["gettext_compact"] = False
    sphinx["html_js_files"] = [*sphinx.get("html_js_files", []), "editions/pk-edition.js"]  # the link to the twin
    if lang:
        cfg["title"] = ZH_TITLE
        cfg["sphinx"].setdefault("local_extensions", {})["pk_i18n"] = str(BOOK / "_ext")  # untranslated: a warning
        sphinx.update(language=lang, locale_dirs=[str(LOCALE)], html_search_language="zh")
    path = out / f"_config.{lang or 'en'}.yml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _jupyter_book(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("jupyter-book")
    return subprocess.run([str(exe), "build", str(BOOK), *args], capture_output=capture, text=True, check=False)


def build(out: Path, flags: list[str]) -> int:
    """English into ``out/_build/html``, then Chinese into ``out/_build/html/zh``, one execution for both."""
    work = out / "_build" / ".editions"
    cache = work / "jupyter_cache"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rc = _jupyter_book("--path-output", str(out), "--config", str(_config(work, None, cache)), *flags).returncode
    if rc:
        return rc
    for compiled in LOCALE.rglob("*.mo"):  # Sphinx compiles a .po older than its .mo only: a checkout's mtimes lie
        compiled.unlink()
    zh_out = work / "zh"
    rc = _jupyter_book("--path-output", str(zh_out), "--config", str(_config(work, LANG, cache)), *flags).returncode
    if rc:
        return rc
    target = out / "_build" / "html" / "zh"
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(zh_out / "_build" / "html"), str(target))
    return 0


def templates(into: Path) -> Path:
    """The English messages of every page (``.pot``), without executing anything: code cells are not translated."""
    work = Path(tempfile.mkdtemp(prefix="pipeline-kit-gettext-", dir=into))
    cfg = _book_config()
    cfg["execute"] = {**cfg.get("execute", {}), "execute_notebooks": "off"}
    cfg.setdefault("sphinx", {}).setdefault("config", {}).update(
        gettext_compact=False, gettext_location=False, project="pipeline-kit")  # (no machine's paths in them)
    (work / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    proc = _jupyter_book("--path-output", str(work), "--config", str(work / "_config.yml"), "--builder", "custom",
                         "--custom-builder", "gettext", "-q", capture=True)
    if proc.returncode:
        sys.exit(f"the gettext build failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return work / "_build" / "gettext"


def counts(pot_dir: Path) -> dict[str, tuple[int, int, int]]:
    """Per page: (messages, untranslated, fuzzy) of its catalog against the current English messages."""
    from babel.messages.pofile import read_po
    out = {}
    for pot in sorted(pot_dir.rglob("*.pot")):
        page = pot.relative_to(pot_dir).with_suffix("").as_posix()
        if page in ENGLISH_ONLY:
            continue
        with pot.open(encoding="utf-8") as fh:
            wanted = [m.id for m in read_po(fh) if m.id]
        po = LOCALE / LANG / "LC_MESSAGES" / f"{page}.po"
        have = {}
        if po.exists():
            with po.open(encoding="utf-8") as fh:
                have = {m.id: m for m in read_po(fh) if m.id}
        missing = sum(1 for w in wanted if w not in have or not have[w].string)
        fuzzy = sum(1 for w in wanted if w in have and have[w].string and have[w].fuzzy)
        exempt = term_list_messages() if page == "glossary" else {}
        broken = [(w, markup_problems(w, have[w].string)) for w in wanted
                  if w in have and have[w].string and w not in exempt]
        broken = [(w, lost) for w, lost in broken if lost]
        for w, lost in broken[:3]:
            print(f"{page}: the translation of {w[:60]!r}... lost {', '.join(lost)[:200]}", file=sys.stderr)
        out[page] = (len(wanted), missing, fuzzy + len(broken))
    return out


def report(table: dict[str, tuple[int, int, int]]) -> str:
    lines = [f"{'page':<28} {'messages':>8} {'untranslated':>12} {'fuzzy':>6}  (fuzzy: marked so, or markup lost)"]
    for page, (n, missing, fuzzy) in table.items():
        lines.append(f"{page:<28} {n:>8} {missing:>12} {fuzzy:>6}")
    n, missing, fuzzy = (sum(col) for col in zip(*table.values())) if table else (0, 0, 0)
    lines.append(f"{'all pages':<28} {n:>8} {missing:>12} {fuzzy:>6}")
    return "\n".join(lines)


def update(pot_dir: Path) -> None:
    """Merge the current English messages into the catalogs: new ones untranslated, changed ones fuzzy."""
    subprocess.run([sys.executable, "-m", "sphinx_intl", "update", "-p", str(pot_dir), "-l", LANG, "-d",
                    str(LOCALE), "-w", "0"], check=True, stdout=subprocess.DEVNULL)
    for page in ENGLISH_ONLY:  # (their catalogs would only hold docstrings: not kept)
        (LOCALE / LANG / "LC_MESSAGES" / f"{page}.po").unlink(missing_ok=True)
    fill_glossary()


def term_list_messages() -> dict[str, str]:
    """The glossary's term entries with their translations from the term list (book/glossary.yml): a headword and a
    Chinese line are their own translation, an English definition's is the entry's Chinese one (which the Chinese
    edition shows alone, so the English one's markup need not survive in it)."""
    from pk_glossary import glossary_lines, load_terms
    terms = load_terms(BOOK / "glossary.yml")
    given = {}
    for term in terms:
        n = len(term.headwords)
        english, chinese = glossary_lines([term])[n].strip(), glossary_lines([term], LANG)[n].strip()
        given.update({word: word for word in term.headwords})
        given[english], given[chinese] = chinese, chinese
    return given


def fill_glossary() -> None:
    """Write :func:`term_list_messages` into the glossary's catalog; the page's own paragraphs are translated like
    any other page's."""
    from babel.messages.pofile import read_po, write_po
    given = term_list_messages()
    po = LOCALE / LANG / "LC_MESSAGES" / "glossary.po"
    with po.open(encoding="utf-8") as fh:
        catalog = read_po(fh)
    for message in catalog:
        if message.id in given:
            message.string, message.flags = given[message.id], message.flags - {"fuzzy"}
    with po.open("wb") as fh:
        write_po(fh, catalog, width=0, omit_header=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python book/editions.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--path-output", default=str(BOOK), help="where _build goes (default: book/)")
    p.add_argument("--update", action="store_true", help="refresh book/locale from the English and print the counts")
    p.add_argument("--check", action="store_true", help="exit 1 unless every message is translated, none fuzzy")
    args, flags = p.parse_known_args(argv)
    if args.update or args.check:
        with tempfile.TemporaryDirectory(prefix="pipeline-kit-catalogs-") as tmp:
            pots = templates(Path(tmp))
            if args.update:
                update(pots)
            table = counts(pots)
        print(report(table))
        bad = sum(m + f for _, m, f in table.values())
        if args.check and bad:
            print(f"{bad} message(s) of the Chinese edition are untranslated or fuzzy: run python book/editions.py "
                  "--update, translate them in book/locale/zh_CN/LC_MESSAGES, and remove their fuzzy flags",
                  file=sys.stderr)
            return 1
        return 0
    return build(Path(args.path_output).resolve(), flags)


if __name__ == "__main__":
    sys.exit(main())
