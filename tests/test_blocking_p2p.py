"""The blocking P2P model: naive blocking 1F1B deadlocks, batched or parity-ordered calls do not,
a skipped send under tags hangs exactly where the real runtime reports it."""

import pytest

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim.blocking_p2p import ProgramError, format_program, run_blocking, runtime_program


def programs(schedule, send="isend"):
    return [runtime_program(schedule, r, send) for r in range(schedule.pp)]


def batched(schedule, rank):
    """Megatron's steady state: each send goes out in one batch with the receive that follows it."""
    prog = runtime_program(schedule, rank, "send")
    out, i = [], 0
    while i < len(prog):
        item = prog[i]
        if isinstance(item, tuple) and item[0] == "send" and i + 1 < len(prog) and isinstance(prog[i + 1], tuple) \
                and prog[i + 1][0] == "recv":
            out.append([item, prog[i + 1]])
            i += 2
        else:
            out.append(item)
            i += 1
    return out


def parity(schedule, rank):
    """Unbatched, but a send and the receive after it swap places on odd ranks."""
    prog = runtime_program(schedule, rank, "send")
    out, i = [], 0
    while i < len(prog):
        item = prog[i]
        if rank % 2 and isinstance(item, tuple) and item[0] == "send" and i + 1 < len(prog) \
                and isinstance(prog[i + 1], tuple) and prog[i + 1][0] == "recv":
            out += [prog[i + 1], item]
            i += 2
        else:
            out.append(item)
            i += 1
    return out


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (3, 2), (5, 9)])
def test_runtime_order_with_nonblocking_sends_completes(pp, m):
    s = build_schedule("1f1b", pp, m)
    res = run_blocking(programs(s))
    assert res.completed, res.report()
    assert len(res.delivered) == 2 * m * (pp - 1)
    assert "completed" in res.report()


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8)])
def test_naive_blocking_sends_deadlock_with_a_cycle(pp, m):
    res = run_blocking(programs(build_schedule("1f1b", pp, m), "send"))
    assert not res.completed and res.deadlocked
    assert len(res.cycle) == 2
    a, b = res.cycle
    assert a.comm.kind == b.comm.kind == "send" and a.peer == b.rank and b.peer == a.rank
    assert "circular wait" in res.report()


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (3, 3), (6, 12)])
def test_batched_and_parity_orders_complete(pp, m):
    s = build_schedule("1f1b", pp, m)
    for make in (batched, parity):
        res = run_blocking([make(s, r) for r in range(pp)])
        assert res.completed, (make.__name__, res.report())


def test_gpipe_blocking_order_completes():
    # all forwards then all backwards: every send meets a receive already waiting
    res = run_blocking(programs(build_schedule("gpipe", 3, 4), "send"))
    assert res.completed, res.report()


def test_skipped_send_under_tags_hangs_like_the_runtime():
    s = build_schedule("1f1b", 4, 8)
    progs = programs(s)
    progs[1].remove(("isend", 2, "F3"))
    res = run_blocking(progs, tagged=True)
    assert not res.completed
    waits = {r: (w.comm.name, w.peer) for r, w in res.blocked.items()}
    assert waits == {0: ("B2", 1), 1: ("B2", 2), 2: ("F3", 1), 3: ("F3", 2)}
    # the counts the real runtime prints for this fault (book chapter p2p, lab05)
    assert (res.received[2][1], res.sent[2][1]) == (3, 2)
    assert (res.received[1][2], res.sent[1][2]) == (2, 4)
    assert (res.received[0][1], res.sent[0][1]) == (2, 6)
    assert {w.rank for w in res.cycle} == {1, 2}


def test_skipped_send_without_tags_is_an_ordering_error():
    progs = programs(build_schedule("1f1b", 4, 8))
    progs[1].remove(("isend", 2, "F3"))
    res = run_blocking(progs)
    assert res.errors and "F4" in res.errors[0] and "buffer for F3" in res.errors[0]


def test_last_skip_leaves_an_orphan_wait():
    progs = programs(build_schedule("1f1b", 2, 2))
    progs[1].remove(("isend", 0, "B1"))
    res = run_blocking(progs, tagged=True)
    assert res.finished == [False, True] and not res.cycle
    assert "which has finished its program" in res.report()


def test_program_errors():
    ok = [["F0", ("isend", 1, "F0")], [("recv", 0, "F0"), "F0"]]
    assert run_blocking(ok).completed
    early = [["F0", ("isend", 1, "F0")], ["F0", ("recv", 0, "F0")]]
    assert "before it has received" in run_blocking(early).errors[0]
    send_first = [[("isend", 1, "F0"), "F0"], [("recv", 0, "F0"), "F0"]]
    assert "before computing F0" in run_blocking(send_first).errors[0]
    unreceived = [["F0", ("isend", 1, "F0")], ["F0"]]
    assert "never received" in run_blocking(unreceived).errors[0]
    for bad in ([[("post", 1, "F0")], []], [[("send", 0, "F0")], []], [[("send", 1, 3)], []], [[7], []]):
        with pytest.raises(ProgramError):
            run_blocking(bad)
    with pytest.raises(ValueError):
        runtime_program(build_schedule("interleaved", 2, 4, 2), 0)


def test_format_program():
    text = format_program(["F0", [("send", 1, "F0"), ("recv", 1, "B0")], ("recv", 0, "F1")])
    assert text == "F0 | [send F0->1, recv B0<-1] | recv F1<-0"
