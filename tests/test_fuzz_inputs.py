"""Fuzzing every input family a user controls: argv, schedule text and JSON, layouts, configs, traces.

Each example runs ``python -m pipeline_kit`` in this process (``bounded.run_cli``) under a time
limit and a 4 GiB memory cap, and must end with exit code 0, 1 or 2, no traceback, and -- when it
refuses -- exactly one line of at most 1,000 bytes on stderr; a failing run changes no file it was given.
(``grade`` and ``make-labs`` get drawn files and folders here, none of them a notebook; real notebooks are
fuzzed with the grading engine.)  Sizes in the pools sit just past each limit, never on it: an input exactly at a
limit is allowed and may take its documented seconds, which a fuzz example should not spend.
"""

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from bounded import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_kit.layout import LayoutError, parse_layout
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate



def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


TMP = Path(tempfile.gettempdir()) / f"pipeline-kit-fuzz-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # made by fixtures()

INTS = ["0", "1", "2", "3", "4", "8", "-1", "1025", "1000001", "99999999999999999999", "1e3", "abc", "", " 4"]
FLOATS = ["0", "1", "2.5", "-1", "nan", "inf", "-inf", "1e308", "1e15", "1e-300", "abc", "", "1,2"]
LISTS = ["1,1", "1,,1", ",", "1,2,3,4", "nan,1", "1e308,1", "", "a,b", "1,1,1,1,1,1,1,1"]
LAYOUT_TEXT = ["Et*3|t*2|t*2|tL", "", "E(t|)*99999999tL", "Et|tL", "(((", "Et*0L", "|", "EtL", "Et*4|t*4L"]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                     max_size=4),
                           max_leaves=12)
POOL_VALUES = st.sampled_from([-1, 0, 1, 2, 8, 1024, 1025, 2**31 - 1, 2**31, 2**64, 1.5, 2.0, True, False, None, "8",
                               [], {}, 1e308])


def write(name: str, data) -> str:
    path = TMP / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def assert_bounded(result, argv) -> None:
    assert result.code in (0, 1, 2), (argv, result.code, result.err[-2000:])
    assert "Traceback" not in result.err + result.out, (argv, result.err[-2000:])
    if result.code == 2:
        assert len(result.err_lines) == 1, (argv, result.err)
        assert len(result.err.encode()) <= 1000, (argv, f"a {len(result.err.encode()):,}-byte refusal")
    if result.code != 0:  # a failing run changes no file it was given, as input or as output
        for path, data in ORIGINALS.items():
            assert Path(path).read_bytes() == data, (argv, f"{path} changed")
    else:
        for path, data in ORIGINALS.items():  # (a successful run may replace an output it was given)
            Path(path).write_bytes(data)


@pytest.fixture(scope="module", autouse=True)
def fixtures():
    TMP.mkdir()
    trace = {**simulate(build_schedule("1f1b", 2, 2)).to_dict(), "waits": [], "layers": 8, "layout": "Et*4|t*4L"}
    write("trace.json", trace)
    write("schedule.txt", build_schedule("1f1b", 2, 3).to_text())
    write("schedule.json", build_schedule("interleaved", 2, 2, 2).to_json())
    write("grid.txt", "r0: F0 F1 B0 B1\nr1: . F0 B0 F1 B1\n")
    write("binary.bin", b"\x00\xff\x00")
    write("latin1.txt", b"r0: F0 \xe9\n")
    write("deep.json", "[" * 5000 + "]" * 5000)
    write("config.json", {"layers": 8, "hidden": 32})
    write("config_number.json", "7")
    write("existing.json", '{"mine": "not the kit\'s"}')
    os.mkfifo(TMP / "fifo")
    ORIGINALS.update({path: Path(path).read_bytes() for path in FILES if os.path.isfile(path)})
    # a drawn output path (--perfetto, --out ...) is relative to the working folder: keep it in TMP, not in
    # the checkout (two such files once landed in a commit)
    here = os.getcwd()
    os.chdir(TMP)
    yield
    os.chdir(here)
    shutil.rmtree(TMP, ignore_errors=True)


FILES = [str(TMP / n) for n in ("trace.json", "schedule.txt", "schedule.json", "grid.txt", "binary.bin",
                                "latin1.txt", "deep.json", "config.json", "config_number.json", "missing.json",
                                "existing.json", "fifo")] + [str(TMP), "/dev/zero"]
ORIGINALS: dict[str, bytes] = {}  # every regular file of FILES, as the fixture wrote it
OUTPUTS = [str(TMP / "out.json"), "/nonexistent/x.json", str(TMP), str(TMP / "existing.json"), str(TMP / "fifo"),
           str(TMP / "trace.json"), "/dev/null"]

# command -> its options, each with a pool of values (None: a flag)
COMMANDS = {
    "schedule": {"--schedule": ["gpipe", "1f1b", "interleaved", "zb-h1", "nope"], "--pp": INTS, "--microbatches": INTS,
                 "--chunks": INTS, "--group": INTS, "--forward-only": None, "--json": None},
    "simulate": {"--schedule": ["1f1b", "interleaved", "zb-h1"], "--pp": INTS, "-m": INTS, "--chunks": INTS,
                 "--fwd": FLOATS, "--bwd": FLOATS, "--wgrad": FLOATS, "--stage-costs": LISTS, "--p2p-latency": FLOATS,
                 "--p2p-bytes": FLOATS, "--bandwidth": FLOATS, "--activation-bytes": FLOATS, "--json": None,
                 "--no-timeline": None},
    "validate": {"FILE": FILES},
    "check-timeline": {"FILE": FILES, "--pp": INTS, "-m": INTS, "--schedule": ["gpipe", "1f1b", "zb-h1"],
                       "--fwd-slots": INTS, "--bwd-slots": INTS, "--json": None},
    "layout": {"LAYOUT": LAYOUT_TEXT, "--pp": INTS, "--config": FILES + ["tiny", "bank-pp8", "nope"],
               "--chunks": INTS, "--first-stage-layers": INTS, "--last-stage-layers": INTS, "--microbatches": INTS},
    "balance": {"--config": FILES + ["tiny"], "--pp": INTS, "--chunks": INTS, "--microbatches": INTS,
                "--trace": FILES, "--tflops": FLOATS, "--p2p-latency": FLOATS},
    "speedup": {"--config": FILES + ["bank-pp8", "tiny"], "--layout": LAYOUT_TEXT, "--pp": INTS,
                "--microbatches": INTS, "--measured": FLOATS, "--tflops": FLOATS, "--p2p-latency-us": FLOATS,
                "--p2p-gbps": FLOATS},
    "plan": {"--config": FILES + ["tiny", "bank-pp8", "nope"], "--gpus": INTS, "--gpu-memory-gb": FLOATS,
             "--global-batch": INTS, "--micro-batch-size": INTS, "--tflops": FLOATS, "--p2p-gbps": FLOATS,
             "--p2p-latency-us": FLOATS, "--tp": INTS, "--recompute": ["none", "selective", "full", "half"],
             "--schedules": ["1f1b", "zbv,interleaved", "nope", ","], "--top": INTS, "--json": None,
             "--distributed-optimizer": None, "--plot": [p.replace(".json", ".png") for p in OUTPUTS] + OUTPUTS},
    "draw": {"--trace": FILES, "--pp": INTS, "-m": INTS, "--perfetto": OUTPUTS, "--compare": None,
             "-o": [p.replace(".json", ".png") for p in OUTPUTS] + OUTPUTS},
    "demo": {},
    # refused before any kernel or release starts: no FILE is a notebook, no folder of FILES holds solutions
    "grade": {"NOTEBOOK": FILES, "--timeout": FLOATS, "--total-timeout": FLOATS, "--seed": INTS,
              "--solutions": FILES, "--json": None},
    "make-labs": {"--solutions": FILES, "--labs": FILES + OUTPUTS, "--check": None},
}


@st.composite
def argv(draw):
    command = draw(st.sampled_from(sorted(COMMANDS)))
    options = COMMANDS[command]
    out = [command]
    for name in draw(st.lists(st.sampled_from(sorted(options) or ["--json"]), max_size=6, unique=True)):
        pool = options.get(name, None)
        if name in ("FILE", "LAYOUT", "NOTEBOOK"):
            out.insert(1, draw(st.sampled_from(pool)))
        elif pool is None:
            out.append(name)
        else:
            out += [name, draw(st.sampled_from(pool) | st.text(max_size=6))]
    if command == "make-labs" and "--solutions" not in out:  # (the kit's own solutions: seconds of release)
        out += ["--solutions", draw(st.sampled_from(FILES))]
    if draw(st.booleans()):  # sometimes one stray word
        out.insert(draw(st.integers(0, len(out))), draw(st.text(max_size=6)))
    return out


@fuzz(60)
@given(argv())
def test_fuzz_command_line_argv(args):
    assert_bounded(run_cli(*args), args)


OP_TOKENS = st.one_of(
    st.builds(lambda k, m, c: f"{k}{m}{c}", st.sampled_from("FBIWXf"), st.sampled_from(
        ["0", "1", "2", "3", "999999", "1000000000000", "9" * 5000]),
        st.sampled_from(["", "c0", "c1", "c2", "c999", "c"])),
    st.sampled_from([".", "-", "F", "", "#", "r0:"]), st.text(max_size=4))
RANK_LINE = st.builds(lambda r, ops: f"r{r}: " + " ".join(ops), st.integers(0, 4) | st.sampled_from(
    [1023, 1024, 99999999, 10**40]), st.lists(OP_TOKENS, max_size=12))
HEADER = st.builds(lambda kv: "# " + " ".join(f"{k}={v}" for k, v in kv), st.lists(st.tuples(
    st.sampled_from(["schedule", "pp", "microbatches", "chunks", "placement", "x"]),
    st.sampled_from(INTS) | st.text(max_size=5)), max_size=5))
SCHEDULE_TEXT = st.lists(st.one_of(RANK_LINE, HEADER, st.text(max_size=30)), max_size=8).map("\n".join)


@fuzz(40)
@given(SCHEDULE_TEXT, st.booleans(), st.sampled_from(["gpipe", "1f1b", "zb-h1"]))
def test_fuzz_schedule_and_timeline_text(text, as_latin1, schedule):
    path = write("fuzz.txt", text.encode("latin-1", "replace") if as_latin1 else text)
    for args in (["validate", path], ["check-timeline", path, "--pp", "2", "-m", "2", "--schedule", schedule]):
        assert_bounded(run_cli(*args), args)


@st.composite
def schedule_json(draw):
    data = build_schedule(draw(st.sampled_from(["1f1b", "zb-h1"])), 2, 2).to_dict()
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["replace", "delete", "add", "op"]))
        key = draw(st.sampled_from(sorted(data) + ["placement", "extra"]))
        if action == "replace":
            data[key] = draw(JSON_VALUES | POOL_VALUES)
        elif action == "delete":
            data.pop(key, None)
        elif action == "add":
            data[draw(st.text(max_size=5))] = draw(JSON_VALUES)
        elif isinstance(data.get("ranks"), list) and data["ranks"] and isinstance(data["ranks"][0], list):
            data["ranks"][0] = data["ranks"][0] + [draw(OP_TOKENS | POOL_VALUES)]
    return data if draw(st.integers(0, 9)) else draw(JSON_VALUES)


@fuzz(40)
@given(schedule_json())
def test_fuzz_schedule_json(data):
    path = write("fuzz.json", json.dumps(data))  # NaN and Infinity included, as Python writes them
    args = ["validate", path]
    assert_bounded(run_cli(*args), args)


LAYOUTS = st.text(alphabet=list("Et L|()*0123456789m.-"), max_size=40) | st.sampled_from(
    LAYOUT_TEXT + ["E(t*1000|)*1000tL", "(" * 100 + "Et" + ")" * 100 + "L", "Et*" + "9" * 5000 + "L"])


@fuzz(80)
@given(LAYOUTS, st.sampled_from(["1", "2", "3", "4"]))
def test_fuzz_layout_strings(text, pp):
    try:
        parse_layout(text)
    except LayoutError as exc:
        assert "\n" not in str(exc)
    for args in (["layout", text, "--pp", pp], ["speedup", "--layout", text, "--pp", pp]):
        assert_bounded(run_cli(*args), args)


@fuzz(30)
@given(st.dictionaries(st.sampled_from(["vocab", "seq_len", "hidden", "heads", "layers", "ffn_mult", "tie_embeddings",
                                        "micro_batch_size", "dtype_bytes", "hiden"]), POOL_VALUES, max_size=4)
       | JSON_VALUES)
def test_fuzz_model_configs(config):
    path = write("config_fuzz.json", json.dumps(config))
    for args in (["layout", "--pp", "2", "--config", path], ["balance", "--config", path, "--pp", "2"]):
        assert_bounded(run_cli(*args), args)


@st.composite
def traces(draw):
    trace = json.loads((TMP / "trace.json").read_text())
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            trace[draw(st.sampled_from(sorted(trace) + ["extra"]))] = draw(POOL_VALUES | JSON_VALUES)
        elif isinstance(trace.get("timeline"), list) and trace["timeline"]:
            event = trace["timeline"][draw(st.integers(0, len(trace["timeline"]) - 1))]
            if isinstance(event, dict) and event:  # (an earlier draw may have made it an empty dict)
                event[draw(st.sampled_from(sorted(event)))] = draw(POOL_VALUES)
    return trace


@fuzz(30)
@given(traces())
def test_fuzz_traces(trace):
    path = write("trace_fuzz.json", json.dumps(trace))
    for args in (["balance", "--config", "tiny", "--pp", "2", "--trace", path],
                 ["draw", "--trace", path, "--perfetto", str(TMP / "perfetto.json")]):
        assert_bounded(run_cli(*args), args)
