"""The feedback a student reads in the notebook's language: the checks' messages, the verdict lines and the
self-grade, translated from gettext catalogs (``pipeline_kit/locale/<lang>/LC_MESSAGES/*.po``).

Why the finished message is translated, and not each string where it is written: the checks' feedback is hand-
written prose in f-strings, eight thousand lines of it, and it is the product; wrapping every one in
``_("...").format(...)`` would make it harder to read and to review, for the English reader first. So each f-string
of the checks is a catalog message as it is written in the source, its fields kept as they are
(``"slow_makespan[{name!r}] = {got:g} is the equal-stage step"``: :mod:`pipeline_kit.grading.feedback_catalogs`
extracts them), and a message the checks raise is matched against those templates: the most specific template that
the whole message fits gives the translation, each field filled with the text it matched (itself translated where it
is a message of its own, such as a property's feedback inside a check's). A message no template fits stays as it is:
a student's own exception text, a value. What a field holds is never re-formatted, so a translation shows the same
numbers, names and values as the English, and points are never touched: a language changes only words.

The language is a context (:func:`speaking`): the grader sets it for a notebook from the notebook's metadata
(``metadata.pipeline_kit.language``, which ``make-labs --lang`` writes), the tutor in the student's kernel from the
notebook Jupyter opened (or ``PIPELINE_KIT_LANG``).  English needs no catalog: it is the source.
"""

from __future__ import annotations

import contextvars
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ENGLISH = "en"
LANGUAGES = ("en", "zh_CN")                  # what a notebook's metadata may name
ALIASES = {"zh": "zh_CN", "zh-cn": "zh_CN", "zh_cn": "zh_CN", "zh-hans": "zh_CN", "en": "en", "en_us": "en"}
LOCALE = Path(__file__).resolve().parent / "locale"   # pipeline_kit/locale/<lang>/LC_MESSAGES/*.po
MAX_DEPTH = 4                                # a field holding a message holding a message...: how deep to translate
# a longer message is shown as it is: the kit's own are far shorter (a check's feedback is cut at 300 characters a
# part), and matching one costs time that grows faster than its length -- a student's exception text of 100,000
# characters would hold a grade for minutes
MAX_MESSAGE = 2000
_WORD = re.compile(r"[A-Za-z]{2,}")
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("pipeline_kit_language", default=None)
# the language outside any :func:`speaking` block: the tutor's kernel sets it once for its notebook (IPython runs
# each cell in a task of its own, with a copy of the context, so a context variable set in one cell is gone in the next)
_default = ENGLISH


def normalized(tag) -> str | None:
    """``"zh"``, ``"zh-CN"``, ``"zh_CN.UTF-8"`` -> ``"zh_CN"``; ``"en"`` -> ``"en"``; None for anything else."""
    if not isinstance(tag, str):
        return None
    key = tag.split(".")[0].strip().lower()
    return ALIASES.get(key) or (ENGLISH if re.split(r"[-_]", key)[0] == "en" else None)  # (en-GB, en_AU: English)


def current() -> str:
    return _current.get() or _default


@contextmanager
def speaking(lang: str | None):
    """Translate what is shown inside the block into ``lang`` (None or an unknown tag: English)."""
    token = _current.set(normalized(lang) or ENGLISH)
    try:
        yield
    finally:
        _current.reset(token)


def set_language(lang: str | None) -> str:
    """The language from now on, outside any :func:`speaking` block (the tutor's kernel: one notebook); returns
    the one set."""
    global _default
    _default = normalized(lang) or ENGLISH
    return _default


def notebook_language(nb) -> str:
    """The language a notebook's instructions are in (``metadata.pipeline_kit.language``), English by default."""
    try:
        meta = nb["metadata"]["pipeline_kit"]
        return normalized(meta.get("language")) or ENGLISH
    except (KeyError, TypeError, AttributeError):
        return ENGLISH


def environment_language() -> str | None:
    """``PIPELINE_KIT_LANG``, for a notebook whose file Jupyter does not name (nbval, a plain IPython)."""
    return normalized(os.environ.get("PIPELINE_KIT_LANG"))


# -- templates -----------------------------------------------------------------------------------------------------

def pieces(template: str) -> list[tuple[bool, str]]:
    """A template cut into ``(is_field, text)``: ``"{n:,} more{{x}}"`` -> ``[(True, "{n:,}"), (False, " more{x}")]``.
    A field is a brace-balanced ``{...}`` (an f-string's expression, its conversion and format spec); ``{{`` and
    ``}}`` are literal braces."""
    out: list[tuple[bool, str]] = []
    text, i, n = [], 0, len(template)
    while i < n:
        ch = template[i]
        if ch in "{}" and template[i:i + 2] in ("{{", "}}"):
            text.append(ch)
            i += 2
        elif ch == "{":
            depth, j = 0, i
            while j < n:
                depth += {"{": 1, "}": -1}.get(template[j], 0)
                if depth == 0:
                    break
                j += 1
            if text:
                out.append((False, "".join(text)))
                text = []
            out.append((True, template[i:j + 1]))
            i = j + 1
        else:
            text.append(ch)
            i += 1
    if text:
        out.append((False, "".join(text)))
    return out


def fields(template: str) -> list[str]:
    return [t for is_field, t in pieces(template) if is_field]


@dataclass(frozen=True)
class Template:
    msgid: str
    msgstr: str
    parts: tuple[tuple[bool, str], ...]   # the msgid's pieces (:func:`pieces`), and the msgstr's
    said: tuple[tuple[bool, str], ...]
    pattern: re.Pattern
    names: tuple[str, ...]   # each group's field, in order
    anchor: str              # the longest literal piece: a message without it cannot fit
    literal: int             # how many literal characters: the most specific fitting template wins
    ambiguous: bool          # two fields meet with no word between them: the cut is chosen (:func:`_best_split`)


def _compiled(msgid: str, msgstr: str) -> Template | None:
    msgid, msgstr = msgid.strip(), msgstr.strip()  # (a message is matched stripped: "rows. " is "rows.")
    parts = pieces(msgid)
    literals = [t for is_field, t in parts if not is_field]
    if not _WORD.search(" ".join(literals)) or not msgstr or msgstr == msgid:
        return None  # (a template of fields and punctuation alone would fit any message)
    regex, names, seen = [], [], {}
    for is_field, text in parts:
        if not is_field:
            regex.append(re.escape(text))
        elif text in seen:
            regex.append(f"(?P=g{seen[text]})")
        else:
            seen[text] = len(names)
            regex.append(f"(?P<g{len(names)}>.*?)")
            names.append(text)
    kinds = [is_field for is_field, _ in parts]
    between = [parts[i + 1][1] for i in range(len(parts) - 2) if kinds[i] and kinds[i + 2]]
    ambiguous = any(a and b for a, b in zip(kinds, kinds[1:])) or any(not _WORD.search(t) for t in between)
    return Template(msgid, msgstr, tuple(parts), tuple(pieces(msgstr)), re.compile("".join(regex), re.DOTALL),
                    tuple(names),
                    max(literals, key=len), sum(map(len, literals)), ambiguous)


# the checks', the verdicts' and those of the kit's errors a check passes on (the validator's, a family's refusal, a
# deadlock, a layout's): what a grade and the tutor translate with
FEEDBACK = ("course.", "grading.", "schedules.", "sim.blocking_p2p", "layout.spec", "plan.search")


def book_domains(page: str | None) -> tuple[str, ...]:
    """A book page's catalogs, its own first: that chapter's code cells', then the drawing modules', the trace's and
    the planner's (a figure of the kit's, a glued value of the page's, the planner's explanation it prints;
    ``pipeline_kit.viz.editions``, ``book/_ext/pk_i18n.py``).
    Never the feedback's: a template of one is no message of the other."""
    return (*((f"book.chapters.{page}",) if page else ()), "viz.", "trace", "layout.", "plan.")


@lru_cache(maxsize=None)
def _messages(lang: str) -> tuple:
    """``(catalog, message)`` for every translated, not fuzzy message of ``lang``'s catalogs (English has none: it
    is the source)."""
    folder = LOCALE / lang / "LC_MESSAGES"
    if lang == ENGLISH or not folder.is_dir():
        return ()
    from .translation import read_catalog

    return tuple((path.stem, m) for path in sorted(folder.glob("*.po")) for m in read_catalog(path)
                 if m.id and isinstance(m.id, str) and m.string and not m.fuzzy)


def _rank(name: str, domains: tuple[str, ...]) -> int | None:
    """Where catalog ``name`` stands among ``domains`` (prefixes, the first preferred), None if it is not one."""
    return next((i for i, d in enumerate(domains) if name == d or name.startswith(d)), None)


@lru_cache(maxsize=None)
def catalog(lang: str, domains: tuple[str, ...] = FEEDBACK) -> tuple[Template, ...]:
    """The templates of ``lang``'s catalogs in ``domains``: the most specific first, then the first domain's."""
    found = []
    for name, m in _messages(lang):
        rank = _rank(name, domains)
        if rank is not None and m.context is None:
            compiled = _compiled(m.id, m.string)
            if compiled is not None:
                found.append((-compiled.literal, rank, compiled))
    return tuple(t for _, _, t in sorted(found, key=lambda item: item[:2]))


@lru_cache(maxsize=None)
def _counted(lang: str) -> dict[str, str]:
    """``lang``'s counted nouns (``msgctxt "counted"``): ``"message"`` -> ``"条消息"``."""
    return {m.id: m.string for name, m in _messages(lang)
            if m.context == "counted" and _rank(name, FEEDBACK) is not None}


def counted(n: int, word: str, lang: str | None = None) -> str | None:
    """``n`` of ``word`` counted in ``lang`` (``"3 条消息"``), or None where its catalog has no such noun."""
    lang = current() if lang is None else (normalized(lang) or ENGLISH)
    found = _counted(lang).get(word) if lang != ENGLISH else None
    return f"{n:,} {found}" if found else None


def _balanced(text: str | None) -> bool:
    """A field's text opens as many brackets as it closes: a template that cuts through a bracket ("label ({form})"
    fitting "label (a) must be b, got (c)") is not the one the message was made from."""
    if text is None:
        return True
    depth = 0
    for ch in text:
        depth += (ch in _OPEN) - (ch in _CLOSE)
        if depth < 0:
            return False
    return depth == 0


def _fill(template: Template, match: re.Match, lang: str, depth: int, domains: tuple[str, ...]) -> str:
    found = {name: match.group(f"g{i}") for i, name in enumerate(template.names)}
    if template.ambiguous:
        found = _best_split(template, match.string, lang, depth, domains) or found
    values = {name: _translated(text, lang, depth + 1, domains) for name, text in found.items()}
    return "".join(values.get(text, text) if is_field else text for is_field, text in template.said)


MAX_SPLITS = 500  # ways to cut a message between two fields with nothing but a space (or nothing) between them


def _splits(parts: tuple[tuple[bool, str], ...], message: str):
    """Every way ``message`` fits ``parts``: ``{field: text}``, the shortest first field first."""
    def walk(i: int, pos: int, got: dict):
        if i == len(parts):
            if pos == len(message):
                yield dict(got)
            return
        is_field, text = parts[i]
        if not is_field:
            if message.startswith(text, pos):
                yield from walk(i + 1, pos + len(text), got)
            return
        if text in got:
            if message.startswith(got[text], pos):
                yield from walk(i + 1, pos + len(got[text]), got)
            return
        follow = parts[i + 1] if i + 1 < len(parts) else None
        if follow is None:
            ends = [len(message)]
        elif follow[0]:
            ends = range(pos, len(message) + 1)
        else:
            ends, at = [], message.find(follow[1], pos)
            while at >= 0:
                ends.append(at)
                at = message.find(follow[1], at + 1)
        for end in ends:
            got[text] = message[pos:end]
            yield from walk(i + 1, end, got)
            del got[text]
    return walk(0, 0, {})


@lru_cache(maxsize=65536)
def _fits(text: str, lang: str, domains: tuple[str, ...]) -> bool:
    """Whether a template fits ``text`` whole (not cut into pieces that do)."""
    return bool(text) and any(t.anchor in text and t.pattern.fullmatch(text) for t in catalog(lang, domains))


def _best_split(template: Template, message: str, lang: str, depth: int, domains: tuple[str, ...]) -> dict | None:
    """Where two fields meet with no words between them (``"{why} {BOOK}"``), the cut at which most fields hold a
    message of their own: the one the source composed (a lazy match cut ``why`` at its first space)."""
    best, best_score = None, (-1, -1, -1)
    for n, found in enumerate(_splits(template.parts, message)):
        if n >= MAX_SPLITS:
            break
        score = (sum(len(text) for text in found.values() if _fits(text.strip(), lang, domains)),  # whole messages
                 sum(_translated(text, lang, depth + 1, domains) != text for text in found.values()),
                 sum(bool(text.strip()) for text in found.values()))  # (then: no field left empty)
        if score > best_score:
            best, best_score = found, score
    return best


# How a language joins what the kit composes: a listing's items, a label and its message, a parenthesis.
PUNCTUATION = {"zh_CN": {"; ": "；", ": ": "：", "(": "（", ")": "）", ", ": "、", " and ": " 和 ", " or ": " 或 ",
                         ". ": "", ".": "。", ",": "，"}}
_NAMES = re.compile(r"`[^`]+`(?:(?:, | and | or |, and |, or )`[^`]+`)*")
_NAMES_JOIN = re.compile(r"(?<=`)(, and |, or |, | and | or )(?=`)")
_OPEN, _CLOSE = "([{", ")]}"


def joiner(lang: str | None = None) -> str:
    """How a listing of several messages joins them: ``"; "``, ``"；"``."""
    return PUNCTUATION.get(current() if lang is None else normalized(lang) or ENGLISH, {}).get("; ", "; ")


def _top_level(message: str) -> list[bool]:
    """For each character, whether it is outside every bracket and quote (a repr's ``": "`` is not a cut)."""
    out, depth, quote = [], 0, None
    for i, ch in enumerate(message):
        if quote is not None:
            out.append(False)
            if ch == quote and message[i - 1] != "\\":
                quote = None
            continue
        if ch in "'\"`" and (i == 0 or not message[i - 1].isalnum()):  # (an apostrophe in "rank's" opens nothing)
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        out.append(depth == 0 and quote is None and ch not in _OPEN)
    return out


def _cuts(message: str, sep: str, top: list[bool]) -> list[int]:
    at, found = message.find(sep), []
    while at >= 0:
        if top[at]:
            found.append(at)
        at = message.find(sep, at + 1)
    return found


def _sentence(text: str, lang: str, depth: int, domains: tuple[str, ...]) -> str:
    """A sentence of several: as a message, or as one without its full stop (a template rarely has it)."""
    done = _translated(text, lang, depth + 1, domains)
    if done == text and text.endswith("."):
        bare = _translated(text[:-1], lang, depth + 1, domains)
        return text if bare == text[:-1] else bare + PUNCTUATION.get(lang, {}).get(".", ".")
    return done


def _composed(message: str, lang: str, depth: int, domains: tuple[str, ...]) -> str | None:
    """A message no template fits, cut where the kit composes messages -- a listing's ``"; "`` and new lines,
    sentences, a label's ``": "``, a list's ``", "``, a closing parenthesis -- outside brackets and quotes, each piece
    translated; of the ways to cut it, the one that leaves the fewest English words.  None where no piece was
    translated (a student's own exception text keeps its punctuation)."""
    marks = PUNCTUATION.get(lang, {})
    if _NAMES.fullmatch(message) and " " in message and marks:  # "`1f1b`, `gpipe` and `zbv`": a list of names
        return _NAMES_JOIN.sub(lambda m: marks[m.group(1).removeprefix(",") if m.group(1) != ", " else ", "], message)
    top = _top_level(message)
    found = [done for done in _cut_ways(message, top, marks, lang, depth, domains) if done is not None]
    return min(found, key=english_words) if found else None


def english_words(text: str) -> int:
    """How many English words ``text`` shows outside code spans and quotes."""
    return len(_WORD.findall(re.sub(r"`[^`]*`|'[^']*'", " ", text)))


def _cut_ways(message: str, top: list[bool], marks: dict, lang: str, depth: int, domains: tuple[str, ...]):
    """Each way :func:`_composed` cuts ``message``, translated (None where nothing of it was)."""
    def each(said: list[str], translate=None) -> list[str] | None:
        done = [(translate or (lambda p: _translated(p, lang, depth + 1, domains)))(p) for p in said]
        return done if done != said else None

    def split(sep: str) -> list[str]:
        cuts = _cuts(message, sep, top)
        return [message[a:b] for a, b in zip([0, *[c + len(sep) for c in cuts]], [*cuts, len(message)])]
    for sep, joined in (("\n", "\n"), ("; ", marks.get("; ", "; ")), ("；", "；"), (" -> ", " -> ")):
        said = split(sep)
        if len(said) > 1:
            done = each(said)
            yield None if done is None else joined.join(done)
    sentences = [c + 1 for c in _cuts(message, ". ", top) if c + 2 < len(message) and not message[c - 1].isdigit()]
    if sentences:  # several sentences: each its own message
        said = [message[a:b].strip() for a, b in zip([0, *[c + 1 for c in sentences]], [*sentences, len(message)])]
        done = each(said, lambda p: _sentence(p, lang, depth, domains))
        yield None if done is None else marks.get(". ", " ").join(done)
    cuts = _cuts(message, ": ", top)
    if cuts:
        done = each([message[:cuts[0]], message[cuts[0] + 2:]])
        yield None if done is None else done[0] + marks.get(": ", ": ") + done[1]
    said = split(", ")
    if len(said) > 1:  # "52 candidates fit, 37 too big": a listing of messages, most of them (a sentence's commas
        done = each(said)  # are not a listing's)
        listing = done is not None and sum(d != p for d, p in zip(done, said)) * 2 > len(said)
        yield marks.get(",", ", ").join(done) if listing else None
    if message.endswith(")"):  # "label (a message)": the last parenthesis opened at the top level
        opened = [i for i in range(1, len(message)) if message[i] == "(" and top[i - 1]]
        if opened:
            head, inner = message[:opened[-1]].rstrip(), message[opened[-1]:]
            whole = each([head, inner])  # a template with its parentheses ("(the book: ...)")
            if whole is not None and whole[1] != inner:
                yield whole[0] + ("" if whole[1].startswith(marks.get("(", "(")) else " ") + whole[1]
            done = each([head, inner[1:-1]])
            yield None if done is None else f"{done[0]}{marks.get('(', ' (')}{done[1]}{marks.get(')', ')')}"


def translated(message: str, lang: str | None = None, depth: int = 0, domains: tuple[str, ...] = FEEDBACK) -> str:
    """``message`` in ``lang`` (the current language by default): the most specific template of ``domains``'
    catalogs it fits, its fields filled with what they matched; a message of several (``"a; b"``) part by part;
    else the message as it is."""
    lang = current() if lang is None else (normalized(lang) or ENGLISH)
    if lang == ENGLISH or not isinstance(message, str) or len(message) > MAX_MESSAGE:
        return message
    return _translated(message, lang, depth, domains)


@lru_cache(maxsize=65536)
def _translated(message: str, lang: str, depth: int, domains: tuple[str, ...]) -> str:
    if lang == ENGLISH or not message.strip() or depth > MAX_DEPTH:
        return message
    core = message.strip()
    if core != message:  # a padded field ("{name:<26}"): the words translated, the padding kept
        done = _translated(core, lang, depth, domains)
        return message if done == core else message.replace(core, done, 1)
    fitting = None  # the most specific template the message fits, whose fields hold whole brackets if one does
    for template in catalog(lang, domains):
        if template.anchor in message:
            match = template.pattern.fullmatch(message)
            if match is not None:
                if all(map(_balanced, match.groups())):
                    return _fill(template, match, lang, depth, domains)
                fitting = fitting or (template, match)  # (a value cut short, "[1, 2, ...", opens more than it closes)
    if fitting is not None:
        return _fill(*fitting, lang, depth, domains)
    composed = _composed(message, lang, depth, domains)
    return message if composed is None else composed


def reload() -> None:
    """Read the catalogs again at the next translation (after they, or :data:`LOCALE`, changed)."""
    for cached in (_messages, catalog, _counted, _translated, _fits):
        cached.cache_clear()
