"""The book's static explorer (book/_static/pk-*.js) gives the kit's numbers, in a real browser.

The page has no Python behind it: pk-sim.js transcribes the kit's schedule generators, their
refusals and the simulator.  These tests hold that transcription to ``pipeline_kit``:

* on hundreds of random configurations (seeded) the JS must produce the same op order on every
  rank, every op's start and end, the makespan, both bubbles, busy time and peak activations per
  rank, and the same refusal text;
* the page itself (tests/static_explorer_harness.html loads the same files the book ships), driven
  through its DOM contract, must show what ``python -m pipeline_kit simulate --json`` prints;
* the built book's explore page works from file:// and over HTTP.

Everything runs in one headless Chromium (about 10 s without the book, which the suite builds once).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import random
import shlex
import threading
from argparse import Namespace
from pathlib import Path

import pytest

from pipeline_kit import cli
from pipeline_kit.schedules import FAMILIES, SCHEDULES, Op, Schedule, ScheduleConfigError, build_schedule
from pipeline_kit.sim import CostError, simulate

from headless_chromium import chromium_or_skip

ROOT = Path(__file__).resolve().parent.parent
HARNESS = (ROOT / "tests" / "static_explorer_harness.html").as_uri()
TOL = 1e-12  # the JS does the kit's float operations in the kit's order: they agree to the last bit


@pytest.fixture(scope="module")
def browser():
    driver = chromium_or_skip()
    yield driver
    driver.quit()


@pytest.fixture
def page(browser):
    browser.get(HARNESS)
    return browser


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(a), abs(b))


# -- the kit's side ---------------------------------------------------------------------------
def kit_costs(sched, cfg):
    """The Costs the CLI builds from --fwd 1 --bwd RATIO [--stage-costs ...] --p2p-latency L."""
    factors = None
    if cfg["slowRank"] >= 0:
        factors = [1.0] * sched.pp
        factors[cfg["slowRank"]] = float(cfg["slowFactor"])
    args = Namespace(fwd=1.0, bwd=float(cfg["bwdRatio"]), wgrad=None, stage_costs=factors, stage_bwd_costs=None,
                     p2p_latency=float(cfg["latency"]), p2p_bytes=0.0, bandwidth=None, activation_bytes=0.0)
    return cli.costs_from_args(args, sched)


def kit_run(cfg):
    try:
        sched = build_schedule(cfg["schedule"], cfg["pp"], cfg["microbatches"], cfg["chunks"], group=cfg["group"])
        return {"result": simulate(sched, kit_costs(sched, cfg))}
    except (ScheduleConfigError, CostError) as exc:
        return {"error": str(exc)}


JS_RUN = """
const out = [];
for (const cfg of arguments[0]) {
  const ran = PK.run(cfg);
  if (ran.error) { out.push({error: ran.error}); continue; }
  const r = ran.result, s = r.schedule;
  out.push({ranks: s.ranks.map(ops => ops.map(o => PK.opText(o, s.chunks))),
            times: r.events.map(evs => evs.map(e => [PK.opText(e.op, s.chunks), e.start, e.end])),
            makespan: r.makespan, bubble: r.bubbleFraction, overIdeal: r.bubbleOverIdeal, ideal: r.idealTime,
            busy: r.busy, peaks: r.peakActivations});
}
return out;
"""


def random_configs(rng: random.Random, n: int) -> list[dict]:
    """Valid and refused configurations of every family, with exact-ish costs (halves, quarters, thirds)."""
    families = list(SCHEDULES)
    configs = []
    for i in range(n):
        name = families[i % len(families)]
        pp = rng.randint(1, 8)
        mbs = rng.choice([rng.randint(1, 3 * pp), pp * rng.randint(1, 3)])
        chunks = rng.choice([None, 2, 2, 3, 4, 1]) if name == "interleaved" else rng.choice([None] * 9 + [1, 2])
        group = rng.choice([None] * 8 + [pp, pp + 1]) if name == "interleaved" else rng.choice([None] * 30 + [pp])
        slow = rng.choice([-1, -1, rng.randrange(pp)])
        configs.append({"schedule": name, "pp": pp, "microbatches": mbs, "chunks": chunks, "group": group,
                        "bwdRatio": rng.choice([0.5, 1, 1.5, 2, 2, 2.5, 3, 4]), "slowRank": slow,
                        "slowFactor": rng.choice([0.5, 1.25, 1.5, 2, 3]),
                        "latency": rng.choice([0, 0, 0.1, 0.25, 0.5, 1, 1 / 3])})
    # refusals the random draw seldom reaches: sizes, names, costs
    base = {"schedule": "1f1b", "pp": 4, "microbatches": 8, "chunks": None, "group": None, "bwdRatio": 2,
            "slowRank": -1, "slowFactor": 1.5, "latency": 0}
    for change in [{"pp": 0}, {"microbatches": 0}, {"pp": 2.5}, {"schedule": "gpipe", "microbatches": -1},
                   {"schedule": "zb-h1", "chunks": 3}, {"schedule": "gpipe", "group": 4}, {"schedule": "nope"},
                   {"schedule": "interleaved", "pp": 1}, {"schedule": "interleaved", "chunks": 1},
                   {"schedule": "interleaved", "chunks": 0}, {"schedule": "interleaved", "microbatches": 3},
                   {"schedule": "interleaved", "microbatches": 6}, {"schedule": "interleaved", "microbatches": 10},
                   {"schedule": "interleaved", "microbatches": 12, "group": 8},
                   {"schedule": "interleaved", "microbatches": 8, "group": 9}, {"latency": -0.5},
                   {"bwdRatio": -1}, {"slowRank": 1, "slowFactor": -2}]:
        configs.append({**base, **change})
    return configs


def describe(cfg: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items() if v is not None)


# -- the port against the kit --------------------------------------------------------------------
def test_the_port_has_every_family_the_kit_has(page):
    """Adding a family to pipeline_kit fails here until pk-sim.js has it too (see its header)."""
    assert page.execute_script("return Object.keys(PK.FAMILIES)") == list(SCHEDULES)
    options = page.execute_script("return [...document.querySelectorAll('#pk-schedule option')].map(o => o.value)")
    assert options == list(SCHEDULES)


def test_the_port_agrees_with_the_kit_on_random_configurations(page):
    configs = random_configs(random.Random(16), 480)
    js = page.execute_script(JS_RUN, configs)
    problems, valid, refused = [], 0, 0
    for cfg, got in zip(configs, js):
        want = kit_run(cfg)
        where = describe(cfg)
        if "error" in want or "error" in got:
            refused += 1
            if want.get("error") != got.get("error"):
                problems.append(f"{where}: kit refuses {want.get('error')!r}, JS {got.get('error')!r}")
            continue
        valid += 1
        res = want["result"]
        sched = res.schedule
        ranks = [[sched.op_text(op) for op in ops] for ops in sched.ranks]
        if got["ranks"] != ranks:
            problems.append(f"{where}: op orders differ")
            continue
        times = [[[sched.op_text(e.op), e.start, e.end] for e in res.rank_events(r)] for r in range(sched.pp)]
        for r in range(sched.pp):
            for (op, s, e), (jop, js_, je) in zip(times[r], got["times"][r]):
                if op != jop or not close(s, js_) or not close(e, je):
                    problems.append(f"{where}: rank {r} {op} runs {s}..{e} in the kit, {jop} {js_}..{je} in JS")
                    break
        for name, kit_value, js_value in [("makespan", res.makespan, got["makespan"]),
                                          ("bubble_fraction", res.bubble_fraction, got["bubble"]),
                                          ("bubble_over_ideal", res.bubble_over_ideal, got["overIdeal"]),
                                          ("ideal_time", res.ideal_time, got["ideal"])]:
            if not close(kit_value, js_value):
                problems.append(f"{where}: {name} {kit_value} (kit) != {js_value} (JS)")
        if not all(close(a, b) for a, b in zip(res.busy, got["busy"])):
            problems.append(f"{where}: busy {res.busy} (kit) != {got['busy']} (JS)")
        if res.peak_activations != got["peaks"]:
            problems.append(f"{where}: peaks {res.peak_activations} (kit) != {got['peaks']} (JS)")
    assert not problems, f"{len(problems)} disagreements, e.g.\n" + "\n".join(problems[:15])
    assert valid >= 300 and refused >= 60, (valid, refused)  # both sides of the port were exercised


def v_schedule(pp: int, mbs: int, split: bool) -> Schedule:
    """A GPipe-like V-placed schedule (down the ranks on chunk 0, back up on chunk 1), for the placement."""
    ranks = []
    for _ in range(pp):
        ops = [Op("F", m, 0) for m in range(mbs)] + [Op("F", m, 1) for m in range(mbs)]
        for c in (1, 0):
            ops += [Op(k, m, c) for m in range(mbs) for k in ("IW" if split else "B")]
        ranks.append(ops)
    return Schedule("v-gpipe", pp, mbs, 2, ranks, placement="v")


JS_SIMULATE = """
const out = [];
for (const [d, cfg] of arguments[0]) {
  const s = PK.fromDict(d);
  const factors = cfg.slowRank >= 0 ? s.ranks.map((_, r) => r === cfg.slowRank ? cfg.slowFactor : 1.0) : null;
  const r = PK.simulate(s, PK.resolveCosts(s, {fwd: 1.0, bwd: cfg.bwdRatio, stageCosts: factors,
                                               p2pLatency: cfg.latency}));
  out.push({times: r.events.map(evs => evs.map(e => [PK.opText(e.op, s.chunks), e.start, e.end])), makespan: r.makespan,
            bubble: r.bubbleFraction, peaks: r.peakActivations});
}
return out;
"""


def test_the_port_follows_the_kits_v_placement(page):
    """ZB-V and DualPipe-V will place rank r's chunks on stages r and 2pp-1-r: the port routes and costs them so."""
    rng = random.Random(5)
    cases = []
    for pp in range(1, 7):
        for split in (False, True):
            cfg = {"bwdRatio": rng.choice([1, 2, 3]), "slowRank": rng.choice([-1, rng.randrange(pp)]),
                   "slowFactor": rng.choice([1.5, 2]), "latency": rng.choice([0, 0.25])}
            cases.append((v_schedule(pp, rng.randint(1, 5), split), cfg))
    hand = Schedule.from_text("# schedule=v pp=2 microbatches=2 chunks=2 placement=v\n"
                              "r0: F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0\n"
                              "r1: F0c0 F0c1 F1c0 F1c1 B0c1 B0c0 B1c1 B1c0\n")
    cases.append((hand, {"bwdRatio": 2, "slowRank": 1, "slowFactor": 3, "latency": 0.5}))
    js = page.execute_script(JS_SIMULATE, [[sched.to_dict(), cfg] for sched, cfg in cases])
    assert page.execute_script("return [PK.virtualStage(2, 1, 5, 'v'), PK.stageOwner(7, 5, 'v')]") == [7, [2, 1]]
    for (sched, cfg), got in zip(cases, js):
        res = simulate(sched, kit_costs(sched, cfg))
        times = [[[sched.op_text(e.op), e.start, e.end] for e in res.rank_events(r)] for r in range(sched.pp)]
        assert [[t[0] for t in row] for row in got["times"]] == [[t[0] for t in row] for row in times]
        assert all(close(a[1], b[1]) and close(a[2], b[2])
                   for ra, rb in zip(times, got["times"]) for a, b in zip(ra, rb))
        assert close(res.makespan, got["makespan"]) and close(res.bubble_fraction, got["bubble"])
        assert res.peak_activations == got["peaks"]


# -- the page against the command line -----------------------------------------------------------
SET_INPUTS = """
const [values, events] = arguments;
let i = 0;
for (const [id, value] of values) {
  const el = document.getElementById(id);
  el.value = String(value);
  el.dispatchEvent(new Event(events[i++ % events.length]));
}
const read = id => document.getElementById(id);
const err = read('pk-error');
return {bubble: read('pk-bubble').textContent, bubbleValue: read('pk-bubble').dataset.value,
        makespan: read('pk-makespan').textContent, makespanValue: read('pk-makespan').dataset.value,
        peaks: read('pk-peaks').textContent, command: read('pk-command').textContent,
        error: err.hidden ? null : err.textContent,
        boxes: [...document.querySelectorAll('.pk-ops path')]
          .reduce((n, p) => n + p.getAttribute('d').split('M').length - 1, 0)};
"""


def set_inputs(driver, cfg: dict, events=("change",)) -> dict:
    values = {"pk-schedule": cfg["schedule"], "pk-pp": cfg["pp"], "pk-microbatches": cfg["microbatches"],
              "pk-bwd-ratio": cfg["bwdRatio"], "pk-slow-rank": cfg["slowRank"],
              "pk-slow-factor": cfg["slowFactor"], "pk-latency": cfg["latency"]}
    if cfg.get("chunks") is not None:
        values["pk-chunks"] = cfg["chunks"]
    return driver.execute_script(SET_INPUTS, list(values.items()), list(events))  # in this order


def cli_args(cfg: dict) -> list[str]:
    """``python -m pipeline_kit simulate`` arguments for one page configuration, built independently."""
    args = ["simulate", "--schedule", cfg["schedule"], "--pp", str(cfg["pp"]),
            "--microbatches", str(cfg["microbatches"])]
    family = FAMILIES[cfg["schedule"]]
    if family.chunks != "one":  # the page shows the chunks input of every family that takes --chunks
        args += ["--chunks", str(cfg["chunks"] if cfg["chunks"] is not None else family.default_chunks)]
    args += ["--fwd", "1", "--bwd", str(cfg["bwdRatio"])]
    if cfg["slowRank"] >= 0:
        factors = (str(cfg["slowFactor"]) if r == cfg["slowRank"] else "1" for r in range(cfg["pp"]))
        args += ["--stage-costs", ",".join(factors)]
    return args + ["--p2p-latency", str(cfg["latency"])]


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(args)
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def page_configs(rng: random.Random, n: int) -> list[dict]:
    configs = []
    for i in range(n):
        name = list(SCHEDULES)[i % len(SCHEDULES)]
        pp = rng.randint(2, 8)
        least = 2 if name == "dualpipev" else 1  # DualPipe-V refuses M < 2 pp (so does PyTorch)
        configs.append({"schedule": name, "pp": pp, "microbatches": pp * rng.randint(least, 4),
                        "chunks": rng.choice([2, 3, 4]) if name == "interleaved" else None,
                        "bwdRatio": rng.choice([1, 1.5, 2, 3]), "slowRank": rng.choice([-1, rng.randrange(pp)]),
                        "slowFactor": rng.choice([1.25, 1.5, 2]), "latency": rng.choice([0, 0.25, 0.5])})
    return configs


def check_page_against_cli(driver, configs: list[dict]) -> None:
    for i, cfg in enumerate(configs):
        shown = set_inputs(driver, cfg, events=("input",) if i % 2 else ("change",))
        args = cli_args(cfg)
        assert shown["error"] is None, f"{describe(cfg)}: {shown['error']}"
        assert shlex.split(shown["command"]) == ["python", "-m", "pipeline_kit", *args]
        code, out, err = run_cli(args + ["--json", "--no-timeline"])
        assert code == 0, err
        kit = json.loads(out)
        where = describe(cfg)
        assert shown["bubble"] == f"{kit['bubble_fraction']:.4f}", where
        assert close(float(shown["bubbleValue"]), kit["bubble_fraction"]), where
        assert close(float(shown["makespan"]), kit["makespan"]) or shown["makespan"] == f"{kit['makespan']:.6g}", where
        assert close(float(shown["makespanValue"]), kit["makespan"]), where
        assert shown["peaks"] == ", ".join(str(r["peak_activations"]) for r in kit["ranks"]), where
        ops = build_schedule(cfg["schedule"], cfg["pp"], cfg["microbatches"], cfg["chunks"]).num_ops
        assert shown["boxes"] == ops, f"{where}: {shown['boxes']} boxes drawn for {ops} ops"


def test_the_page_shows_what_the_command_line_prints(page):
    check_page_against_cli(page, page_configs(random.Random(1616), 32))


@pytest.mark.parametrize("change", [
    {"schedule": "interleaved", "pp": 4, "microbatches": 6, "chunks": 2},
    {"schedule": "interleaved", "pp": 4, "microbatches": 2, "chunks": 2},
    {"schedule": "interleaved", "pp": 1, "microbatches": 4, "chunks": 2},
    {"schedule": "interleaved", "pp": 4, "microbatches": 8, "chunks": 1},
    {"schedule": "interleaved", "pp": 4, "microbatches": 8, "chunks": 2, "latency": -0.5},
])
def test_a_refused_configuration_shows_the_kits_message(page, change):
    cfg = {"bwdRatio": 2, "slowRank": -1, "slowFactor": 1.5, "latency": 0, "chunks": None, **change}
    shown = set_inputs(page, cfg)
    code, out, err = run_cli(cli_args(cfg))
    assert code == 2
    prefix = "python -m pipeline_kit simulate: error: "
    assert err.startswith(prefix)
    if cfg["latency"] < 0:  # argparse refuses it before the kit's Costs does; the page shows the kit's words
        assert "--p2p-latency" in err
        with pytest.raises(CostError) as exc:
            simulate(build_schedule("interleaved", 4, 8, 2), p2p_latency=-0.5)
        expected = str(exc.value)
    else:
        expected = err.strip().removeprefix(prefix)
    assert shown["error"] == expected
    assert shown["bubble"] == shown["makespan"] == "\u2013" and shown["boxes"] == 0
    # and the page recovers when the configuration is fixed
    fixed = set_inputs(page, {**cfg, "schedule": "1f1b", "pp": 4, "microbatches": 8, "chunks": None, "latency": 0})
    assert fixed["error"] is None and fixed["bubble"] == "0.2727"


def test_sizes_the_kit_refuses_show_its_words(page):
    shown = set_inputs(page, {"schedule": "1f1b", "pp": 0, "microbatches": 8, "bwdRatio": 2, "slowRank": -1,
                              "slowFactor": 1.5, "latency": 0})
    with pytest.raises(ScheduleConfigError) as exc:
        build_schedule("1f1b", 0, 8)
    assert shown["error"] == str(exc.value) == "pp must be a positive integer, got 0"
    shown = set_inputs(page, {"schedule": "1f1b", "pp": "", "microbatches": 8, "bwdRatio": 2, "slowRank": -1,
                              "slowFactor": 1.5, "latency": 0})
    assert shown["error"] == "pp (ranks): enter a number"


def test_a_slow_rank_outside_the_pipeline_is_named(page):
    shown = set_inputs(page, {"schedule": "1f1b", "pp": 4, "microbatches": 8, "bwdRatio": 2, "slowRank": 4,
                              "slowFactor": 1.5, "latency": 0})
    assert shown["error"] == "slow rank must be -1 (none) or a rank 0 \u2026 pp-1 = 3, got 4"


# -- the built book --------------------------------------------------------------------------------
def check_book_page(driver, url: str) -> None:
    driver.get(url)
    assert driver.execute_script("return !!document.getElementById('pk-bubble')"), f"no explorer at {url}"
    text = driver.execute_script("return document.querySelector('main, article, body').innerText")
    bubble = driver.execute_script("return document.getElementById('pk-bubble').textContent")
    assert f"read a bubble of {bubble} and a makespan of 33" in " ".join(text.split())  # the kit's build-time numbers
    check_page_against_cli(driver, page_configs(random.Random(7), 4))
    # the theme's own console errors (a CDN stylesheet offline, a doubly declared THEBE_JS_URL) are not ours
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "/pk-" in e["message"]]
    assert not errors, errors


def test_the_built_book_page_works_from_file(browser, book_html):
    check_book_page(browser, (book_html / "chapters" / "explore.html").as_uri())


def test_the_built_book_page_works_over_http(browser, book_html):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(book_html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        check_book_page(browser, f"http://127.0.0.1:{server.server_address[1]}/chapters/explore.html")
    finally:
        server.shutdown()
        server.server_close()
