"""Every public function of the kit's Python API refuses a bad argument by name (issue: every input boundary holds).

Called with ``None``, ``-1``, ``0``, ``1.5``, ``"x"``, ``[]``, ``{}``, a huge integer, ``NaN``, a Schedule where
something else belongs, ..., each public function of :mod:`pipeline_kit.schedules`, :mod:`pipeline_kit.sim`,
:mod:`pipeline_kit.layout` and :mod:`pipeline_kit.trace` either returns or raises a ValueError or TypeError whose
one-line message names the argument and quotes at most about 100 characters of it -- never an AttributeError,
ZeroDivisionError, IndexError or KeyError from inside -- and ``-1`` is refused everywhere.  The functions are listed
below one by one, with good arguments; the list is compared with the modules' ``__all__`` (and the classes'
methods), so a new public function fails here until it is listed.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipeline_kit.layout as layout
import pipeline_kit.schedules as schedules
import pipeline_kit.sim as sim
import pipeline_kit.trace as trace
from pipeline_kit.arguments import shown
from pipeline_kit.layout import ItemTimes, Layout, ModelSpec, StageSpec, decompose_speedup, parse_layout
from pipeline_kit.schedules import Message, Op, Schedule, ScheduleFunction, build_schedule, validate
from pipeline_kit.sim import Costs, simulate
from pipeline_kit.trace import StageService, Timeline

ROOT = Path(__file__).resolve().parent.parent

# -- good arguments -----------------------------------------------------------------------------------------------
SCHED = build_schedule("1f1b", 2, 2)
RESULT = simulate(SCHED)
TRACE = trace.from_sim(RESULT)
TIMELINE = Timeline.from_sim(RESULT)
LAYOUT = parse_layout("Et|tL")
MEGATRON = layout.megatron_layout("E||t|L", pp=2, num_layers=1)
SPEC = ModelSpec(layers=2)
ITEMS = ItemTimes.uniform(2)
SERVICES = trace.service_times(TRACE)
# named at import (the table below holds it), made and removed by the module's fixture: no folder is left behind
TRACE_FILE = Path(tempfile.gettempdir()) / f"pipeline-kit-api-{os.getpid()}-{uuid.uuid4().hex[:8]}" / "trace.json"


@pytest.fixture(scope="module", autouse=True)
def trace_file():
    TRACE_FILE.parent.mkdir()
    TRACE_FILE.write_text(json.dumps(TRACE))
    yield
    shutil.rmtree(TRACE_FILE.parent, ignore_errors=True)


F0, F1, B0, B1 = Op("F", 0), Op("F", 1), Op("B", 0), Op("B", 1)

# (name, function, good keyword arguments, {argument: other words a refusal may name it by}).  Text parsers name
# what they read by its place (line, position, field) rather than by the parameter; per_virtual_stage names a
# cost by the ``name`` it is given; the file readers by their command-line flag, as the commands print it.
CALLS = [
    # pipeline_kit.schedules
    ("build_schedule", build_schedule, dict(name="1f1b", pp=2, microbatches=2, chunks=None, forward_only=False,
                                            group=None), {"name": ("unknown schedule",)}),
    ("check_ops", schedules.check_ops, dict(schedule=SCHED), {}),
    ("dataflow", lambda schedule: list(schedules.dataflow(schedule)), dict(schedule=SCHED), {}),
    ("describe", schedules.describe, dict(sched=SCHED), {}),
    ("dualpipev", schedules.dualpipev, dict(pp=2, microbatches=4, chunks=2), {}),
    ("gpipe", schedules.gpipe, dict(pp=2, microbatches=2, forward_only=False), {}),
    ("interleaved", schedules.interleaved, dict(pp=2, microbatches=4, chunks=2, forward_only=False, group=None), {}),
    ("interleaved_table", schedules.interleaved_table, dict(microbatches=4, chunks=2, group=2), {}),
    ("interleaved_warmup", schedules.interleaved_warmup, dict(pp=2, rank=0, microbatches=4, chunks=2, group=2), {}),
    ("interleaved_zero_bubble", schedules.interleaved_zero_bubble, dict(pp=2, microbatches=4, chunks=2), {}),
    ("is_valid", schedules.is_valid, dict(schedule=SCHED), {}),
    ("looped_bfs", schedules.looped_bfs, dict(pp=2, microbatches=2, chunks=2), {}),
    ("message_plan", schedules.message_plan, dict(schedule=SCHED), {}),
    ("no_pipelining", schedules.no_pipelining, dict(microbatches=2, forward_only=False), {}),
    ("one_f_one_b", schedules.one_f_one_b, dict(pp=2, microbatches=2, forward_only=False), {}),
    ("one_f_one_b_phases", schedules.one_f_one_b_phases, dict(fwd=[F0, F1], bwd=[B0, B1], warmup=1,
                                                              wgrad_delay=None), {}),
    ("op_messages", schedules.op_messages, dict(schedule=SCHED, rank=0), {}),
    ("receives", schedules.receives, dict(kind="F", microbatch=0, stage=1, last=1), {}),
    ("select_schedule", schedules.select_schedule, dict(pp=2, vpp=None, forward_only=False), {}),
    ("sends", schedules.sends, dict(kind="F", microbatch=0, stage=0, last=1), {}),
    ("stage_owner", schedules.stage_owner, dict(stage=1, pp=2, placement="looped"), {}),
    ("validate", validate, dict(schedule=SCHED), {}),
    ("virtual_stage", schedules.virtual_stage, dict(rank=1, chunk=0, pp=2, placement="looped"), {}),
    ("zb_h1", schedules.zb_h1, dict(pp=2, microbatches=2, forward_only=False), {}),
    ("zbv", schedules.zbv, dict(pp=2, microbatches=2, chunks=2), {}),
    ("Schedule", Schedule, dict(name="x", pp=1, microbatches=1, chunks=1, ranks=[[F0, B0]], placement="looped"), {}),
    ("Schedule.from_text", Schedule.from_text, dict(text="r0: F0 B0\n", name=None),
     {"text": ("line", "rank", "header")}),
    ("Schedule.from_json", Schedule.from_json, dict(text=SCHED.to_json(), where="schedule JSON"),
     {"text": ("schedule JSON",)}),
    ("Schedule.from_dict", Schedule.from_dict, dict(data=SCHED.to_dict(), where="schedule JSON"),
     {"data": ("schedule JSON",)}),
    ("Schedule.stage_of", SCHED.stage_of, dict(rank=1, chunk=0), {}),
    ("Schedule.rank_of", SCHED.rank_of, dict(stage=1), {}),
    ("Schedule.chunk_of", SCHED.chunk_of, dict(stage=1), {}),
    ("Schedule.stages_of", SCHED.stages_of, dict(rank=1), {}),
    ("Schedule.op_text", SCHED.op_text, dict(op=F0), {}),
    ("Schedule.to_text", SCHED.to_text, {}, {}),
    ("Schedule.to_grid", SCHED.to_grid, dict(width=None), {}),
    ("Schedule.to_dict", SCHED.to_dict, {}, {}),
    ("Schedule.to_json", SCHED.to_json, {}, {}),
    ("Op.parse", Op.parse, dict(text="F0"), {"text": ("is not an op", "beyond the kit's limits")}),
    ("Op.text", F0.text, dict(show_chunk=None), {}),
    ("Message.what", Message("forward", 0, 0, 1).what, dict(pp=2, placement="looped"), {}),
    ("ScheduleFunction", ScheduleFunction, dict(name="1f1b", pp=2, chunks=1, forward_only=False), {}),
    ("ScheduleFunction.__call__", schedules.select_schedule(2), dict(microbatches=2, group=None), {}),
    # pipeline_kit.sim
    ("simulate", simulate, dict(schedule=SCHED, costs=None, durations=None, fwd=1.0, bwd=2.0, wgrad=None,
                                p2p_latency=0.0, p2p_bytes=0, bandwidth=None, activation_bytes=0), {}),
    ("per_virtual_stage", sim.per_virtual_stage, dict(value=1.0, pp=2, chunks=1, name="fwd", placement="looped"),
     {"value": ("fwd",)}),
    ("Costs", Costs, dict(fwd=1.0, bwd=2.0, wgrad=None, p2p_latency=0.0, p2p_bytes=0, bandwidth=None,
                          activation_bytes=0), {}),
    ("Costs.resolve", Costs().resolve, dict(pp=2, chunks=1, placement="looped"), {}),
    ("StageCosts.duration", RESULT.costs.duration, dict(kind="F", stage=0), {}),
    ("SimResult.rank_events", RESULT.rank_events, dict(rank=0), {}),
    ("SimResult.to_dict", RESULT.to_dict, dict(timeline=True), {}),
    # pipeline_kit.layout (the trace readers of layout/measure.py are another file's)
    ("balance", layout.balance, dict(items=ITEMS, pp=2, chunks=1, microbatches=None, p2p_latency=0.0), {}),
    ("best_cuts", layout.best_cuts, dict(costs=[1.0, 2.0, 3.0, 1.0], parts=2), {}),
    ("boundary_bytes", layout.boundary_bytes, dict(m=SPEC), {}),
    ("decompose_speedup", decompose_speedup, dict(pp=2, microbatches=4, stage_fwd=[1.0, 1.0], stage_bwd=[2.0, 2.0],
                                                  p2p_latency=0.0, measured=None), {}),
    ("even_layout", layout.even_layout, dict(layers=4, stages=2), {}),
    ("even_split", layout.even_split, dict(layers=4, stages=2), {}),
    ("item_times_from_flops", layout.item_times_from_flops, dict(spec=SPEC, tflops=100.0), {}),
    ("load_model_spec", layout.load_model_spec, dict(name_or_file="tiny"), {"name_or_file": ("--config",)}),
    ("megatron_layout", layout.megatron_layout, dict(text="E||t|L", pp=2, num_layers=1, mtp_num_layers=0),
     {"text": ("stage", "layout", "layer")}),
    ("MegatronLayout.rank_stages", MEGATRON.rank_stages, dict(rank=0), {}),
    ("p2p_volume", layout.p2p_volume, dict(layout=LAYOUT, m=SPEC, microbatches=4), {}),
    ("parse_layout", parse_layout, dict(text="Et|tL", pp=None, layers=None),
     {"text": ("position", "layout", "stage")}),
    ("plan_for", layout.plan_for, dict(layout=LAYOUT, items=ITEMS, pp=2, microbatches=4, p2p_latency=0.0), {}),
    ("stage_costs", layout.stage_costs, dict(layout=LAYOUT, m=SPEC, pp=2), {}),
    ("uneven_layout", layout.uneven_layout, dict(layers=4, stages=2, first=None, last=None), {}),
    ("Layout", Layout, dict(stages=LAYOUT.stages), {}),
    ("Layout.from_counts", Layout.from_counts, dict(counts=[1, 1]), {}),
    ("Layout.check", LAYOUT.check, dict(pp=None, layers=None), {}),
    ("Layout.chunks", LAYOUT.chunks, dict(pp=2), {}),
    ("Layout.owner", LAYOUT.owner, dict(stage=1, pp=2), {}),
    ("StageSpec", StageSpec, dict(embedding=True, layers=range(0, 2), loss=False), {}),
    ("StageSpec.text", LAYOUT.stages[0].text, {}, {}),
    ("ModelSpec", ModelSpec, {name: getattr(SPEC, name) for name in SPEC.to_dict()}, {}),
    ("ModelSpec.to_dict", SPEC.to_dict, {}, {}),
    ("ItemTimes", ItemTimes, dict(fwd=ITEMS.fwd, bwd=ITEMS.bwd), {}),
    ("ItemTimes.uniform", ItemTimes.uniform, dict(layers=2, layer_fwd=1.0, embedding_fwd=0.0, loss_fwd=0.0,
                                                  bwd_ratio=2.0), {}),
    ("ItemTimes.scaled", ITEMS.scaled, dict(factor=2.0), {}),
    ("Balance.report", layout.balance(ITEMS, 2).report, {}, {}),
    # pipeline_kit.trace
    ("op_record", trace.op_record, dict(schedule=SCHED, rank=0, op=F0, stage=0, start=0.0, end=1.0), {}),
    ("wait_record", trace.wait_record, dict(rank=1, peer=0, direction="forward", microbatch=0, chunk=0, stage=1,
                                            start=0.0, end=1.0), {}),
    ("new_trace", trace.new_trace, dict(schedule=SCHED, source="x", makespan=1.0, timeline=[], waits=[],
                                        p2p_latency=0.0, layers=None, layout=None), {}),
    ("from_sim", trace.from_sim, dict(result=RESULT, per_second=1.0, source="simulator", p2p_latency=0.0,
                                      layers=None, layout=None), {}),
    ("load_trace", trace.load_trace, dict(path=str(TRACE_FILE)), {"path": ("--trace",)}),
    ("check_trace", trace.check_trace, dict(data=TRACE, where="trace"), {"data": ("trace",)}),
    ("live_activations", trace.live_activations, dict(tl=TIMELINE, rank=0), {}),
    ("peak", trace.peak, dict(steps=[(0.0, 0), (1.0, 2)]), {}),
    ("service_times", trace.service_times, dict(trace=TRACE), {}),
    ("stage_fwd_bwd", trace.stage_fwd_bwd, dict(services=SERVICES, stat="mean"), {}),
    ("Timeline", Timeline, dict(pp=2, chunks=1, ops=[], transfers=[], waits=[], title="", unit="time",
                                placement="looped"), {}),
    ("Timeline.from_sim", Timeline.from_sim, dict(result=RESULT, title=None, unit="time units"), {}),
    ("Timeline.from_trace", Timeline.from_trace, dict(trace=TRACE, title=None), {}),
    ("Timeline.stages_of", TIMELINE.stages_of, dict(rank=0), {}),
    ("Timeline.rank_ops", TIMELINE.rank_ops, dict(rank=0), {}),
    ("Timeline.idle_gaps", TIMELINE.idle_gaps, dict(rank=0), {}),
    ("Timeline.phases", TIMELINE.phases, dict(rank=0), {}),
    ("Timeline.first_backward", TIMELINE.first_backward, {}, {}),
    ("StageService", StageService, dict(stage=0, samples={"F": [1.0]}, p2p_wait=0.0), {}),
    ("StageService.p50", SERVICES[0].p50, dict(kind="F"), {}),
    ("StageService.p95", SERVICES[0].p95, dict(kind="F"), {}),
    ("StageService.mean", SERVICES[0].mean, dict(kind="F"), {}),
]
BY_NAME = {name: (fn, good, aliases) for name, fn, good, aliases in CALLS}

# Public names that are not called here, and why.
RECORDS = {  # plain records, built in hot loops (an Op per microbatch and stage): their readers check them (their
    #         methods are listed in CALLS)
    "Op", "Dep", "Message", "Family", "Event", "Transfer", "Wait", "StageCosts", "SimResult", "Factor", "Plan",
    "StageCost", "Balance", "MegatronLayout",
}
ERRORS = {"OpParseError", "ScheduleConfigError", "ScheduleError", "ScheduleTextError", "CostError", "LayoutError",
          "TraceError"}
CONSTANTS = {"CHUNKED", "FAMILIES", "KINDS", "PLACEMENTS", "SCHEDULES", "PRESETS", "TRACE_JSON", "TRACE_OP",
             "TRACE_WAIT"}
MEASURE = {"item_times_from_trace", "load_trace", "predict_from_trace", "service_times"}  # layout's, from measure.py

HUGE = 2**20_000  # str() of it refuses (more than 4,300 digits)
BAD = [None, -1, 0, 1.5, "x", "", [], {}, True, 10**100, -(10**100), HUGE, math.nan, math.inf, -math.inf, b"x",
       "x" * 10_000, [1, -1], {"a": 1}, SCHED, object()]
ALLOWED = (ValueError, TypeError)


def listed_public() -> set[str]:
    """What the test must list: each module's public functions and classes, and those classes' public methods."""
    names = set()
    for module, exclude in ((schedules, set()), (sim, set()), (layout, MEASURE)):
        names |= {name for name in module.__all__ if name not in exclude}
    names |= {name for name, obj in vars(trace).items() if not name.startswith("_") and callable(obj)
              and getattr(obj, "__module__", None) == "pipeline_kit.trace"} | {"TRACE_JSON", "TRACE_OP", "TRACE_WAIT"}
    classes = {name: getattr(module, name) for module in (schedules, sim, layout, trace) for name in names
               if isinstance(getattr(module, name, None), type) and name not in ERRORS}
    for cls_name, cls in classes.items():
        names |= {f"{cls_name}.{attr}" for attr, value in vars(cls).items()
                  if (not attr.startswith("_") or attr == "__call__") and callable(getattr(cls, attr))
                  and not isinstance(value, property)}
    return names


def test_every_public_function_is_listed():
    covered = set(BY_NAME) | RECORDS | ERRORS | CONSTANTS
    assert listed_public() - covered == set(), "list the new public functions in CALLS (or say why not)"
    assert set(BY_NAME) - listed_public() == set(), "CALLS lists functions that are not public"


def call(name: str, argument: str | None = None, value=None):
    fn, good, _ = BY_NAME[name]
    kwargs = dict(good) if argument is None else {**good, argument: value}
    return fn(**kwargs)


def check_refusal(name: str, argument: str, value) -> BaseException | None:
    """Call ``name`` with ``value`` for ``argument``: it returns (None), or raises an allowed error that names the
    argument in one short line (returned)."""
    _, _, aliases = BY_NAME[name]
    try:
        call(name, argument, value)
    except ALLOWED as exc:
        message = str(exc)
        words = (argument, *aliases.get(argument, ()))
        assert any(w in message for w in words), f"{name}({argument}={shown(value)}): {message!r:.300} names none " \
                                                 f"of {words}"
        assert len(message) < 600 and "\n" not in message, f"{name}({argument}={shown(value)}): {message!r:.300}"
        return exc
    return None


@pytest.mark.parametrize("name", list(BY_NAME))
def test_good_arguments_are_taken(name):
    call(name)


@pytest.mark.parametrize("name", [name for name, (_, good, _) in BY_NAME.items() if good])
def test_each_bad_argument_is_refused_by_name(name):
    _, good, _ = BY_NAME[name]
    for argument in good:
        for value in BAD:
            check_refusal(name, argument, value)
        # a negative number is never taken for an answer
        assert check_refusal(name, argument, -1) is not None, f"{name}({argument}=-1) returned"


VALUES = st.one_of(st.sampled_from(BAD), st.integers(-3, 64), st.floats(allow_nan=True), st.text(max_size=12),
                   st.lists(st.integers(-2, 4), max_size=4), st.booleans(), st.none(),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@pytest.mark.parametrize("name", [name for name, (_, good, _) in BY_NAME.items() if good])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_drawn_bad_arguments_are_refused_by_name_or_taken(name, data):
    _, good, _ = BY_NAME[name]
    argument = data.draw(st.sampled_from(sorted(good)), label="argument")
    check_refusal(name, argument, data.draw(VALUES, label="value"))


# -- the examples the issue names -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,kind,message", [
    (lambda: parse_layout("E|L", pp=0), ValueError, "parse_layout: argument pp: expected a positive integer, got 0"),
    (lambda: decompose_speedup(2, 4, [0, 0], [0.0, 0.0]), ValueError,
     "decompose_speedup: arguments stage_fwd and stage_bwd: expected some stage time above 0, got only zeros (a step "
     "that takes no time has no speedup)"),
    (lambda: validate(None), TypeError, "validate: argument schedule: expected a Schedule (from build_schedule), got "
                                        "None"),
    (lambda: simulate("1f1b"), TypeError, "simulate: argument schedule: expected a Schedule (from build_schedule), got "
                                          "str '1f1b'"),
    (lambda: build_schedule("1f1b", 0, 8), ValueError, "pp must be a positive integer, got 0"),  # the explorer's words
    (lambda: Op.parse("F" * 5_000_000), ValueError, "'" + "F" * 100 + "'... (5,000,000 characters) is not an op: "
                                                    "expected a kind F, B, I or W, a microbatch number and an optional "
                                                    "chunk, e.g. F3, B3, I3c1, W3c1"),
])
def test_the_issues_examples_read_exactly(fn, kind, message):
    with pytest.raises(kind) as exc:
        fn()
    assert str(exc.value) == message


def test_a_wrong_type_is_a_type_error_and_still_the_functions_own_error():
    with pytest.raises(layout.LayoutError) as exc:
        parse_layout("Et|tL", pp="2")
    assert isinstance(exc.value, TypeError) and str(exc.value) == ("parse_layout: argument pp: expected a positive "
                                                                   "integer or None, got str '2'")
    with pytest.raises(schedules.ScheduleConfigError) as exc:
        build_schedule("1f1b", 2.0, 4)
    assert isinstance(exc.value, TypeError) and str(exc.value) == "pp must be a positive integer, got 2.0"


def test_long_input_is_quoted_in_100_characters_with_its_position_and_length():
    token = "X" * 5_000_000
    for parse in (lambda: Schedule.from_text(f"r0: F0 {token}\n"), lambda: Schedule.from_json(
            json.dumps({"pp": 1, "microbatches": 1, "ranks": [["F0", token]]}))):
        with pytest.raises(schedules.ScheduleTextError) as exc:
            parse()
        assert len(str(exc.value)) < 400 and "(5,000,000 characters)" in str(exc.value)
    with pytest.raises(schedules.ScheduleTextError,
                       match=r"^line 1: expected 'rK: op op \.\.\.' .*\(5,000,005 characters\)$"):
        Schedule.from_text(f"oops {token}\n")
    with pytest.raises(layout.LayoutError, match=r"repeat count '9{20}'\.\.\. \(1,000,000 characters\) is more"):
        parse_layout("Et*" + "9" * 1_000_000 + "L")


def test_a_stage_of_only_the_embedding_prints_its_table():
    """``E|L`` is a legal Megatron layout (a stage may hold only E or only L): the command prints the table, the
    embedding stage's FLOP ratio as n/a, where it used to end in a ZeroDivisionError."""
    proc = subprocess.run([sys.executable, "-m", "pipeline_kit", "layout", "E|L", "--pp", "2"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "forward FLOPs max/min = n/a (stage 0 holds only E, which does no FLOPs)" in proc.stdout
    assert proc.stdout.splitlines()[2].split()[:4] == ["0", "0", "0", "E"]
