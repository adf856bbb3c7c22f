"""M041's numbers: what each family returned by the kit's ``select_schedule`` does at PP4/M8 (v = 2)."""

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
            "loss_rank": select_schedule(pp=PP).loss_rank}
