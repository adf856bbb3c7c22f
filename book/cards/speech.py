"""How long a card's 30-second answer takes to SAY: spoken syllables in Chinese, spoken words in English.

Why not count characters or words as written: an answer is rehearsed aloud, and what it is made of -- Megatron's
identifiers, acronyms, numbers, formulas -- is much longer spoken than written.  ``PP4/M8`` is one "word" and no
Chinese character, but five syllables (P P 四 M 八); ``(p − 1)/(M + p − 1)`` is one more and eleven syllables;
``30.4%`` is 百分之三十点四.  Counting Han characters alone let answers through that take 35-39 s to say.

The rates and caps:

* Chinese: about 4.5 syllables a second for technical speech a listener can follow (conversational Mandarin runs
  at 4-6; an interview answer full of numbers sits at the slow end), so 30 s is ``ZH_RATE * 30 = 135`` syllables.
  One Han character is one syllable.
* English: about 150 words a minute, a steady presentation pace, so 30 s is 75 spoken words -- counted after
  numbers, symbols and acronyms are expanded into the words a speaker says.

How the text is read (documented heuristics; each overcounts rather than undercounts where unsure):

* Numbers as read aloud: Chinese ``2304`` 两千三百零四 (6), ``4.7`` 四点七 (3), ``12.5%`` 百分之十二点五 (7),
  ``1/v`` v 分之一 (4), ``10`` 十 (1); English ``2304`` "two thousand three hundred four" (5), ``30.4%``
  "thirty point four percent" (4), ``0.86`` "point eight six" (3).  ``1,920`` is one number.
* Acronyms letter by letter (``PP`` 2, ``GBS`` 3, ``1F1B`` 4, ``W`` 3 -- "double-u"); a few said as words are
  listed in :data:`SAID_AS_WORDS` (``GEMM``, ``NCCL``, ``MAX``).  A lowercase run without a vowel (``pp``,
  ``bf``, ``vpp``) is spelled too; one letter (``p``, ``M``) is one syllable / word.
* Other English words: Chinese counts their syllables by vowel groups (``a e i o u y`` runs), less a silent final
  ``e`` (``stage`` 1, ``schedule`` 2, ``pipelining`` 4); English counts each one word.  Identifiers split at
  ``_`` and at case changes (``forward_step_func`` is three words, ``ScheduleZBVZeroBubble`` four).
* Formula symbols as read: ``=`` 等于 / "equals", ``+`` 加 / "plus", ``−`` 减 / "minus" (a hyphen only between
  spaces; inside a word it is silent), ``×`` and ``·`` 乘 / "times", ``/`` 分之 / "over" (silent between two
  names like ``PP8/M16`` or ``send/recv``), ``%`` 百分之 / "percent", ``≥`` 大于等于 / "at least", ``→`` 到 /
  "to", ``–`` (a range) 到 / "to".  Brackets, punctuation and backquotes are silent.
"""

from __future__ import annotations

import re

ZH_RATE, EN_WPM, SECONDS = 4.5, 150, 30
MAX_ZH_SYLLABLES = round(ZH_RATE * SECONDS)          # 135
MAX_EN_WORDS = round(EN_WPM * SECONDS / 60)           # 75

SAID_AS_WORDS = {"GEMM": (1, 1), "NCCL": (2, 1), "MAX": (1, 1), "CUDA": (2, 1), "NaN": (1, 1), "Adam": (2, 1),
                 "GPipe": (2, 1), "MoE": (2, 1)}      # zh syllables, en words
LETTER_SYLLABLES = {"W": 3, "w": 3}                   # every other letter name is one syllable

#: symbol -> (Chinese syllables, English words)
SYMBOLS = {"=": (2, 1), "+": (1, 1), "−": (1, 1), "×": (1, 1), "·": (1, 1), "*": (1, 1), "%": (3, 1),
           "≥": (4, 2), "≤": (4, 2), ">": (2, 2), "<": (2, 2), "≫": (3, 3), "≈": (3, 1), "~": (1, 1),
           "→": (1, 1), "–": (1, 1), "/": (2, 1)}

_TOKEN = re.compile(r"""
    (?P<han>[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])
  | (?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|\d+(?:\.\d+)?)(?P<pct>%)?
  | (?P<word>[A-Za-z]+(?:['’]s\b)?)
  | (?P<hyphen>(?<=\s)-(?=\s))
  | (?P<slash>/)
  | (?P<symbol>[=+−×·*%≥≤><≫≈~→–])
""", re.X)
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[A-Z]")
_NAME = re.compile(r"[A-Za-z]\w*")


# -- numbers ------------------------------------------------------------------------------------------------------

def zh_integer(n: int) -> int:
    """Syllables of a non-negative integer read in Chinese: 2304 两千三百零四 6, 10 十 1, 110 一百一十 4."""
    if n == 0:
        return 1
    if 10 <= n < 20:
        return 1 if n == 10 else 2                   # 十, 十五: no leading 一
    groups = []                                       # 4-digit groups, lowest first (个, 万, 亿, 万亿)
    while n:
        n, rest = divmod(n, 10_000)
        groups.append(rest)
    count, higher = 0, False
    for i in range(len(groups) - 1, -1, -1):
        g = groups[i]
        if g == 0:
            continue
        if higher and g < 1000:
            count += 1                                # 一万零五
        count += _zh_group(g) + (1 if i else 0)       # the group's digits and units, then 万 / 亿
        higher = True
    return count


def _zh_group(g: int) -> int:
    """One 4-digit group: a digit and its unit per non-zero digit, one 零 per run of inner zeros."""
    count, started, zero = 0, False, False
    for place in (1000, 100, 10, 1):
        d = g // place % 10
        if d:
            count += (1 if zero else 0) + 1 + (1 if place > 1 else 0)
            started, zero = True, False
        elif started:
            zero = True
    return count


_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]


def en_integer(n: int) -> int:
    """Words of a non-negative integer read in English: 2304 "two thousand three hundred four" 5, 23 2."""
    if n < 20:
        return 1
    if n < 100:
        return 1 if n % 10 == 0 else 2
    if n < 1000:
        return 2 + (en_integer(n % 100) if n % 100 else 0)
    for size in (10**12, 10**9, 10**6, 1000):
        if n >= size:
            high, low = divmod(n, size)
            return en_integer(high) + 1 + (en_integer(low) if low else 0)
    raise AssertionError(n)


def _number(text: str, percent: bool, lang: str) -> int:
    whole, _, frac = text.replace(",", "").partition(".")
    if lang == "zh":
        return zh_integer(int(whole)) + (1 + len(frac) if frac else 0) + (3 if percent else 0)
    lead = 0 if (frac and int(whole) == 0) else en_integer(int(whole))    # "point eight six"
    return lead + (1 + len(frac) if frac else 0) + (1 if percent else 0)


# -- words --------------------------------------------------------------------------------------------------------

def en_syllables(word: str) -> int:
    """Syllables of an English word by vowel groups, less a silent final e: stage 1, schedule 2, bubble 2."""
    w = word.lower()
    groups = len(re.findall(r"[aeiouy]+", w))
    if groups > 1 and w.endswith("e") and not re.search(r"[^aeiouy]le$", w):
        groups -= 1
    return max(groups, 1)


def _spelled(part: str) -> int:
    return sum(LETTER_SYLLABLES.get(c, 1) for c in part)


def _word(word: str, lang: str) -> int:
    """A run of letters: said as a word, spelled letter by letter, or split into an identifier's parts."""
    word = re.sub(r"['’]s$", "", word)
    if word in SAID_AS_WORDS:
        return SAID_AS_WORDS[word][0 if lang == "zh" else 1]
    total = 0
    for part in _PARTS.findall(word):
        if part.isupper() or not re.search(r"[aeiouy]", part, re.I) or len(part) == 1:
            total += _spelled(part) if lang == "zh" else len(part)  # an acronym: one word per letter
        else:
            total += en_syllables(part) if lang == "zh" else 1
    return total


# -- a whole text -------------------------------------------------------------------------------------------------

def spoken(text: str, lang: str) -> int:
    """Syllables (``lang="zh"``) or words (``"en"``) it takes to say ``text`` aloud, by the module's rules."""
    if lang not in ("zh", "en"):
        raise ValueError(f"spoken: argument lang must be 'zh' or 'en', got {lang!r}")
    total = 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup if m.lastgroup != "pct" else "number"
        if m.group("han"):
            total += 1 if lang == "zh" else 0
        elif m.group("number"):
            total += _number(m.group("number"), bool(m.group("pct")), lang)
        elif m.group("word"):
            total += _word(m.group("word"), lang)
        elif m.group("hyphen"):
            total += 1
        elif m.group("slash"):
            total += 0 if _between_names(text, m.start()) else SYMBOLS["/"][0 if lang == "zh" else 1]
        elif kind == "symbol":
            total += SYMBOLS[m.group("symbol")][0 if lang == "zh" else 1]
    return total


def _between_names(text: str, at: int) -> bool:
    """A slash between two names is not a division: PP8/M16, send/recv, F/B (but 1/M and (p − 1)/M divide)."""
    left = re.search(r"([A-Za-z][\w]*)$", text[:at])
    right = _NAME.match(text, at + 1)
    if not (left and right):
        return False
    single = re.fullmatch(r"[A-Za-z]", left.group(1)) and re.fullmatch(r"[A-Za-z]", right.group(0))
    return not single or (left.group(1).isupper() and right.group(0).isupper())


def seconds(text: str, lang: str) -> float:
    """How long ``text`` takes to say at the module's rate."""
    n = spoken(text, lang)
    return n / ZH_RATE if lang == "zh" else n * 60 / EN_WPM
