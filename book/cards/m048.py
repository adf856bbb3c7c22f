"""M048's numbers: the size of the last stage's logits, and what the question bank's all_reduce(MAX) reports.

The chapter's MAX cases and its per-token example are small lists of losses; the same lists are evaluated here
(no torch: a mean and a max of a few floats)."""

from pipeline_kit.layout import PRESETS, even_layout, stage_costs


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    pp = 8
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    logits = spec.seq_len * spec.micro_batch_size * spec.vocab * 4           # fp32 logits of one microbatch
    negative = [0.0, 0.0, 0.0, -0.42]                                        # a loss that can be negative
    dp2 = [0.0, 0.0, 2.31, 2.45]                                             # DP = 2: two last-stage ranks
    token_losses = [[2.0, 1.0, 3.0, 2.0], [4.0, 6.0]]                        # microbatch 1 has 2 real tokens
    return {"logits_mib": logits / 2**20, "logits_tp4_mib": logits / 4 / 2**20,
            "f_last": costs[-1].fwd_flops / costs[1].fwd_flops,
            "max_neg": max(negative), "neg_loss": min(negative),
            "max_dp2": max(dp2), "mean_dp2": sum(dp2[2:]) / 2,
            "mean_of_means": sum(sum(t) / len(t) for t in token_losses) / len(token_losses),
            "per_token": sum(map(sum, token_losses)) / sum(map(len, token_losses))}
