"""M053's numbers, from the kit's torch-free blocking-P2P model (pipeline_kit.sim.blocking_p2p).

* The chapter's sequence diagram: 1F1B, pp = 2, M = 3, blocking sends then receives: the deadlock, and how many
  ranks it blocks.
* The chapter's hang: 1F1B, pp = 4, M = 8, rank 1 skips the send of microbatch 3's activation.  The chapter runs
  it with real processes; here the same fault goes through the blocking model (as in the chapter's Try it 2),
  and the root cause is found by the chapter's rule: the wait whose sender is already past the send.
"""

from pipeline_kit.schedules import build_schedule, message_plan
from pipeline_kit.sim.blocking_p2p import run_blocking, runtime_program


def numbers() -> dict:
    seq = build_schedule("1f1b", 2, 3)
    naive = [runtime_program(seq, r, send="send") for r in range(2)]
    naive_run = run_blocking(naive)

    one_f = build_schedule("1f1b", 4, 8)
    programs = [runtime_program(one_f, r) for r in range(4)]
    skip = next(i for i, it in enumerate(programs[1]) if isinstance(it, tuple) and it[0] == "isend" and it[2] == "F3")
    del programs[1][skip]                                # rank 1 skips the send of F3's activation
    hang = run_blocking(programs, tagged=True)

    def index(rank, name):
        return [op.text() for op in one_f.ranks[rank]].index(name)

    roots = [(w.peer, r) for r, w in hang.blocked.items()
             if w.peer in hang.blocked and index(w.peer, hang.blocked[w.peer].comm.name) > index(w.peer, w.comm.name)]
    root, victim = roots[0]
    assert naive_run.deadlocked  # (the chapter's sequence diagram: blocking sends facing each other)
    return {"naive_blocked": len(naive_run.blocked), "hang_ranks": len(programs),
            "hang_blocked": len(hang.blocked), "hang_root": root, "hang_victim": victim,
            "channel_msgs": len(message_plan(one_f)[(1, 2)])}
