"""M041's numbers: what each family returned by the kit's ``select_schedule`` does at PP4/M8 (v = 2), and the
name of the Megatron function ``get_forward_backward_func`` returns for each (Megatron-Core 0.19)."""

from pipeline_kit.schedules import select_schedule
from pipeline_kit.sim import simulate

PP, M, V = 4, 8, 2


def numbers() -> dict:
    one = select_schedule(pp=PP)(M)
    inter = select_schedule(pp=PP, vpp=V)(M)
    alone = select_schedule(pp=1)(M)
    return {"p2p_pp1": len(simulate(alone).transfers), "p2p_1f1b": len(simulate(one).transfers),
            "p2p_inter": len(simulate(inter).transfers),
            "fo_family": select_schedule(pp=PP, forward_only=True).name,
            "loss_rank": select_schedule(pp=PP).loss_rank,
            "fn_pp1": select_schedule(pp=1).megatron_function,
            "fn_1f1b": select_schedule(pp=PP).megatron_function,
            "fn_inter": select_schedule(pp=PP, vpp=V).megatron_function}
