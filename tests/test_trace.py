"""The trace module: one format for simulated and measured steps, and what is read from it."""

import subprocess
import sys

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import Wait, simulate
from pipeline_kit.trace import Timeline, from_sim, service_times, stage_fwd_bwd


def test_trace_module_loads_neither_torch_nor_matplotlib():
    code = ("import sys, pipeline_kit.trace, pipeline_kit.sim, pipeline_kit.schedules; "
            "bad = [m for m in ('torch', 'matplotlib') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_simulator_records_waits_and_takes_per_op_durations():
    res = simulate(build_schedule("1f1b", 2, 2), durations=lambda r, op, s: 3.0 if op.kind == "F" else 5.0,
                   p2p_latency=0.5)
    # rank 1 is free at 0 but F0's activation arrives at 3 + 0.5
    assert res.waits[0] == Wait(1, 0, "forward", 0, 1, 0, 3.5)
    assert [(e.op.text(), e.start, e.end) for e in res.rank_events(1)][:2] == [("F0", 3.5, 6.5), ("B0", 6.5, 11.5)]


def test_a_simulated_trace_reads_back_its_own_costs():
    res = simulate(build_schedule("1f1b", 3, 4), fwd=[1.0, 2.0, 1.5], bwd=[2.0, 4.0, 3.0], p2p_latency=0.25)
    trace = from_sim(res, per_second=1e3, p2p_latency=0.25)
    assert trace["makespan"] == res.makespan / 1e3 and trace["p2p_latency"] == 0.25 / 1e3
    # as in a measured run, an op's span includes the wait for its input ...
    f0 = next(o for o in trace["timeline"] if o["rank"] == 1 and o["op"] == "F0")
    assert (f0["start"], f0["end"]) == (0.0, 3.25 / 1e3)
    # ... and the service times (the span minus the wait inside it) are exactly the costs
    fwd, bwd, _ = stage_fwd_bwd(service_times(trace))
    assert [round(t * 1e3, 9) for t in fwd] == [1.0, 2.0, 1.5] and [round(t * 1e3, 9) for t in bwd] == [2.0, 4.0, 3.0]
    # drawn, the waits are idle time again: the same bubble as the simulation
    tl = Timeline.from_trace(trace)
    idle = sum(b - a for r in range(3) for a, b in tl.idle_gaps(r))
    assert abs(idle - sum(res.idle)) < 1e-9
