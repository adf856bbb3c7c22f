"""Megatron-Core 0.19's layout rules as the kit restates them (pipeline_kit.layout.megatron_layout, issue 38).

The layouts are Megatron's own: its unit tests' (tests/unit_tests/pipeline_parallel/test_pipeline_layout.py), its
layout guide's (`E||t|L`, DeepSeek-V3's split) and the help text of --pipeline-model-parallel-layout, whose example
its own validate_layer_layout refuses.  (The restatement was also compared with Megatron's code itself, on every
layout a random generator drew; Megatron is not installed where the tests run.)
"""

import pytest

from pipeline_kit.layout import LayoutError, MegatronLayout, megatron_layout


@pytest.mark.parametrize("text,pp,layers,mtp,vpp,standalone", [
    ("E||t|L", 2, 1, 0, 2, False),                         # the guide's empty stage
    ("E|t|t*2|t||t|t|t*2mL", 4, 8, 1, 2, False),           # a unit test: rank 0's second chunk is empty
    ("E|t*3|(t|)*5mL", 4, 8, 1, 2, False),                 # unit tests: MTP in the last stage,
    ("E|t*3|(t|)*4tm|L", 4, 8, 1, 2, True),                # in the second last with a decoder layer,
    ("E|t*3|(t|)*3tt|m|L", 4, 8, 1, 2, True),              # and alone there
    ("Et*3|(tt|)*29,m|L", 16, 61, 1, 2, True),             # DeepSeek-V3 on PP16 (commas are cosmetic)
    ("Et*2|t*2L", 2, 4, 0, 1, False),
])
def test_megatrons_own_layouts_pass(text, pp, layers, mtp, vpp, standalone):
    lay = megatron_layout(text, pp, layers, mtp)
    assert isinstance(lay, MegatronLayout)
    assert (lay.vpp, lay.mtp_standalone) == (vpp, standalone)


def test_stages_go_to_rank_k_mod_pp_and_an_empty_stage_stays_empty():
    lay = megatron_layout("E|t|t*2|t||t|t|t*2mL", 4, 8, 1)
    assert lay.stages == ("E", "t", "tt", "t", "", "t", "t", "ttmL")
    assert [lay.rank_stages(r) for r in range(4)] == [["E", ""], ["t", "t"], ["tt", "t"], ["t", "ttmL"]]
    assert megatron_layout("Et*3|(tt|)*29,m|L", 16, 61, 1).rank_stages(14) == ["tt", "m"]


@pytest.mark.parametrize("pp", [4, 8])
def test_the_help_texts_example_fails_megatrons_rules(pp):
    """`E|(t|)*3,m|m||L` puts its two MTP layers in two virtual stages."""
    with pytest.raises(LayoutError, match="all of the MTP layers must be in the same one virtual pipeline stage"):
        megatron_layout("E|(t|)*3,m|m||L", pp, 3, 2)


@pytest.mark.parametrize("text,pp,layers,mtp,rule", [
    ("E|(t|)*3,m|m||L", 2, 3, 2, "must be in the last virtual pipeline stage of their rank"),
    ("tE|tL", 1, 2, 0, "the first layer must be embedding"),
    ("Et|Lt", 1, 2, 0, "the last layer must be loss"),
    ("Et|EtL", 1, 2, 0, "embedding must be specified exactly once"),
    ("Et|t*2L", 1, 2, 0, "must match num_layers"),
    ("Et|tL", 1, 2, 1, "must match mtp_num_layers"),
    ("Et|m|tL", 1, 2, 1, "decoder layers must be placed before MTP layers"),
    ("Et|t|tL", 2, 3, 0, "must be divisible by pipeline_model_parallel_size"),
    ("Et|xL", 1, 1, 0, "invalid layer character 'x'"),
    ("E(t|)*99999999999L", 1, 1, 0, "MAX_LAYOUT_SYMBOLS"),
])
def test_each_rule_refuses_with_megatrons_reason(text, pp, layers, mtp, rule):
    with pytest.raises(LayoutError, match=rule):
        megatron_layout(text, pp, layers, mtp)


def test_bad_arguments_are_named():
    with pytest.raises(LayoutError, match="argument pp"):
        megatron_layout("E||t|L", 0, 1)
    with pytest.raises(LayoutError, match="argument rank"):
        megatron_layout("E||t|L", 2, 1).rank_stages(2)
