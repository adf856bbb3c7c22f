"""Megatron-style pipeline layouts: which layers live on which stage, written as a string (M050).

``"Et*3|t*4|t*4|t*3L"`` reads: stage 0 holds the embedding and 3 decoder layers, stages 1 and 2
hold 4 layers each, stage 3 holds 3 layers and the loss/output layer.  Stages are separated by
``|``; ``E`` is the embedding, ``t`` a decoder layer, ``L`` the loss (final norm + output layer);
``x*n`` repeats one item and ``(...)*n`` repeats a group, which may contain ``|``
(``"E|(t*2|)*6t*2L"``).  As in Megatron's ``--pipeline-model-parallel-layout``, stage ``k`` goes
to rank ``k % pp`` as model chunk ``k // pp``, so the number of stages fixes the virtual size.

Every error names the position in the string and the rule broken.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arguments import Arguments, shown
from ..inputs import InputError, check_text_size, excerpt
from ..limits import MAX_LAYERS, MAX_LAYOUT_NESTING, MAX_LAYOUT_SYMBOLS, MAX_REPEAT, LimitError
from ..schedules.ops import _stage_owner

SYMBOLS = {"E": "embedding", "t": "decoder layer", "L": "loss / output layer"}


class LayoutError(ValueError):
    """A layout string breaks a rule; the message names the position (1-based) and the rule."""


@dataclass(frozen=True)
class StageSpec:
    """What one stage holds: the embedding?, a contiguous range of decoder layers, the loss?"""

    embedding: bool
    layers: range
    loss: bool

    def __post_init__(self) -> None:
        arg = Arguments("StageSpec", LayoutError)
        arg.boolean("embedding", self.embedding)
        if not isinstance(self.layers, range) or self.layers.step != 1 or self.layers.start < 0:
            arg.refuse("layers", "a range of decoder layers, e.g. range(0, 4)", self.layers, wrong=True)
        arg.integer("layers", max(0, self.layers.stop - self.layers.start), 0, limit="MAX_LAYERS")
        arg.boolean("loss", self.loss)

    def text(self) -> str:
        n = len(self.layers)
        body = "" if n == 0 else ("t" if n == 1 else f"t*{n}")
        return ("E" if self.embedding else "") + body + ("L" if self.loss else "")


@dataclass(frozen=True)
class Layout:
    """The stages of a layout, first to last (:func:`parse_layout` reads one from its string)."""

    stages: tuple[StageSpec, ...]

    def __post_init__(self) -> None:
        stages = self.stages
        if not isinstance(stages, (tuple, list)) or not stages or not all(isinstance(st, StageSpec) for st in stages):
            Arguments("Layout", LayoutError).refuse("stages", "a non-empty tuple of StageSpec", stages, wrong=True)
        object.__setattr__(self, "stages", tuple(stages))

    @classmethod
    def from_counts(cls, counts) -> Layout:
        """Stage ``k`` holds the next ``counts[k]`` decoder layers; the first stage holds E, the last L."""
        arg = Arguments("Layout.from_counts", LayoutError)
        if not isinstance(counts, (list, tuple)) or not counts:
            arg.refuse("counts", "a non-empty list of layer counts", counts, wrong=True)
        if len(counts) > MAX_LAYERS + 2:
            arg.fail(f"argument counts: {len(counts):,} stages are more than the {MAX_LAYERS + 2:,} that MAX_LAYERS "
                     "decoder layers, E and L fill")
        for k, n in enumerate(counts):
            arg.integer(f"counts[{k}]", n, 0, limit="MAX_LAYERS")
        if sum(counts) > MAX_LAYERS:
            arg.fail(f"argument counts: {sum(counts):,} decoder layers in all, more than the limit of {MAX_LAYERS:,} "
                     "(MAX_LAYERS)")
        stages, start = [], 0
        for k, n in enumerate(counts):
            stages.append(StageSpec(k == 0, range(start, start + n), k == len(counts) - 1))
            start += n
        return cls(tuple(stages))

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def num_layers(self) -> int:
        return sum(len(s.layers) for s in self.stages)

    def chunks(self, pp: int) -> int:
        """Model chunks per rank on ``pp`` ranks (stages / pp: :meth:`check` says whether pp divides them)."""
        return self.num_stages // Arguments("Layout.chunks", LayoutError).integer("pp", pp, limit="MAX_RANKS")

    def owner(self, stage: int, pp: int) -> tuple[int, int]:
        """``(rank, chunk)`` of ``stage``: Megatron's looped placement, rank ``stage % pp``, chunk ``stage // pp``."""
        arg = Arguments("Layout.owner", LayoutError)
        arg.integer("stage", stage, 0, self.num_stages - 1)
        arg.integer("pp", pp, limit="MAX_RANKS")
        return _stage_owner(stage, pp, "looped")

    def __str__(self) -> str:
        return "|".join(s.text() for s in self.stages)

    def check(self, pp: int | None = None, layers: int | None = None) -> Layout:
        """Check the layout against a pipeline size and a model's layer count."""
        return self._check(Arguments("Layout.check", LayoutError), pp, layers)

    def _check(self, arg: Arguments, pp: int | None, layers: int | None) -> Layout:
        pp = arg.integer("pp", pp, none=True, limit="MAX_RANKS")
        layers = arg.integer("layers", layers, 0, none=True, limit="MAX_LAYERS")
        if layers is not None and self.num_layers != layers:
            raise LayoutError(f"the layout has {self.num_layers} decoder layers (t) but the model has {layers}")
        if pp is not None and self.num_stages % pp:
            raise LayoutError(f"the layout has {self.num_stages} stages, which pp={pp} does not divide: stage k goes "
                              f"to rank k % pp as chunk k // pp, so every rank needs the same number of stages")
        return self


def _expand(text: str) -> list[tuple[str, int]]:
    """Expand repeats: ``[(symbol, 1-based position in text), ...]`` with ``|`` kept as a symbol.

    The size is checked before each repeat is expanded (``MAX_REPEAT``, ``MAX_LAYOUT_SYMBOLS``), and
    so is the nesting (``MAX_LAYOUT_NESTING``), so no layout string can exhaust memory or the stack.
    """
    pos = 0
    total = 0  # symbols expanded so far, everywhere

    def number(at: int) -> int:
        nonlocal pos
        start = pos
        while pos < len(text) and "0" <= text[pos] <= "9":
            pos += 1
        if start == pos:
            raise LayoutError(f"position {at}: '*' must be followed by a repeat count, e.g. t*4")
        digits = text[start:pos]
        if len(digits) > len(str(MAX_REPEAT)) or int(digits) > MAX_REPEAT:
            shown = digits if len(digits) <= 20 else excerpt(digits, limit=20)
            raise LayoutError(f"position {start + 1}: repeat count {shown} is more than the limit of {MAX_REPEAT:,} "
                              f"(MAX_REPEAT)")
        value = int(digits)
        if value < 1:
            raise LayoutError(f"position {start + 1}: a repeat count must be at least 1, got {value}")
        return value

    def grow(by: int, at: int) -> None:
        nonlocal total
        total += by
        if total > MAX_LAYOUT_SYMBOLS:
            raise LayoutError(f"position {at}: the layout expands to more than the limit of {MAX_LAYOUT_SYMBOLS:,} "
                              f"symbols (MAX_LAYOUT_SYMBOLS)")

    def sequence(opened_at: int | None, depth: int = 0) -> list[tuple[str, int]]:
        nonlocal pos
        if depth > MAX_LAYOUT_NESTING:
            raise LayoutError(f"position {opened_at}: parentheses nested deeper than the limit of {MAX_LAYOUT_NESTING} "
                              f"(MAX_LAYOUT_NESTING)")
        out: list[tuple[str, int]] = []
        while pos < len(text):
            ch = text[pos]
            if ch.isspace():
                pos += 1
                continue
            if ch == ")":
                if opened_at is None:
                    raise LayoutError(f"position {pos + 1}: ')' without a matching '('")
                return out
            at = pos + 1
            if ch == "(":
                pos += 1
                group = sequence(opened_at=at, depth=depth + 1)
                pos += 1  # the ')'
                item = group
            elif ch in SYMBOLS or ch == "|":
                pos += 1
                item = [(ch, at)]
                grow(1, at)
            elif ch == "*":
                raise LayoutError(f"position {at}: '*' must follow an item (E, t, L or a group in parentheses)")
            else:
                hint = " (this kit's model has no MTP layers)" if ch == "m" else ""
                raise LayoutError(f"position {at}: unknown symbol {ch!r}{hint}; a layout uses E (embedding), "
                                  f"t (decoder layer), L (loss), | (stage boundary), x*n and (...)*n")
            if pos < len(text) and text[pos] == "*":
                star = pos + 1
                pos += 1
                times = number(star)
                grow(len(item) * (times - 1), star)  # the item itself is already counted
                item = item * times
            out.extend(item)
        if opened_at is not None:
            raise LayoutError(f"position {opened_at}: '(' is never closed")
        return out

    return sequence(opened_at=None)


def layout_text(func: str, text) -> Arguments:
    """The checks every reader of a layout string starts with (the kit's, Megatron's): a string, of a size the
    limits allow; returns the function's argument checker for the rest."""
    arg = Arguments(func, LayoutError)
    arg.text("text", text)
    try:
        check_text_size(text, f"{func}: argument text")
    except (InputError, LimitError) as exc:
        raise LayoutError(str(exc)) from None
    return arg


def parse_layout(text: str, pp: int | None = None, layers: int | None = None) -> Layout:
    """Parse and validate a layout string (see the module docstring for the rules)."""
    arg = layout_text("parse_layout", text)
    pp = arg.integer("pp", pp, none=True, limit="MAX_RANKS")
    layers = arg.integer("layers", layers, 0, none=True, limit="MAX_LAYERS")
    if not text.strip():
        raise LayoutError("the layout is empty; write stages like 'Et*2|t*2|t*2L'")
    symbols = _expand(text)
    stage_items: list[list[tuple[str, int]]] = [[]]
    bars: list[int] = []
    for sym, at in symbols:
        if sym == "|":
            stage_items.append([])
            bars.append(at)
        else:
            stage_items[-1].append((sym, at))
    decoder_layers = sum(sym == "t" for sym, _ in symbols)
    if decoder_layers > MAX_LAYERS:
        raise LayoutError(f"the layout has {decoder_layers:,} decoder layers, more than the limit of {MAX_LAYERS:,} "
                          f"(MAX_LAYERS)")
    last = len(stage_items) - 1
    stages, next_layer = [], 0
    seen_e = seen_l = None
    for k, items in enumerate(stage_items):
        if not items:
            if not bars:  # e.g. "()": nothing at all
                raise LayoutError("the layout holds no E, t or L; write stages like 'Et*2|t*2|t*2L'")
            where = (f"before the '|' at position {bars[0]}" if k == 0 else
                     f"after the '|' at position {bars[k - 1]}")
            raise LayoutError(f"stage {k} ({where}) is empty; every stage needs an E, a t or an L")
        emb = loss = False
        n = 0
        for i, (sym, at) in enumerate(items):
            if sym == "E":
                if seen_e is not None:
                    raise LayoutError(f"position {at}: a second E (the first is at position {seen_e}); "
                                      f"the model has one embedding")
                if k != 0 or i != 0:
                    raise LayoutError(f"position {at}: E must be the first item of the first stage "
                                      f"(found in stage {k})")
                seen_e, emb = at, True
            elif sym == "L":
                if seen_l is not None:
                    raise LayoutError(f"position {at}: a second L (the first is at position {seen_l}); "
                                      f"the model has one loss")
                if k != last or i != len(items) - 1:
                    raise LayoutError(f"position {at}: L must be the last item of the last stage (found in stage {k})")
                seen_l, loss = at, True
            else:
                n += 1
        stages.append(StageSpec(emb, range(next_layer, next_layer + n), loss))
        next_layer += n
    if seen_e is None:
        raise LayoutError("position 1: the layout has no E; the first stage must start with the embedding")
    if seen_l is None:
        raise LayoutError(f"position {len(text)}: the layout has no L; the last stage must end with the loss")
    return Layout(tuple(stages))._check(arg, pp, layers)


def even_layout(layers: int, stages: int) -> Layout:
    """Megatron's default: the same number of decoder layers on every stage (it must divide)."""
    _split_args("even_layout", layers, stages)
    if layers % stages:
        raise LayoutError(f"an even split needs the layer count (layers={layers}) to be a multiple of the stage "
                          f"count (stages={stages})")
    return uneven_layout(layers, stages)


def uneven_layout(layers: int, stages: int, first: int | None = None, last: int | None = None) -> Layout:
    """Megatron's ``--decoder-first/last-pipeline-num-layers``: fix the end stages, split the rest evenly."""
    arg = _split_args("uneven_layout", layers, stages)
    arg.integer("first", first, 0, none=True, limit="MAX_LAYERS")
    arg.integer("last", last, 0, none=True, limit="MAX_LAYERS")
    counts = [None] * stages
    if first is not None:
        counts[0] = first
    if last is not None:
        if stages == 1 and first is not None and first != last:
            raise LayoutError(f"with stages=1, first and last are the same stage (got first={first}, last={last})")
        counts[-1] = last
    fixed = sum(c for c in counts if c is not None)
    free = [i for i, c in enumerate(counts) if c is None]
    rest = layers - fixed
    if rest < 0 or (free and rest % len(free)) or (not free and rest):
        raise LayoutError(f"layers={layers} with first={first} last={last} leave {rest} for {len(free)} middle "
                          f"stage(s) of the stages={stages}, which must split evenly")
    for i in free:
        counts[i] = rest // len(free)
    layout = Layout.from_counts(counts)
    for k, s in enumerate(layout.stages):
        if not (s.embedding or s.loss or len(s.layers)):
            raise LayoutError(f"stage {k} of the stages={stages} would be empty: layers={layers} leave it none")
    return layout


def _split_args(func: str, layers: int, stages: int) -> Arguments:
    """The checks of :func:`even_layout` and :func:`uneven_layout`: whole numbers, and no more stages than the
    model has items (E, the layers, L) to fill them."""
    arg = Arguments(func, LayoutError)
    arg.integer("layers", layers, 0, limit="MAX_LAYERS")
    arg.integer("stages", stages)
    if stages > layers + 2:
        arg.fail(f"{layers} decoder layers, the embedding and the loss fill at most {layers + 2} stages; got "
                 f"stages={shown(stages)}")
    return arg
