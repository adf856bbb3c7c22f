"""The representation: ops and schedules print and parse losslessly, in text and JSON."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline_kit.schedules import (
    Op,
    OpParseError,
    Schedule,
    ScheduleTextError,
    build_schedule,
    stage_owner,
    virtual_stage,
)


@pytest.mark.parametrize("text,op", [("F3", Op("F", 3)), ("B0", Op("B", 0)), ("F3c1", Op("F", 3, 1)),
                                     ("I3c1", Op("I", 3, 1)), ("W12c3", Op("W", 12, 3))])
def test_op_text_round_trip(text, op):
    assert Op.parse(text) == op
    assert op.text(show_chunk="c" in text) == text


def test_chunk_shown_only_when_schedule_has_chunks():
    one = build_schedule("1f1b", 2, 2)
    two = build_schedule("interleaved", 2, 2, chunks=2)
    assert one.op_text(Op("F", 1)) == "F1"
    assert two.op_text(Op("F", 1)) == "F1c0"


@pytest.mark.parametrize("bad", ["X3", "F", "3F", "F-1", "F3c", "f3", "F3 c1", ""])
def test_op_parse_rejects_with_example(bad):
    with pytest.raises(OpParseError, match="expected a kind F, B, I or W"):
        Op.parse(bad)


def test_virtual_stage_mapping_is_megatrons():
    # chunk c of rank r is virtual stage c * pp + r
    assert [virtual_stage(r, c, 4) for c in range(2) for r in range(4)] == list(range(8))
    assert stage_owner(6, 4) == (2, 1)


schedule_args = st.one_of(
    st.tuples(st.sampled_from(["gpipe", "1f1b", "zb-h1"]), st.integers(1, 6), st.integers(1, 12), st.just(None),
              st.booleans()),
    st.integers(2, 5).flatmap(lambda pp: st.tuples(st.just("interleaved"), st.just(pp),
                                                   st.integers(1, 3).map(lambda k: k * pp), st.integers(2, 4),
                                                   st.booleans())),
)


@given(schedule_args)
def test_text_and_json_round_trip(args):
    name, pp, m, v, fwd_only = args
    sched = build_schedule(name, pp, m, v, fwd_only)
    again = Schedule.from_text(sched.to_text())
    assert (again.name, again.pp, again.microbatches, again.chunks, again.ranks) == \
        (sched.name, sched.pp, sched.microbatches, sched.chunks, sched.ranks)
    assert Schedule.from_json(sched.to_json()) == sched


def test_text_without_header_infers_sizes_and_skips_idle_slots():
    sched = Schedule.from_text("r0: F0 F1 . B0 B1\nr1: . F0 B0 F1 B1\n")
    assert (sched.pp, sched.microbatches, sched.chunks, sched.name) == (2, 2, 1, "custom")
    assert sched.ranks[1] == [Op("F", 0), Op("B", 0), Op("F", 1), Op("B", 1)]


@pytest.mark.parametrize("text,message", [
    ("r0: F0 X1\n", r"line 1, item 2: 'X1' is not an op"),
    ("hello\n", r"line 1: expected 'rK: op op \.\.\.'"),
    ("r0: F0\nr2: F0\n", r"ranks \[1\] have no line"),
    ("r0: F0\nr0: B0\n", r"line 2: rank r0 is listed twice"),
    ("# schedule=x pp=3 microbatches=1\nr0: F0\n", r"header says pp=3 but there are 1 rank lines"),
    ("", r"no rank lines found"),
])
def test_text_errors_name_the_line(text, message):
    with pytest.raises(ScheduleTextError, match=message):
        Schedule.from_text(text)


def test_json_contract_fields():
    d = build_schedule("1f1b", 2, 3).to_dict()
    assert d == {"schedule": "1f1b", "pp": 2, "microbatches": 3, "chunks": 1,
                 "ranks": [["F0", "F1", "B0", "F2", "B1", "B2"], ["F0", "B0", "F1", "B1", "F2", "B2"]]}


@pytest.mark.parametrize("kwargs,message", [
    ({"pp": 0, "microbatches": 1}, "pp must be a positive integer"),
    ({"pp": 1, "microbatches": 1, "chunks": 0}, "chunks must be a positive integer"),
    ({"pp": 2, "microbatches": 1, "ranks": [[]]}, "pp=2 but 1 rank lists"),
])
def test_schedule_constructor_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Schedule("x", **kwargs)


def test_v_placement_puts_chunk_1_of_rank_r_on_stage_2pp_minus_1_minus_r():
    # ZB-V / DualPipe-V: down the ranks on chunk 0, back up on chunk 1
    assert [virtual_stage(r, c, 4, "v") for c in range(2) for r in range(4)] == [0, 1, 2, 3, 7, 6, 5, 4]
    assert [stage_owner(s, 4, "v") for s in (0, 3, 4, 7)] == [(0, 0), (3, 0), (3, 1), (0, 1)]
    v = Schedule("v", 4, 1, 2, placement="v")
    assert [v.stages_of(r) for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert [v.rank_of(s) for s in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert [v.chunk_of(s) for s in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    looped = Schedule("l", 4, 1, 2)
    assert looped.placement == "looped" and looped.stage_of(1, 1) == 5 and looped.rank_of(5) == 1


def test_placement_travels_in_text_and_json_and_is_absent_when_looped():
    v = Schedule.from_text("# schedule=v pp=2 microbatches=1 chunks=2 placement=v\n"
                           "r0: F0c0 F0c1 B0c1 B0c0\nr1: F0c0 F0c1 B0c1 B0c0\n")
    assert v.placement == "v"
    assert v.to_text().splitlines()[0] == "# schedule=v pp=2 microbatches=1 chunks=2 placement=v"
    assert Schedule.from_text(v.to_text()) == v
    assert v.to_dict()["placement"] == "v" and Schedule.from_json(v.to_json()) == v
    looped = build_schedule("interleaved", 2, 2, 2)
    assert "placement" not in looped.to_dict() and "placement" not in looped.to_text()
    assert Schedule.from_dict({k: val for k, val in looped.to_dict().items()}).placement == "looped"


def test_bad_placement_is_refused_with_the_rule():
    with pytest.raises(ScheduleTextError, match=r"^header: placement must be one of looped, v, got 'w'$"):
        Schedule.from_text("# pp=1 placement=w\nr0: F0\n")
    with pytest.raises(ScheduleTextError, match=r"^header: placement 'v' puts exactly 2 chunks on each rank, got "
                                                r"chunks=1$"):
        Schedule.from_text("# pp=1 chunks=1 placement=v\nr0: F0\n")
    with pytest.raises(ValueError, match="placement 'v' puts exactly 2 chunks"):
        Schedule("x", 2, 2, 3, placement="v")


@pytest.mark.parametrize("name,pp,m,v", [("interleaved", 4, 8, 2), ("zbv", 4, 8, None), ("1f1b", 8, 16, None)])
@pytest.mark.parametrize("width", [24, 40, 76])
def test_a_grid_wrapped_at_a_width_keeps_every_line_within_it_and_reads_back(name, pp, m, v, width):
    sched = build_schedule(name, pp, m, v)
    grid = sched.to_grid(width=width)
    assert max(len(line) for line in grid.splitlines()) <= width
    blocks = grid.rstrip("\n").split("\n\n")
    heads = [b.splitlines()[0] for b in blocks]
    assert len(blocks) > 1 and all(h.startswith("op") for h in heads), heads
    sizes = [len(b.splitlines()[1].split()) - 1 for b in blocks]  # columns of each block, by rank 0's row
    assert max(sizes) - min(sizes) <= 1  # the blocks as even as can be
    rows = {}
    for block in blocks:  # rank r's pieces, block after block, are rank r's whole order
        for line in block.splitlines()[1:]:
            label, _, ops = line.partition(":")
            rows.setdefault(label, []).extend(ops.split())
    assert Schedule.from_text("\n".join(f"{k}: {' '.join(ops)}" for k, ops in rows.items())).ranks == sched.ranks
    assert sched.to_grid(width=10_000) == sched.to_grid()  # a width that holds it all changes nothing
