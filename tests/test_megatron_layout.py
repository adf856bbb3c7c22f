"""Megatron-Core 0.19's layout rules (pipeline_kit.layout.megatron): the layouts the book shows, MTP layers and
empty stages included, validate or fail for the reason Megatron's ``validate_layer_layout`` gives."""

import pytest

from pipeline_kit.layout import LayoutError, parse_layout
from pipeline_kit.layout.megatron import megatron_layout, megatron_stages

HELP_EXAMPLE = "E|(t|)*3,m|m||L"  # --pipeline-model-parallel-layout's help text in Megatron-Core 0.19


@pytest.mark.parametrize("pp,rule", [
    (1, "MTP should be always in the last virtual pipeline stage"),
    (2, "MTP should be always in the last virtual pipeline stage"),
    (4, "rank 0's last virtual stage holds 1 of the 2 MTP layers"),
    (8, "rank 4's last virtual stage holds 1 of the 2 MTP layers"),
])
def test_the_help_texts_example_validates_at_no_pp(pp, rule):
    assert megatron_stages(HELP_EXAMPLE) == ("E", "t", "t", "t", "m", "m", "", "L")
    with pytest.raises(LayoutError, match=rule):
        megatron_layout(HELP_EXAMPLE, pp, num_layers=3, mtp_num_layers=2)


def test_both_mtp_layers_in_one_stage_validate_at_pp_4_and_8():
    at4 = megatron_layout("E|(t|)*3,mm|||L", 4, num_layers=3, mtp_num_layers=2)
    assert [at4.rank_stages(r) for r in range(4)] == [["E", "mm"], ["t", ""], ["t", ""], ["t", "L"]]
    assert (at4.vpp, at4.mtp_rank, at4.mtp_standalone) == (2, 0, True)
    assert megatron_layout("E|(t|)*3,mm|||L", 8, 3, 2).mtp_rank == 4
    with pytest.raises(LayoutError, match="other than its last"):  # at pp 2 they fall in rank 0's third of four
        megatron_layout("E|(t|)*3,mm|||L", 2, 3, 2)


def test_the_first_rank_may_hold_the_mtp_layer_in_its_last_virtual_stage():
    layout = megatron_layout("Et|t|m|L", 2, num_layers=2, mtp_num_layers=1)
    assert [layout.rank_stages(r) for r in range(2)] == [["Et", "m"], ["t", "L"]]
    assert layout.mtp_rank == 0 and layout.mtp_standalone
    assert megatron_layout("Etm|L", 2, 1, 1).mtp_rank == 0  # without virtual stages too


def test_the_deepseek_v3_split_of_megatrons_guide():
    layout = megatron_layout("Et*3|(tt|)*29,m|L", 16, num_layers=61, mtp_num_layers=1)
    assert layout.rank_stages(0) == ["Ettt", "tt"] and layout.rank_stages(14) == ["tt", "m"]
    assert layout.rank_stages(15) == ["tt", "L"] and layout.mtp_rank == 14


def test_empty_stages_are_megatrons_and_not_the_kits():
    layout = megatron_layout("E||t|L", 2, num_layers=1)
    assert [layout.rank_stages(r) for r in range(2)] == [["E", "t"], ["", "L"]] and layout.mtp_rank is None
    with pytest.raises(LayoutError, match="empty"):
        parse_layout("E||t|L")


@pytest.mark.parametrize("text,pp", [("Et*3|t*4|t*4|t*3L", 4), ("Et*2|(t*2|)*6t*2L", 8), ("E(t|)*5tL", 2)])
def test_layouts_both_readers_accept_are_placed_alike(text, pp):
    kit, megatron = parse_layout(text, pp=pp), megatron_layout(text, pp, parse_layout(text).num_layers)
    assert megatron.stages == tuple(_plain(st) for st in kit.stages)
    for k in range(kit.num_stages):
        rank, chunk = kit.owner(k, pp)
        assert megatron.rank_stages(rank)[chunk] == megatron.stages[k]


def _plain(stage) -> str:
    return ("E" if stage.embedding else "") + "t" * len(stage.layers) + ("L" if stage.loss else "")


@pytest.mark.parametrize("text,pp,layers,mtp,message", [
    ("Et|tL", 3, 2, None, "its 2 stages do not divide among 3 ranks"),
    ("tE|L", 2, 1, None, "first layer must be the embedding"),
    ("E|tL|t", 3, 2, None, "last layer must be the loss"),
    ("E|t|L", 3, 2, None, "it has 1 decoder layers, the model 2"),
    ("E|tm|L", 3, 1, None, "it has 1 MTP layers, --mtp-num-layers is None"),
    ("E|mt|L", 3, 1, 1, "a decoder layer comes after an MTP layer"),
    ("E|t|x|L", 4, 1, None, "the character 'x'"),
    ("E|(t|)*100001L", 2, 1, None, "more than the limit of 100,000 (MAX_REPEAT)"),
    ("E|((t)*1000)*1000|L", 3, 1, None, "the character '('"),  # Megatron does not nest groups
    ("E|" + "(t*100000|)*100" + "L", 2, 1, None, "MAX_LAYOUT_SYMBOLS"),
])
def test_refusals_name_the_rule(text, pp, layers, mtp, message):
    with pytest.raises(LayoutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        megatron_layout(text, pp, layers, mtp)


@pytest.mark.parametrize("kwargs,message", [
    ({"text": 5, "pp": 2, "num_layers": 1}, "argument text"),
    ({"text": "E|tL", "pp": 0, "num_layers": 1}, "argument pp"),
    ({"text": "E|tL", "pp": 2, "num_layers": -1}, "argument num_layers"),
    ({"text": "E|tL", "pp": 2, "num_layers": 1, "mtp_num_layers": 1.5}, "argument mtp_num_layers"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(LayoutError, match=message):
        megatron_layout(**kwargs)
