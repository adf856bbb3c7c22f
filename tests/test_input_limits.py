"""Every example of issue 12: one line, the right exit code, within seconds, under a 4 GB memory cap.

Most run ``cli.main`` in this process (see ``bounded.py``); the ones where the real process matters
-- a binary file, deep JSON, the 100,000-character header that once took 53 s, the schedule that
once ran until killed -- run as real ``python -m pipeline_kit`` processes under ``RLIMIT_AS``.
"""

import json
import math

import pytest
from bounded import run_capped, run_cli

from pipeline_kit.inputs import InputError, parse_json, read_text, strict_json
from pipeline_kit.layout import LayoutError, load_model_spec, parse_layout
from pipeline_kit.layout.measure import TraceError, load_trace
from pipeline_kit.limits import LIMITS, LimitError, check_schedule_size
from pipeline_kit.schedules import Schedule, ScheduleConfigError, ScheduleTextError, build_schedule
from pipeline_kit.sim import CostError, simulate


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    contents = {
        "binary.txt": b"\x00\x01\xff\xfe binary",
        "latin1.txt": b"r0: F0 \xff\xfe B0\n",
        "ranks5.json": b'{"pp": 2, "microbatches": 2, "ranks": 5}',
        "pp_null.json": b'{"pp": null, "microbatches": 2, "ranks": [[], []]}',
        "pp_float.json": b'{"pp": 2.7, "microbatches": 1, "ranks": [["F0", "B0"], ["F0", "B0"]]}',
        "pp_true.json": b'{"pp": true, "microbatches": 1, "ranks": [["F0", "B0"]]}',
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "deep_obj.json": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        "number.json": b"5",
        "layers_true.json": b'{"layers": true}',
        "layers_million.json": b'{"layers": 1000000}',
        "timeline5.json": b'{"schedule": "1f1b", "pp": 2, "microbatches": 2, "chunks": 1, "timeline": 5}',
        "header.txt": b"# " + b"a" * 100_000 + b"\nr0: F0 B0\n",
        "big_rank.txt": b"r99999999: F0 B0\n",
        "grid.txt": b"r0: F0 B0\nr1: F0 B0\n",
    }
    for name, data in contents.items():
        (d / name).write_bytes(data)
    return d


EXAMPLES = [  # (argv with {d} for the files' folder, exit code, what the one line says)
    (["schedule", "--pp", "100000", "--microbatches", "1000000"], 2, "argument --pp: '100000' is more than the limit "
                                                                     "of 1,024 ranks (MAX_RANKS)"),
    (["schedule", "--pp", "99999999999999999999", "-m", "4"], 2, "(MAX_RANKS)"),
    (["schedule", "--pp", "1024", "-m", "1000000"], 2, "= 2,048,000,000 ops is more than the limit of 2,000,000 ops "
                                                        "(MAX_OPS)"),
    (["schedule", "--schedule", "interleaved", "--pp", "2", "-m", "2", "--chunks", "99999999999"], 2, "(MAX_CHUNKS)"),
    (["check-timeline", "{d}/grid.txt", "--pp", "2", "--microbatches", "100000000"], 2, "(MAX_MICROBATCHES)"),
    (["check-timeline", "{d}/grid.txt", "--pp", "1024", "--microbatches", "1000000"], 2, "(MAX_OPS)"),
    (["layout", "E(t|)*99999999tL", "--pp", "1"], 2, "position 7: repeat count 99999999 is more than the limit of "
                                                     "100,000 (MAX_REPEAT)"),
    (["layout", "E(t*1000|)*1000tL", "--pp", "1"], 2, "(MAX_LAYOUT_SYMBOLS)"),
    (["layout", "Et*99999999999999999999|tL", "--pp", "2"], 2, "position 4: repeat count 99999999999999999999 is "
                                                               "more than the limit"),
    (["layout", "", "--pp", "2"], 2, "argument LAYOUT: the layout is empty"),
    (["balance", "--config", "{d}/layers_million.json", "--pp", "2"], 2, "field 'layers' = 1,000,000 is more than the "
                                                                         "limit of 1,024 (MAX_LAYERS)"),
    (["balance", "--config", "{d}/number.json", "--pp", "2"], 2, "expected a JSON object with fields vocab"),
    (["balance", "--config", "{d}/layers_true.json", "--pp", "2"], 2, "field 'layers': expected an integer >= 1, "
                                                                      "got true"),
    (["speedup", "--microbatches", "1000000000"], 2, "(MAX_MICROBATCHES)"),
    (["speedup", "--microbatches", "1000000"], 2, "argument --microbatches: pp=8 x microbatches=1000000"),
    (["validate", "{d}/big_rank.txt"], 2, "line 1: rank r99999999 is beyond the limit of 1,024 ranks"),
    (["validate", "{d}/binary.txt"], 2, "is a binary file (byte 0 is NUL), not text"),
    (["validate", "{d}/latin1.txt"], 2, "is not UTF-8 text: byte 7 (line 1) is 0xff"),
    (["check-timeline", "{d}/binary.txt", "--pp", "2", "-m", "2"], 2, "is a binary file"),
    (["check-timeline", "{d}/latin1.txt", "--pp", "2", "-m", "2"], 2, "is not UTF-8 text"),
    (["validate", "{d}/ranks5.json"], 2, "field 'ranks': expected an array with one array of op strings"),
    (["validate", "{d}/pp_null.json"], 2, "field 'pp': expected an integer >= 1, got null"),
    (["validate", "{d}/pp_float.json"], 2, "field 'pp': expected an integer >= 1, got 2.7"),
    (["validate", "{d}/pp_true.json"], 2, "field 'pp': expected an integer >= 1, got true"),
    (["draw", "--trace", "{d}/timeline5.json", "-o", "{d}/x.png"], 2, "field 'timeline': expected an array of op "
                                                                      "events, got 5"),
    (["draw", "--pp", "2", "-m", "2", "-o", "{d}/x.png", "--dpi", "100000"], 2, "argument --dpi: '100000' is more "
                                                                               "than the limit of 1,200"),
    (["simulate", "--pp", "2", "-m", "2", "--fwd", "1e308", "--bwd", "1e308", "--json"], 2, "argument --fwd: expected "
                                                                                           "a non-negative number of "
                                                                                           "at most 1e+15"),
    (["simulate", "--pp", "4", "-m", "4", "--stage-costs", "1,,1,1,1"], 2, "argument --stage-costs: expected "
                                                                           "comma-separated numbers such as "
                                                                           "1,1,1.5,1: value 2 of '1,,1,1,1' is empty"),
    (["simulate", "--pp", "2", "-m", "2", "--fwd", "nan"], 2, "argument --fwd"),
    (["validate", "{d}/header.txt"], 0, "valid: custom pp=1 microbatches=1 chunks=1, 2 ops"),
]
REAL_PROCESS = {"{d}/binary.txt", "{d}/deep.json", "{d}/header.txt", "100000"}  # argv items run as real processes


@pytest.mark.parametrize("argv,code,message", EXAMPLES, ids=[" ".join(a)[:60] for a, _, _ in EXAMPLES])
def test_each_example_is_one_line_and_the_right_exit_code(files, argv, code, message):
    args = [a.replace("{d}", str(files)) for a in argv]
    result = run_cli(*args, seconds=10)
    assert result.code == code, (result.code, result.err)
    lines = result.err_lines if code else result.out.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.err or result.out
    assert "Traceback" not in result.err


@pytest.mark.parametrize("argv,message", [
    (["schedule", "--pp", "100000", "--microbatches", "1000000"], "(MAX_RANKS)"),
    (["validate", "{d}/binary.txt"], "is a binary file"),
    (["validate", "{d}/deep.json"], "JSON nested deeper than the limit of 32 levels (MAX_JSON_DEPTH)"),
    (["validate", "{d}/deep_obj.json"], "JSON nested deeper than the limit of 32 levels (MAX_JSON_DEPTH)"),
    (["validate", "{d}/header.txt"], "valid: custom"),  # the header regex once took 53 s here
])
def test_real_processes_under_a_4_gb_cap(files, argv, message):
    result = run_capped(*[a.replace("{d}", str(files)) for a in argv], timeout=60)
    out = (result.err or result.out).strip().splitlines()
    assert len(out) == 1 and message in out[0], result.err
    assert result.code == (0 if message.startswith("valid") else 2)
    assert result.seconds < 15, result.seconds  # start-up is most of it; the work itself is linear


def test_python_api_refuses_sizes_before_allocating():
    with pytest.raises(ScheduleConfigError, match=r"pp=100000 is more than the limit of 1,024 ranks \(MAX_RANKS\)"):
        build_schedule("1f1b", 100000, 1000000)
    with pytest.raises(ScheduleConfigError, match=r"\(MAX_OPS\)"):
        build_schedule("zb-h1", 1024, 1000)  # 3,072,000 ops
    check_schedule_size(1000, 1000, 1, 2)  # 2,000,000 ops: exactly the limit is allowed
    with pytest.raises(LimitError, match="MAX_CHUNKS"):
        check_schedule_size(2, 2, 99999999999)
    with pytest.raises(ValueError, match=r"pp x chunks x microbatches = 256,000,000 is more than the limit"):
        Schedule("x", 2, 1_000_000, 128, [[], []])
    assert set(LIMITS) >= {"MAX_RANKS", "MAX_OPS", "MAX_FILE_BYTES", "MAX_JSON_DEPTH", "MAX_REPEAT"}


@pytest.mark.parametrize("data,message", [
    ({"pp": 2.7, "microbatches": 1, "ranks": [[], []]}, "field 'pp': expected an integer >= 1, got 2.7"),
    ({"pp": True, "microbatches": 1, "ranks": [[]]}, "field 'pp': expected an integer >= 1, got true"),
    ({"pp": 1, "microbatches": 1, "ranks": [["F0", 3]]}, r"field 'ranks'\[0\]\[1\]: expected an op string"),
    ({"pp": 1, "microbatches": 1, "ranks": [["F0", "X"]]}, r"field 'ranks'\[0\]\[1\]: 'X' is not an op"),
    ({"pp": 2, "microbatches": 1, "ranks": [["F0"]]}, "Schedule has pp=2 but 1 rank lists"),
    ({"pp": 1, "microbatches": 1, "ranks": [[]], "stages": 3}, r"unknown field\(s\) 'stages'; the fields are"),
    ({"pp": 1, "ranks": [[]]}, r"missing field\(s\) microbatches"),
    ({"pp": 1, "microbatches": 1, "ranks": [[]], "placement": "zigzag"}, "expected one of 'looped', 'v'"),
    (5, "expected a JSON object with fields schedule, pp, microbatches, chunks, placement, ranks, got 5"),
])
def test_schedule_json_shape_errors_name_the_field(data, message):
    with pytest.raises(ScheduleTextError, match=message):
        Schedule.from_dict(data)


def test_schedule_json_accepts_its_documented_fields():
    text = build_schedule("interleaved", 2, 4, 2).to_json()
    assert Schedule.from_json(text) == build_schedule("interleaved", 2, 4, 2)
    data = {**json.loads(text), "placement": "looped"}
    assert Schedule.from_dict(data).chunks == 2
    v = Schedule.from_dict({**data, "placement": "v"})  # issue 13's optional field
    assert v.placement == "v" and Schedule.from_json(v.to_json()) == v
    with pytest.raises(ScheduleTextError, match="placement 'v' puts exactly 2 chunks on each rank"):
        Schedule.from_dict({"pp": 2, "microbatches": 1, "chunks": 3, "ranks": [[], []], "placement": "v"})
    with pytest.raises(ScheduleTextError, match="schedule JSON: NaN is not a JSON number"):
        Schedule.from_json('{"pp": NaN}')
    with pytest.raises(ScheduleTextError, match="too large for a float"):
        Schedule.from_json('{"pp": 1e999}')


def test_text_parsing_is_linear_and_bounded():
    import time
    t0 = time.monotonic()
    assert Schedule.from_text("# " + "ab " * 300_000 + "\nr0: F0 B0\n").pp == 1
    assert Schedule.from_text("#" + "a" * 1_000_000 + "\nr0: F0 B0\n").pp == 1
    assert time.monotonic() - t0 < 5
    with pytest.raises(ScheduleTextError, match="header: microbatches='1000000000000' is not a positive integer"):
        Schedule.from_text("# pp=1 microbatches=1000000000000\nr0: F0 B0\n")
    with pytest.raises(ScheduleTextError, match=r"header: pp x chunks x microbatches = 3,999,996 is more .*MAX_OPS"):
        Schedule.from_text("# pp=4 microbatches=999999\nr0: F0\nr1: F0\nr2: F0\nr3: F0\n")
    with pytest.raises(ScheduleTextError, match=r"beyond the kit's limits"):
        Schedule.from_text("r0: F99999999\n")


def test_layouts_configs_and_traces_are_checked(tmp_path):
    with pytest.raises(LayoutError, match=r"position 33: parentheses nested deeper than the limit of 32"):
        parse_layout("(" * 100_000 + "Et" + ")" * 100_000 + "L")
    with pytest.raises(LayoutError, match=r"1,025 decoder layers, more than the limit of 1,024"):
        parse_layout("Et*1025L")
    config = tmp_path / "c.json"
    config.write_text('{"hidden": 64, "tie_embeddings": 1}')
    with pytest.raises(LayoutError, match="field 'tie_embeddings': expected true or false, got 1"):
        load_model_spec(str(config))
    trace = {**simulate(build_schedule("1f1b", 2, 2)).to_dict(), "waits": []}
    path = tmp_path / "t.json"
    for change, message in [({"timeline": 5}, "field 'timeline': expected an array of op events, got 5"),
                            ({"pp": 0}, "field 'pp': expected an integer >= 1, got 0"),
                            ({"schedule": "zigzag"}, "field 'schedule': expected one of 'gpipe'"),
                            ({"timeline": [{**trace["timeline"][0], "stage": 7}]}, r"stage 7 is out of range 0..1"),
                            ({"waits": [{"rank": 0, "start": 1, "end": 0}]}, "end not before start"),
                            # found by test_fuzz_traces: 1e308 passed, then overflowed to inf when balance scaled it
                            ({"timeline": [{**trace["timeline"][0], "end": 1e308}]},
                             r"field 'end' is 1e\+308, outside \[-1e\+15, 1e\+15\] \(MAX_NUMBER\)")]:
        path.write_text(json.dumps({**trace, **change}))
        with pytest.raises(TraceError, match=message):
            load_trace(str(path))
    path.write_text(json.dumps(trace))
    assert load_trace(str(path))["pp"] == 2


def test_reading_refuses_binary_undecodable_huge_and_non_finite(tmp_path):
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfr0: F0 B0\n")
    assert read_text(str(tmp_path / "bom.txt"), "FILE") == "r0: F0 B0\n"
    with pytest.raises(InputError, match="is a directory"):
        read_text(str(tmp_path), "FILE")
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(LIMITS["MAX_FILE_BYTES"] + 1)
    with pytest.raises(LimitError, match=r"larger than the limit of 33,554,432 bytes \(MAX_FILE_BYTES\)"):
        read_text(str(big), "FILE")
    with pytest.raises(InputError, match="Infinity is not a JSON number"):
        parse_json('{"a": Infinity}', "x")
    with pytest.raises(InputError, match="non-finite"):
        strict_json({"makespan": math.inf})
    with pytest.raises(CostError, match="got nan"):
        simulate(build_schedule("1f1b", 2, 2), fwd=math.nan)


def test_json_output_is_strict_at_the_largest_allowed_costs():
    result = run_cli("simulate", "--pp", "8", "-m", "16", "--fwd", "1e15", "--bwd", "1e15", "--p2p-bytes", "1e15",
                     "--bandwidth", "1e-15", "--json", "--no-timeline")
    assert result.code == 0, result.err
    data = json.loads(result.out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    assert math.isfinite(data["makespan"]) and data["makespan"] > 1e30


@pytest.mark.parametrize("argv,message", [
    (["--inject", "crash:rank=" + "9" * 5000 + ",mb=1"], "argument --inject: expected FAULT as skip-send:rank=R"),
    (["--layout", ""], "argument --layout: the layout is empty"),
    (["--p2p-timeout", "1e300"], "argument --p2p-timeout: expected a positive number of at most 1e+15"),
    (["--seed", str(2**70)], "argument --seed: expected an integer from 0 to 2**63 - 1"),
    (["--steps", "1000000"], "(MAX_STEPS)"),
    (["--hidden", "65536", "--heads", "1", "--vocab", "65536"], "more than the limit of 32 GiB (MAX_RUN_MEMORY_BYTES)"),
])
def test_run_refuses_before_importing_torch(argv, message):
    result = run_capped(*argv, module="pipeline_kit.run")
    assert result.code == 2 and len(result.err_lines) == 1 and message in result.err, result.err[-2000:]
