"""Lab 6 (M047, M048): typical wrong answers lose exactly their rubric points, with feedback that says why.

The notebook test grades the whole lab once, its 4-process torchrun job replayed from a recording;
the unit tests below call the check functions directly with right and wrong answers.
"""

from types import SimpleNamespace

import pytest
import torch
from lab_grading import SOLUTIONS, assert_partial, grade_answers

from pipeline_kit.course.labs import lab06
from pipeline_kit.course.questions import m047
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.layout import ModelSpec

LAB = "lab06_stages"


# -- one whole notebook: each wrong answer costs exactly its checks ----------------------------------------
@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """The loss not divided by M, a layout that loads the endpoints, an endpoint count without the position
    table -- each in its own answer cell; the real torchrun job replayed."""
    last_stage = '''def pipeline_step(stages, tokens, targets):
    logged = 0.0
    for x, y in zip(tokens, targets):
        inputs, outputs = [], []
        for s, stage in enumerate(stages):
            if s > 0:
                x = x.detach().requires_grad_()
            inputs.append(x)
            x = stage(x)
            outputs.append(x)
        loss = lm_loss(x, y)
        logged += loss.item() / len(tokens)
        loss.backward()
        for s in range(len(stages) - 2, -1, -1):
            outputs[s].backward(inputs[s + 1].grad)
    return logged
'''
    costs = '''def cost_table(spec, pp):
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    return {"params": [c.params for c in costs], "fwd_flops": [c.fwd_flops for c in costs],
            "activation_bytes": [c.activation_bytes for c in costs]}
my_layout = "Et*2|t|t|t*2L"
run_model = ModelSpec(vocab=256, seq_len=32, hidden=32, heads=4, layers=6, micro_batch_size=2)
my_layout_params = [c.params for c in stage_costs(parse_layout(my_layout), run_model, 4)]
'''
    follow_stages = '''bank_spec = PRESETS["bank-pp8"][0]
baseline_layers = bank_spec.layers // 8
baseline_params = cost_table(bank_spec, 8)["params"][1]
def endpoint_extra(spec):
    return {"first": spec.vocab * spec.hidden, "last": spec.vocab * spec.hidden + 2 * spec.hidden}
def tied_counts(cfg, num_stages):
    with torch.device("meta"):
        per_stage = [build_stage(cfg, s, num_stages).num_params() for s in range(num_stages)]
        unique = sum(p.numel() for p in GPT(cfg).parameters())
    return per_stage, unique
def decide_by_time(spec, pp, microbatches):
    t = cost_table(spec, pp)
    params, flops = t["params"], t["fwd_flops"]
    schedule = build_schedule("1f1b", pp, microbatches)
    w = [f / min(flops) for f in flops]
    slow = simulate(schedule, fwd=w, bwd=[2 * x for x in w]).makespan
    return {"by_params": params.index(max(params)), "by_time": flops.index(max(flops)),
            "makespan_ratio": slow / simulate(schedule, fwd=1, bwd=2).makespan}
'''
    report = grade_answers(tmp_path, LAB, {"last_stage": last_stage, "costs": costs, "follow_stages": follow_stages},
                           timeout=120)
    assert_partial(report, {"m048_main_scaling": "divide each microbatch's loss by M = 3",
                            "m047_main_costs": "give each of them fewer decoder layers",
                            "m047_follow_ends": "also holds the position embedding"})


# -- fast unit tests of the checks -----------------------------------------------------------------
@pytest.fixture(scope="module")
def sol():
    """The solution's given and answer cells in one namespace, without the torchrun cell."""
    import nbformat
    nb = nbformat.read(str(SOLUTIONS / f"{LAB}.ipynb"), as_version=4)
    ns: dict = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or "torchrun(" in cell.source:
            continue
        exec(cell.source.split("### END SOLUTION")[0], ns)  # noqa: S102 - the solution cells are the code under test
    return ns


def fake_run(params, grads="True", loss="5.7461", code=0):
    out = (f"schedule 1f1b: pp=4 microbatches=4 chunks=1; parameters per stage: {', '.join(f'{p:,}' for p in params)}\n"
           f"step 1/1  time    99.0 ms  loss {loss}  tokens/s 1\n"
           f"grads match the single-process reference: {grads} (max relative error 0.00e+00)\n")
    return SimpleNamespace(returncode=code, stdout=out, stderr="")


@pytest.mark.slow
def test_solution_passes(sol):
    lab06.check_stage_parts(sol["stage_parts"], [(2, 3, 7), (1, 4, 6)])
    lab06.check_build_stage(sol["build_my_stage"], [(lab06.small_cfg(layers=2), 1)])
    lab06.check_stage_io(sol["stage_io"], [(lab06.small_cfg(layers=2), 1, 1)])
    lab06.check_param_counts(sol["stage_param_counts"], [(lab06.small_cfg(layers=7, vocab=1000), 3)])
    lab06.check_bank_imbalance(sol["bank_imbalance"])
    lab06.check_cost_table(sol["cost_table"], [("tiny", 2)])
    lab06.check_grad_run(sol["my_layout"], sol["my_layout_params"], fake_run(sol["my_layout_params"]),
                         lab06_run_args())
    lab06.check_tied(sol["tied_counts"], [(lab06.small_cfg(layers=6, tie_embeddings=True), 3)])
    lab06.check_decide_by_time(sol["decide_by_time"], [("tiny", 4, 6)])
    lab06.check_last_stage(sol["pipeline_step"], [(lab06.small_cfg(layers=2), 1, 2)])
    lab06.check_scaling(sol["pipeline_step"], [(lab06.small_cfg(layers=3, seed=11), 3, 6)])
    lab06.check_logged_loss(sol["logged_loss"], cases=[(lab06.small_cfg(layers=3, seed=5), 1, 3)])
    lab06.check_vocab_parallel(sol["vocab_parallel_ce"], [(4, 64, 8, 1e5, 3), (3, 10, 1, 2.0, 4)])
    lab06.check_max_trick(sol["logged_by"], sol["max_trick_ok"], [[0.0], [1.5, 1.5], [-1.0, -1.0], [3.0, 0.0]], pp=8)
    lab06.check_production(sol["production_log_rank"], sol["production_op"], [(2, 3), (3, 4)])


def lab06_run_args():
    return ("--schedule", "1f1b", "-m", "4", "--steps", "1", "--layers", "6", "--hidden", "32", "--check-grads")


def test_construction_wrong_answers(sol):
    def local(stage, n, layers):
        d = sol["stage_parts"](stage, n, layers)
        return {**d, "layers": list(range(len(d["layers"])))}
    with pytest.raises(LabCheckFailed, match="number layers globally"):
        lab06.check_stage_parts(local, [(1, 4, 8)])
    with pytest.raises(LabCheckFailed, match="only the first stage \\(pre_process, stage 0\\)"):
        lab06.check_stage_parts(lambda s, n, layers: {**sol["stage_parts"](s, n, layers), "embedding": True},
                                [(1, 4, 8)])
    with pytest.raises(LabCheckFailed, match="build the stage yourself"):
        lab06.check_build_stage(lambda cfg, s, n: m047._kit_stage(cfg, s, n), [(lab06.small_cfg(layers=4), 2)])

    class Everything(torch.nn.Module):
        def __init__(self, cfg, stage, n):
            super().__init__()
            self.inner = sol["MyStage"](cfg, stage, n)
            self.embedding = sol["Embedding"](cfg) if stage else self.inner.embedding
            self.blocks, self.head = self.inner.blocks, self.inner.head
            del self.inner
    with pytest.raises(LabCheckFailed, match="built on stages 0 and 1: .*only the first stage builds the embedding"):
        lab06.check_build_stage(Everything, [(lab06.small_cfg(layers=4), 2)])


def test_inputs_and_counts_wrong_answers(sol):
    def float_tokens(cfg, s, n, mbs):
        d = sol["stage_io"](cfg, s, n, mbs)
        return {**d, "input": ((mbs, cfg.seq_len, cfg.hidden), torch.float32)} if s == 0 else d
    with pytest.raises(LabCheckFailed, match="the first stage takes token ids"):
        lab06.check_stage_io(float_tokens, [(lab06.small_cfg(layers=4), 4, 2)])
    with pytest.raises(LabCheckFailed, match="stage 0's input is integer token ids"):
        lab06.check_input_grad(lambda s, n: True, [4])
    with pytest.raises(LabCheckFailed, match="the ratio of the rounded figures"):
        lab06.check_bank_imbalance(39.1 / 14.2)
    with pytest.raises(LabCheckFailed, match="the last stage over a middle one"):
        lab06.check_bank_imbalance(38_753_280 / 14_175_744)

    def backward_flops(spec, pp):
        t = sol["cost_table"](spec, pp)
        return {**t, "fwd_flops": [2 * f for f in t["fwd_flops"]]}
    with pytest.raises(LabCheckFailed, match="is the backward's FLOPs"):
        lab06.check_cost_table(backward_flops, [("tiny", 2)])


def test_grad_run_wrong_answers(sol):
    args = lab06_run_args()
    with pytest.raises(LabCheckFailed, match="not a legal layout"):
        lab06.check_grad_run("Et*2|t|t|t*3L", [0] * 4, fake_run([0] * 4), args)
    with pytest.raises(LabCheckFailed, match="use one per rank \\(4\\)"):
        lab06.check_grad_run("E|t|t|t|t|t|t|L", [0] * 4, fake_run([0] * 4), args)
    params = sol["my_layout_params"]
    with pytest.raises(LabCheckFailed, match="my_layout_params is"):
        lab06.check_grad_run(sol["my_layout"], params[::-1], fake_run(params), args)
    with pytest.raises(LabCheckFailed, match="do not match the single-process reference"):
        lab06.check_grad_run(sol["my_layout"], params, fake_run(params, grads="False"), args)
    with pytest.raises(LabCheckFailed, match="the torchrun job failed"):
        lab06.check_grad_run(sol["my_layout"], params, fake_run(params, code=1), args)


def test_follow_up_stage_wrong_answers(sol):
    with pytest.raises(LabCheckFailed, match="one decoder layer"):
        lab06.check_baseline(2, sol["baseline_params"] // 2)
    with pytest.raises(LabCheckFailed, match="final LayerNorm"):
        lab06.check_endpoint_extra(lambda s: {"first": s.vocab * s.hidden + s.seq_len * s.hidden,
                                              "last": s.vocab * s.hidden}, ["bank-pp8"])
    with pytest.raises(LabCheckFailed, match=r"endpoint_extra\(<ModelSpec layers=12, .*position embedding"):
        lab06.check_endpoint_extra(lambda s: {"first": s.vocab * s.hidden, "last": s.vocab * s.hidden + 2 * s.hidden},
                                   [ModelSpec(layers=12, vocab=300)])

    def minus_copy(cfg, n):
        per, unique = sol["tied_counts"](cfg, n)
        return per[:-1] + [per[-1] - cfg.vocab * cfg.hidden], unique
    cfg = lab06.small_cfg(layers=6, tie_embeddings=True)
    with pytest.raises(LabCheckFailed, match="still holds its own copy"):
        lab06.check_tied(minus_copy, [(cfg, 3)])
    with pytest.raises(LabCheckFailed, match="count the tied matrix once"):
        lab06.check_tied(lambda c, n: (sol["tied_counts"](c, n)[0], sum(sol["tied_counts"](c, n)[0])), [(cfg, 3)])
    def by_params(spec, pp, m):
        return {**sol["decide_by_time"](spec, pp, m), "by_time": 0}
    with pytest.raises(LabCheckFailed, match="its embedding is a lookup"):
        lab06.check_decide_by_time(by_params, [("bank-pp8", 8, 16)])


def test_pipeline_step_wrong_answers(sol):
    def attached(stages, tokens, targets):
        for x, y in zip(tokens, targets):
            for stage in stages:
                x = stage(x)
            (sol["lm_loss"](x, y) / len(tokens)).backward()
        return 0.0
    with pytest.raises(LabCheckFailed, match="still attached to the previous stage's graph"):
        lab06.check_last_stage(attached, [(lab06.small_cfg(layers=4), 4, 3)])

    def last_only(stages, tokens, targets):
        for x, y in zip(tokens, targets):
            for s, stage in enumerate(stages):
                x = stage(x.detach().requires_grad_() if s else x)
            (sol["lm_loss"](x, y) / len(tokens)).backward()
        return 0.0
    with pytest.raises(LabCheckFailed, match="stage 0's parameter .* has no gradient"):
        lab06.check_last_stage(last_only, [(lab06.small_cfg(layers=4), 4, 3)])

    def twice(stages, tokens, targets):
        return sol["pipeline_step"](stages, tokens, [t for t in targets]) * len(tokens)
    with pytest.raises(LabCheckFailed, match="the sum of the microbatch losses"):
        lab06.check_scaling(twice, [(lab06.small_cfg(layers=4), 4, 3)])


def test_logging_and_vocab_wrong_answers(sol):
    cfg = lab06.small_cfg(layers=3, seed=5)
    with pytest.raises(LabCheckFailed, match="the sum over microbatches"):
        lab06.check_logged_loss(lambda c, m, b: sol["logged_loss"](c, m, b) * m, cases=[(cfg, 1, 3)])
    with pytest.raises(LabCheckFailed, match="the real run logged 9.9999"):
        lab06.check_logged_loss(sol["logged_loss"], fake_run([1], loss="9.9999"), lab06_run_args())
    with pytest.raises(LabCheckFailed, match="the first replica only"):
        lab06.check_dp_log(lambda r: sum(r[0]) / len(r[0]), [[[2.0, 2.5], [3.0, 3.5]]])

    def naive(shards, targets):
        part = shards[0].shape[1]
        se = sum(s.exp().sum(dim=1) for s in shards)
        tl = sum(torch.where((targets // part) == k, s.gather(1, (targets % part)[:, None])[:, 0], torch.zeros(()))
                 for k, s in enumerate(shards))
        return (se.log() - tl).mean()
    with pytest.raises(LabCheckFailed, match="exp overflows"):
        lab06.check_vocab_parallel(naive, [(5, 12, 4, 1e4, 1)])
    with pytest.raises(LabCheckFailed, match="gathered the shards"):
        lab06.check_vocab_parallel(lambda sh, t: torch.nn.functional.cross_entropy(torch.cat(sh, dim=1), t),
                                   [(6, 16, 2, 1.0, 0)])

    def local(shards, targets):
        part = shards[0].shape[1]
        return sum(torch.nn.functional.cross_entropy(s.as_subclass(torch.Tensor),
                                                     (targets - k * part).clamp(0, part - 1))
                   for k, s in enumerate(shards)) / len(shards)
    with pytest.raises(LabCheckFailed, match="normalises over its 8 words only"):
        lab06.check_vocab_parallel(local, [(6, 16, 2, 1.0, 0)])


def test_follow_up_loss_wrong_answers(sol):
    with pytest.raises(LabCheckFailed, match="rank 0 has no loss"):
        lab06.check_contributions(lambda pp, loss: [loss] + [0.0] * (pp - 1), [(4, 2.31)])
    with pytest.raises(LabCheckFailed, match="part of the autograd graph"):
        lab06.check_log_tensor(lambda loss: loss)
    with pytest.raises(LabCheckFailed, match="sharing the loss's storage"):
        lab06.check_log_tensor(lambda loss: loss.detach())
    with pytest.raises(LabCheckFailed, match="a negative loss loses to the other ranks' zeros"):
        lab06.check_max_trick(sol["logged_by"], lambda losses: True, [[2.31], [-0.42]])
    with pytest.raises(LabCheckFailed, match="zeros take part in the reduction"):
        lab06.check_max_trick(lambda op, losses, pp: max(losses) if op == "max" else sum(losses),
                              sol["max_trick_ok"], [[-0.42]])
    with pytest.raises(LabCheckFailed, match="rank holding the last virtual stage \\(the book"):
        lab06.check_production(lambda pp, vpp=None: 0, "broadcast_from_last_stage", [(4, None)])
    with pytest.raises(LabCheckFailed, match="with DP > 1, it logs the largest replica"):
        lab06.check_production(sol["production_log_rank"], "all_reduce_max", [(4, None)])
