"""Chrome trace / Perfetto JSON: open any timeline in chrome://tracing or ui.perfetto.dev.

One process, one track (thread) per rank, one complete event (``"ph": "X"``) per op named like the
schedule's text form (``F3c1``); P2P waits of a measured run become their own events.
"""

from __future__ import annotations

from .timeline import KIND_NAMES, Timeline


def to_chrome_trace(tl: Timeline) -> dict:
    """Chrome trace-event JSON.  Times become microseconds: ms x 1000, abstract units as if ms."""
    scale = 1e3  # ms -> us (measured timelines are drawn in ms; simulated units are read as ms)
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": tl.title or "pipeline"}}]
    for r in range(tl.pp):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": r, "args": {"sort_index": r}})
    for o in tl.ops:
        events.append({"name": o["op"], "cat": KIND_NAMES[o["kind"]], "ph": "X", "pid": 0, "tid": o["rank"],
                       "ts": o["start"] * scale, "dur": (o["end"] - o["start"]) * scale,
                       "args": {"microbatch": o["microbatch"], "chunk": o["chunk"], "stage": o["stage"]}})
    for w in tl.waits:
        events.append({"name": f"wait {w.get('direction', '')} mb{w.get('microbatch', '')}".strip(), "cat": "p2p wait",
                       "ph": "X", "pid": 0, "tid": w["rank"], "ts": w["start"] * scale,
                       "dur": (w["end"] - w["start"]) * scale, "args": {"peer": w.get("peer")}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
