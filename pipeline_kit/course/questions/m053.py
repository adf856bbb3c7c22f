"""M053 (lab 5): send/recv orders that cannot deadlock, and debugging a real hang from its timeout lines.

Hangs come from the blocking P2P model (:mod:`pipeline_kit.sim.blocking_p2p`, which reproduces the real
runtime's waits and counts) and from real ``torchrun`` runs.  Why the model: it answers "who waits for
whom" exactly, so a student's order, prediction or diagnosis can be checked on any size, not just the one
we ran.
"""

from __future__ import annotations

import functools
import re
from types import SimpleNamespace

from ...schedules import build_schedule, stage_owner
from .live import check_deallocate  # noqa: F401 -- a live-object check: it probes the kernel (live.py)
from ...sim.blocking_p2p import ProgramError, _normalise, run_blocking, runtime_program
from ...grading.parts import fail_choices, plural
from .m046 import RUN
from .common import (
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_choices,
    expect_keys,
    expect_number,
    expect_type,
    fail,
)

DEADLOCKS = book("p2p", "Two kinds of deadlock")  # where the book teaches what these checks find
A_REAL_HANG = book("p2p", "A real hang, and how to read it")
FIXES = {
    "agree_before_schedule": None,
    "send_placeholder": None,
    "longer_timeout": "a longer timeout only makes the same hang last longer: the message never comes",
    "batch_isend_irecv": "batching avoids transport-level cycles between calls that all happen; it cannot "
                         "deliver a message that is never sent",
    "retry_receive": "posting the receive again waits for the same message, which was never sent",
    "skip_receive_locally": "the receiver cannot see the sender's batch: deciding locally on each rank is "
                            "exactly how the two sides disagree",
}
LOG_FIELDS = {
    "rank": "who is waiting", "peer": "whom it waits for -- the other side of the link",
    "stage": "which stage of the model (differs from the rank with interleaving)",
    "chunk": "which model chunk of the rank (interleaving)", "microbatch": "which message of the step",
    "direction": "forward activation or backward gradient",
    "tag": "the message's sequence number on its channel, to pair it with the sender's",
    "shape": "a mismatch in shape is the other classic P2P bug", "dtype": "bytes per element must agree too",
    "sent_count": "how far the waiting rank got on this link", "received_count": "how far the link got",
}
LOG_NOISE = {
    "loss": "the loss says nothing about which message is missing",
    "learning_rate": "the learning rate says nothing about which message is missing",
    "parameter_count": "the parameter count is fixed; it cannot tell two messages apart",
    "gpu_memory": "memory does not say which message is missing",
}

_LINE = re.compile(
    r"\[rank (\d+)\] P2P TIMEOUT: rank \d+ timed out after [\d.]+ s waiting to receive the "
    r"(forward activation|backward gradient) of microbatch (\d+), chunk (\d+) \(stage (\d+)\) from rank (\d+); "
    r"expected shape (\([\d, ]*\)) (\w+); messages with rank \d+ so far: (\d+) received, (\d+) sent "
    r"\(the wait began ([\d.]+) s")


def timeout_lines(text: str) -> dict[int, dict]:
    """The runtime's timeout lines in ``text``, by waiting rank (used for feedback and the real runs)."""
    out = {}
    for m in _LINE.finditer(text):
        r, kind, mb, chunk, stage, peer, shape, dtype, rec, sent, began = m.groups()
        out[int(r)] = {"rank": int(r), "peer": int(peer), "direction": kind.split()[0], "microbatch": int(mb),
                       "chunk": int(chunk), "stage": int(stage),
                       "shape": tuple(int(x) for x in re.findall(r"\d+", shape)),
                       "dtype": dtype, "received": int(rec), "sent": int(sent), "began": float(began)}
    return out


def skipped_message(pp: int, microbatches: int, rank: int, mb: int) -> tuple[str, int]:
    """(direction, peer) of the send ``--inject skip-send:rank=R,mb=K`` skips: R's first send of K."""
    for item in runtime_program(build_schedule("1f1b", pp, microbatches), rank):
        if isinstance(item, tuple) and item[0] == "isend" and item[2][1:] == str(mb):
            return ("forward" if item[2][0] == "F" else "backward"), item[1]
    raise ValueError(f"rank {rank} sends nothing of microbatch {mb}")


def model_waits(pp: int, microbatches: int, skip=None, crash=None) -> dict[int, tuple[str, int, int]]:
    """Where every rank of the kit's runtime blocks: {rank: (direction, microbatch, peer)} (tagged model)."""
    progs = [runtime_program(build_schedule("1f1b", pp, microbatches), r) for r in range(pp)]
    if skip is not None:
        r, k = skip
        i = next(i for i, it in enumerate(progs[r])
                 if isinstance(it, tuple) and it[0] == "isend" and it[2][1:] == str(k))
        del progs[r][i]
    if crash is not None:
        r, k = crash
        progs[r] = progs[r][:progs[r].index(f"F{k}")]
    res = run_blocking(progs, tagged=True)
    return {r: ("forward" if w.comm.name[0] == "F" else "backward", int(w.comm.name[1:]), w.peer)
            for r, w in sorted(res.blocked.items())}


def model_counts(pp: int, microbatches: int, skip) -> dict[int, tuple[int, int]]:
    """{rank: (received from, sent to) the peer it waits for} when ``skip`` = (rank, mb) is skipped."""
    progs = [runtime_program(build_schedule("1f1b", pp, microbatches), r) for r in range(pp)]
    r, k = skip
    i = next(i for i, it in enumerate(progs[r]) if isinstance(it, tuple) and it[0] == "isend" and it[2][1:] == str(k))
    del progs[r][i]
    res = run_blocking(progs, tagged=True)
    return {q: (res.received[q].get(w.peer, 0), res.sent[q].get(w.peer, 0)) for q, w in res.blocked.items()}


def real_hang(fault: str, args=RUN, attempts: int = 3) -> str:
    """Run a real hang (``torchrun`` with ``--inject fault``) and return its stderr without the INJECTED
    line -- a real bug prints none.  A busy machine can stop a rank before it prints; then run again.
    Each hang runs once per process (the given cell's and the test cells' calls share it)."""
    return _real_hang(fault, tuple(args), attempts)


@functools.lru_cache(maxsize=None)
def _real_hang(fault: str, args: tuple, attempts: int) -> str:
    from ...launch import torchrun
    pp = 4
    text = ""
    for attempt in range(attempts):  # (a retry runs again: a shared recording of the incomplete run would replay)
        run = torchrun(pp, *args, "--inject", fault, timeout=120, rerun=attempt > 0)
        glued = re.sub(r"(?<=.)(?=\[rank \d+\] )", "\n", run.stderr)  # ranks share one pipe: split glued lines
        text = "\n".join(ln for ln in glued.splitlines() if ln.strip() and "INJECTED FAULT" not in ln)
        if len(timeout_lines(text)) == pp:
            break
    return text


# -- M053 main -----------------------------------------------------------------------------------
def _names(schedule, src, dst):
    from ...runtime.p2p import message_plan
    return [("F" if x.direction == "forward" else "B") + str(x.microbatch)
            for x in message_plan(schedule).get((src, dst), [])]


@check
def check_blocking_program(fn, cases) -> None:
    for pp, m in cases:
        schedule = build_schedule("1f1b", pp, m)
        programs = []
        for r in range(pp):
            prog = call(fn, pp, m, r, name="blocking_program")
            expect_type(prog, (list, tuple), f"blocking_program({pp}, {m}, {r})")
            programs.append(list(prog))
        try:
            items = _normalise(programs)
        except ProgramError as exc:
            fail(f"blocking_program({pp}, {m}, ...): {exc}")
        for r, prog in enumerate(items):
            what = f"blocking_program({pp}, {m}, {r})"
            comms = [c for kind, x in prog if kind == "call" for c in x]
            if any(c.kind == "isend" for c in comms):
                fail(f"{what} uses 'isend', which never blocks and so sidesteps the question; use blocking 'send' "
                     "and 'recv' and pair them so that no cycle forms")
            ops = [x for kind, x in prog if kind == "compute"]
            want_ops = [op.text() for op in schedule.ranks[r]]
            if ops != want_ops:
                fail(f"{what}: its compute ops {' '.join(ops[:8])}{' ...' if len(ops) > 8 else ''} are not 1F1B's "
                     f"order on rank {r}: take them from build_schedule('1f1b', {pp}, {m})")
            for peer in (r - 1, r + 1):
                if not 0 <= peer < pp:
                    continue
                sends = [c.name for c in comms if c.kind == "send" and c.peer == peer]
                recvs = [c.name for c in comms if c.kind == "recv" and c.peer == peer]
                want_s, want_r = _names(schedule, r, peer), _names(schedule, peer, r)
                if sorted(sends) != sorted(want_s):
                    miss = sorted(set(want_s) - set(sends)) or sorted(set(sends) - set(want_s))
                    fail(f"{what} sends {plural(len(sends), 'message')} to rank {peer}, not one per activation or "
                         f"gradient its ops hand to that neighbour; check {miss[0] if miss else '?'} {DEADLOCKS}")
                if sorted(recvs) != sorted(want_r):
                    fail(f"{what} receives {plural(len(recvs), 'message')} from rank {peer}, not one per activation or "
                         f"gradient its ops need from that neighbour {DEADLOCKS}")
        res = run_blocking(programs)
        if res.errors:
            fail(f"pp={pp}, M={m}: {res.errors[0]}")
        if not res.completed:
            hint = ""
            if res.cycle and all(w.comm.kind == "send" for w in res.cycle):
                hint = (" -- both ranks block in a send that waits for the other's receive; post each send together "
                        "with the receive that follows it (Megatron's send_forward_recv_backward batches them), or "
                        "let odd ranks receive before they send")
            fail(f"pp={pp}, M={m} hangs: {res.report().splitlines()[0]}{hint}")


FIELD_KEYS = ("rank", "peer", "direction", "microbatch", "chunk", "stage", "shape", "dtype", "received", "sent",
              "began")


def kit_line(rank, peer, msg, pp, shape, dtype, received, sent, began, timeout_s=2.0) -> str:
    """A timeout line exactly as the runtime prints it, from the runtime's own formatter."""
    from ...runtime.p2p import P2P
    ns = SimpleNamespace(rank=rank, timeout_s=timeout_s, pp=pp, placement="looped", shape=shape, dtype=dtype,
                         received={peer: received}, sent={peer: sent}, tagged=True)  # the lab's runs: gloo, tagged
    ns._counts = lambda p: P2P._counts(ns, p)
    return f"[rank {rank}] P2P TIMEOUT: {P2P._recv_desc(ns, msg, peer)} (the wait began {began:.3f} s into the step)"


def _check_fields(fn, line: str, want: dict) -> None:
    got = call(fn, line, name="parse_timeout")
    what = f"parse_timeout(<rank {want['rank']}'s line>)"
    expect_keys(got, FIELD_KEYS, what)
    for key in FIELD_KEYS:
        g, w = got[key], want[key]
        if key == "shape":
            if not isinstance(g, tuple):
                fail(f"{what}['shape'] is {describe(g)}; give the shape as a tuple of ints")
            if g != w:
                fail(f"{what}['shape'] is {describe(g)}, not the expected shape the line prints")
            continue
        if key == "dtype":
            if g != w:
                fail(f"{what}['dtype'] is {describe(g)}, not the dtype as the line prints it")
            continue
        if key == "direction":
            if g != w:
                fail(f"{what}['direction'] is {describe(g)}; use 'forward' (an activation) or 'backward' (a gradient)")
            continue
        if key == "began":
            expect_number(g, f"{what}['began']")
            if not close(g, w, abs_=1e-6):
                fail(f"{what}['began'] is {g}, not the time the line prints (seconds into the step)")
            continue
        if isinstance(g, bool) or not isinstance(g, int):
            fail(f"{what}[{key!r}] must be an int, got {describe(g)}")
        if g == w:
            continue
        if key in ("received", "sent") and g == want["sent" if key == "received" else "received"]:
            fail(f"{what}: received and sent are swapped -- 'received' is what rank {want['rank']} got from "
                 f"rank {want['peer']}, 'sent' what it sent to it")
        if key in ("chunk", "stage"):
            fail(f"{what}[{key!r}] is {g}: with interleaving a rank holds several chunks, and "
                 "stage = chunk * pp + rank")
        if key == "peer" and g == want["rank"]:
            fail(f"{what}['peer'] is the waiting rank itself; the peer is the rank it waits for")
        fail(f"{what}[{key!r}] is {g}, not what the line says {A_REAL_HANG}")


@check
def check_parse_timeout_real(fn, stderr_text: str, run_args, fault: str) -> None:
    from ...run import build_parser
    args = build_parser().parse_args(list(run_args))
    r, k = (int(v) for v in re.findall(r"\d+", fault))
    waits = model_waits(4, args.microbatches, skip=(r, k))
    counts = model_counts(4, args.microbatches, (r, k))
    lines = [ln for ln in stderr_text.splitlines() if "P2P TIMEOUT" in ln]
    if not lines:
        fail("the hang run printed no timeout line (rerun the cell that runs it)")
    parsed = timeout_lines(stderr_text)
    for line in lines:
        rank = int(re.search(r"\[rank (\d+)\]", line).group(1))
        direction, mb, peer = waits[rank]
        want = {"rank": rank, "peer": peer, "direction": direction, "microbatch": mb, "chunk": 0, "stage": rank,
                "shape": (args.micro_batch_size, args.seq_len, args.hidden), "dtype": "float32",
                "received": counts[rank][0], "sent": counts[rank][1], "began": parsed[rank]["began"]}
        _check_fields(fn, line, want)


@check
def check_parse_timeout_kit(fn, cases) -> None:
    """Timeout lines the runtime's own formatter prints for ``cases`` (see :func:`hidden_timeout_cases`)."""
    for rank, peer, msg, pp, shape, dtype, rec, sent, began in cases:
        line = kit_line(rank, peer, msg, pp, shape, dtype, rec, sent, began)
        want = {"rank": rank, "peer": peer, "direction": msg.direction, "microbatch": msg.microbatch,
                "chunk": stage_owner(msg.dst_stage, pp)[1], "stage": msg.dst_stage, "shape": shape,
                "dtype": str(dtype).replace("torch.", ""), "received": rec, "sent": sent, "began": began}
        _check_fields(fn, line, want)


def _wait_dict(got, what):
    expect_type(got, dict, what)
    out = {}
    for k, v in got.items():
        if not isinstance(k, int) or isinstance(k, bool):
            fail(f"{what}: keys are ranks (ints), got {describe(k)}")
        if not isinstance(v, (tuple, list)) or len(v) != 3:
            fail(f"{what}[{k}] must be (direction, microbatch, peer), got {describe(v)}")
        out[k] = tuple(v)
    return out


def _compare_waits(got, want, what, cause):
    for r in sorted(set(want) - set(got)):
        d, mb, peer = want[r]
        why = ("the stall spreads upstream: gradients stop coming back, so the rank stops at its next backward"
               if d == "backward" else "the stall spreads downstream: a rank starves once its input stops")
        fail(f"{what} misses rank {r}: it times out too -- {why} {A_REAL_HANG}")
    for r in sorted(set(got) - set(want)):
        fail(f"{what} lists rank {r}, which {cause(r)}")
    for r in sorted(want):
        if got[r] != want[r]:
            d, mb, peer = want[r]
            gd, gmb, gpeer = got[r]
            if gd == d and gpeer == peer:
                fail(f"{what}[{r}] = {got[r]}: rank {r} runs on until it needs a message it cannot get, and that is "
                     f"not microbatch {gmb}'s (walk its 1F1B order)")
            fail(f"{what}[{r}] = {got[r]} is not what rank {r} waits for: walk its 1F1B order to the first message it "
                 f"cannot get {A_REAL_HANG}")


@check
def check_stranded(fn, cases) -> None:
    for pp, m, rank, mb in cases:
        what = f"stranded({pp}, {m}, crash_rank={rank}, crash_mb={mb})"
        got = _wait_dict(call(fn, pp, m, rank, mb, name="stranded"), what)
        want = model_waits(pp, m, crash=(rank, mb))
        _compare_waits(got, want, what, lambda r, dead=rank: "crashed: it waits for nothing" if r == dead
                       else "can finish its program without the crashed rank")


# -- M053 follow-up ------------------------------------------------------------------------------
def _variants(text: str, pp: int, root: int, victim: int):
    """The same hang as other runs could print it: lines in another order, other wait-start times."""
    yield "the run's stderr", text
    lines = text.splitlines()
    yield "the same lines in reverse order", "\n".join(reversed(lines))
    parsed = timeout_lines(text)
    far = max((r for r in parsed if r not in (root, victim)), key=lambda r: abs(r - root), default=None)
    if far is not None:
        def retime(m):
            r = int(m.group(1))
            return m.group(0).replace(f"began {m.group(2)} s", f"began {0.001 if r == far else 0.5 + r / 100:.3f} s")
        text2 = re.sub(r"\[rank (\d+)\] P2P TIMEOUT:.*?began ([\d.]+) s", retime, text)
        yield f"the same run with rank {far}'s wait starting first", text2
    ours = "\n".join(ln for ln in lines if "P2P TIMEOUT" in ln)
    yield "only the P2P TIMEOUT lines", ours


@check
def check_diagnose(fn, stderr_text: str, fault: str, pp: int = 4, microbatches: int = 8) -> None:
    root, mb = (int(v) for v in re.findall(r"\d+", fault))
    direction, victim = skipped_message(pp, microbatches, root, mb)
    parsed = timeout_lines(stderr_text)
    torchrun_root = re.search(r"Root Cause \(first observed failure\):\s*\[\d+\]:.*?rank\s*:\s*(\d+)", stderr_text,
                              re.DOTALL)
    first = None
    for label, text in _variants(stderr_text, pp, root, victim):
        got = call(fn, text, name="diagnose")
        what = f"diagnose({label})"
        expect_keys(got, ("rank", "microbatch", "direction"), what)
        if got["rank"] != root:
            g = got["rank"]
            earliest = min(timeout_lines(text).values(), key=lambda w: w["began"], default=None)
            if first is not None:
                fail(f"{what} gives rank {g}, another rank than on the run's own text: your diagnosis depends on "
                     "the order of the lines or on the wait times, which change from run to run")
            if g == victim:
                fail(f"{what}: rank {g} is the victim -- it waits for a message its sender never sent; the sender, "
                     f"past that send in its schedule, is the root cause {A_REAL_HANG}")
            if earliest and g in (earliest["rank"], earliest["peer"]):
                fail(f"{what} gives rank {g}, from the earliest wait: when a rank runs out of work depends on where "
                     "it sits in the schedule, not on causality. Follow each wait to its sender and ask whether the "
                     "sender has passed the send")
            if torchrun_root and g == int(torchrun_root.group(1)):
                fail(f"{what} gives rank {g}, torchrun's 'Root Cause (first observed failure)': that is the first "
                     "process to exit, not the cause")
            fail(f"{what} gives rank {g}; the root cause is the rank whose schedule is past a send its peer "
                 "still waits for")
        if got["microbatch"] != mb:
            waits_of_root = parsed.get(root)
            if waits_of_root and got["microbatch"] == waits_of_root["microbatch"]:
                fail(f"{what}: microbatch {got['microbatch']} is what the root cause itself waits for, a consequence; "
                     f"the missing message is the one its victim waits for from it {A_REAL_HANG}")
            fail(f"{what}: microbatch {got['microbatch']} is wrong; it is the microbatch of the message that "
                 "never arrived")
        if got["direction"] != direction:
            fail(f"{what}: direction {describe(got['direction'])} is not the missing message's: is it an activation "
                 f"or a gradient? {A_REAL_HANG}")
        first = first or got


@check
def check_predict_timeouts(fn, cases, real=()) -> None:
    for pp, m, rank, mb in cases:
        what = f"predict_timeouts({pp}, {m}, skip_rank={rank}, skip_mb={mb})"
        got = _wait_dict(call(fn, pp, m, rank, mb, name="predict_timeouts"), what)
        want = model_waits(pp, m, skip=(rank, mb))
        _compare_waits(got, want, what, lambda r: "finishes its program: nothing it needs depends on the lost message")
    for text, fault, pp, m in real:
        r, k = (int(v) for v in re.findall(r"\d+", fault))
        got = _wait_dict(call(fn, pp, m, r, k, name="predict_timeouts"), f"predict_timeouts({pp}, {m}, {r}, {k})")
        for rank, w in timeout_lines(text).items():
            seen = (w["direction"], w["microbatch"], w["peer"])
            if got.get(rank) != seen:
                fail(f"predict_timeouts({pp}, {m}, {r}, {k})[{rank}] = {describe(got.get(rank))}, but the real "
                     f"run's timeout line of rank {rank} says otherwise: read it {A_REAL_HANG}")


@check
def check_fixes(fixes) -> None:
    """Each option on its own (``parts.fail_choices``): an empty answer, or every option, earns nothing."""
    got = expect_choices(fixes, FIXES, "fixes")
    missed = []
    if "agree_before_schedule" not in got:
        missed.append("fixes misses the global decision: all ranks must agree on the microbatches (one all-reduce) "
                      "before the schedule runs")
    if "send_placeholder" not in got:
        missed.append("fixes misses keeping the protocol: still send (an empty tensor or a zero-token shape message) "
                      "so every send/receive pair happens")
    non_fixes = [name for name in FIXES if FIXES[name]]
    fail_choices(missed, [f"fixes contains {name!r}: {FIXES[name]}" for name in non_fixes if name in got], 2,
                 len(non_fixes))


@check
def check_log_fields(fields) -> None:
    """Each field on its own (``parts.fail_choices``): an empty answer, or every field, earns nothing."""
    got = expect_choices(fields, set(LOG_FIELDS) | set(LOG_NOISE), "log_fields")
    fail_choices([f"log_fields misses {name!r}: {LOG_FIELDS[name]}" for name in LOG_FIELDS if name not in got],
                 [f"log_fields contains {name!r}: {LOG_NOISE[name]}" for name in LOG_NOISE if name in got],
                 len(LOG_FIELDS), len(LOG_NOISE))


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_pairing_cases(rng) -> list:
    """(pp, M): the fixed cases have fewer microbatches than ranks (no steady state) and an odd rank count."""
    return drawn(rng, 3, lambda r: (r.randint(2, 6), r.randint(1, 9)), fixed=[(2, 1), (4, 2), (5, 7)])


def hidden_crash_cases(rng) -> list:
    def make(r):
        pp = r.randint(2, 5)
        m = r.randint(pp, 2 * pp)
        return pp, m, r.randrange(pp), r.randrange(m)
    # the fixed crashes: the last rank, the first rank (no upstream neighbour), a middle rank's last microbatch
    return drawn(rng, 3, make, fixed=[(2, 4, 1, 3), (4, 4, 0, 2), (5, 6, 2, 5)])


def hidden_skip_cases(rng) -> list:
    def make(r):
        pp = r.randint(2, 5)
        m = r.randint(2, 10)
        return pp, m, r.randrange(pp), r.randrange(m)
    # the fixed skips: a backward send (the last rank sends only gradients), the first rank's last forward
    return drawn(rng, 3, make, fixed=[(2, 3, 1, 1), (4, 8, 3, 2), (4, 6, 0, 5)])


def hidden_timeout_cases(rng) -> list:
    """(rank, peer, message, pp, shape, dtype, received, sent, began) of a timeout line: interleaved or not, either
    direction, any dtype; the fixed cases are chunk 1 of an interleaved bf16 model and swappable counts."""
    import torch

    from ...runtime.p2p import Message

    def make(r):
        pp, v = r.randint(2, 8), r.randint(1, 3)
        direction = r.choice(["forward", "backward"])
        src = r.randrange(pp * v - 1) + (direction == "backward")
        dst = src + 1 if direction == "forward" else src - 1
        msg = Message(direction, r.randrange(64), src, dst)
        shape = (r.randint(1, 8), r.choice([32, 128, 1024, 4096]), r.choice([32, 64, 768, 1024]))
        dtype = r.choice([torch.float32, torch.bfloat16, torch.float16])
        return (stage_owner(dst, pp)[0], stage_owner(src, pp)[0], msg, pp, shape, dtype, r.randrange(200),
                r.randrange(200), r.randrange(60_000) / 1000)
    return drawn(rng, 2, make, fixed=[
        (1, 0, Message("forward", 3, 2, 3), 2, (1, 4096, 1024), torch.bfloat16, 11, 9, 1.25),
        (0, 1, Message("backward", 6, 1, 0), 2, (4, 128, 256), torch.float16, 6, 13, 0.5)])
