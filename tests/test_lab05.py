"""Lab 5 (M046, M053): typical wrong answers lose exactly their rubric points, with feedback that says why.

The notebook test grades the whole lab once, its torchrun jobs replayed from recordings;
the unit tests below call the check functions directly, on hang texts the runtime's own formatter
writes for the waits the blocking model predicts (the same lines a real run prints; lab05's notebook
checks that against real runs).
"""

import random
import re

import pytest
import torch
from lab_grading import assert_partial, grade_answers

from pipeline_kit.course.labs import lab05
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.runtime.p2p import Message
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim.blocking_p2p import run_blocking, runtime_program

LAB = "lab05_p2p"


# -- one whole notebook: each wrong answer costs exactly its checks ----------------------------------------
@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """A blocking order that hangs, bytes without the element size (which the answers built on it inherit),
    and a diagnosis that blames the victim of a hang -- the real torchrun jobs replayed."""
    pairing = '''def blocking_program(pp, microbatches, rank):
    return runtime_program(build_schedule("1f1b", pp, microbatches), rank, send="send")
'''
    bytes_ = '''def boundary_bytes(seq, mbs, hidden, dtype):
    return seq * mbs * hidden
real_send_bytes = 8192
'''
    follow_hang = '''def diagnose(stderr_text):
    # the rank that waited for an activation that never came
    for line in stderr_text.splitlines():
        if "P2P TIMEOUT" in line:
            w = parse_timeout(line)
            if w["direction"] == "forward" and w["received"] > w["sent"] and w["peer"] == w["rank"] - 1:
                return {"rank": w["rank"], "microbatch": w["microbatch"], "direction": w["direction"]}
def predict_timeouts(pp, microbatches, skip_rank, skip_mb):
    schedule = build_schedule("1f1b", pp, microbatches)
    programs = [runtime_program(schedule, r) for r in range(pp)]
    prog = programs[skip_rank]
    first = next(i for i, it in enumerate(prog) if isinstance(it, tuple) and it[2][1:] == str(skip_mb)
                 and it[0] == "isend")
    del prog[first]
    return waits_of(run_blocking(programs, tagged=True))
fixes = {"agree_before_schedule", "send_placeholder"}
log_fields = {"rank", "peer", "stage", "chunk", "microbatch", "direction", "tag", "shape", "dtype", "sent_count",
              "received_count"}
'''
    report = grade_answers(tmp_path, LAB, {"pairing": pairing, "bytes": bytes_, "follow_hang": follow_hang})
    # enc_dec_boundary, varlen_step_bytes and bank_send_bytes use the student's boundary_bytes: they are judged
    # against it, so its mistake costs its own check only
    assert_partial(report, {"m053_main_pairing": "both ranks block in a send",
                            "m046_main_bytes": "is the number of elements; multiply by the bytes per element",
                            "m053_follow_mechanism": "rank 2 is the victim"})


# -- fast unit tests of the checks -----------------------------------------------------------------
def hang_text(pp, m, rank, mb, began=None):
    """A hang's stderr as the runtime prints it, for the waits and counts the blocking model predicts."""
    waits = lab05.model_waits(pp, m, skip=(rank, mb))
    counts = lab05.model_counts(pp, m, (rank, mb))
    lines = []
    for r, (direction, k, peer) in waits.items():
        src, dst = (r - 1, r) if direction == "forward" else (r + 1, r)
        t = began[r] if began else 0.02 + 0.01 * r
        lines.append(lab05.kit_line(r, peer, Message(direction, k, src, dst), pp, (2, 32, 32), torch.float32,
                                    *counts[r], t))
    return "\n".join(lines) + "\nRoot Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"


def solution_namespace():
    """The solution's imports and answer cells in one namespace; the torchrun cells are replaced by a
    hang text, so this takes milliseconds."""
    import nbformat
    from lab_grading import SOLUTIONS
    nb = nbformat.read(str(SOLUTIONS / f"{LAB}.ipynb"), as_version=4)
    ns: dict = {"SCHEDULE": build_schedule("1f1b", 4, 8), "stderr": hang_text(4, 8, 1, 3)}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == "given_1"):
            exec(cell.source, ns)  # noqa: S102 - the solution cells are the code under test
    return ns


@pytest.fixture(scope="module")
def sol():
    return solution_namespace()


def test_real_format_matches_kit_line():
    text = hang_text(4, 8, 1, 3)
    parsed = lab05.timeout_lines(text)
    assert sorted(parsed) == [0, 1, 2, 3]
    assert (parsed[2]["received"], parsed[2]["sent"], parsed[2]["microbatch"]) == (3, 2, 3)


def test_solution_passes_the_checks(sol):
    lab05.check_diagnose(sol["diagnose"], hang_text(4, 8, 1, 3), "skip-send:rank=1,mb=3")
    lab05.check_diagnose(sol["diagnose"], hang_text(4, 8, 2, 5), "skip-send:rank=2,mb=5")
    lab05.check_diagnose(sol["diagnose"], hang_text(4, 8, 3, 2), "skip-send:rank=3,mb=2")
    lab05.check_predict_timeouts(sol["predict_timeouts"], [(4, 8, 2, 5), (3, 6, 0, 5)],
                                 real=[(hang_text(4, 8, 1, 3), "skip-send:rank=1,mb=3", 4, 8)])
    lab05.check_parse_timeout_kit(sol["parse_timeout"], lab05.hidden_timeout_cases(random.Random(0)))
    lab05.check_blocking_program(sol["blocking_program"], [(3, 3), (2, 1)])
    lab05.check_stranded(sol["stranded"], [(4, 8, 2, 1), (2, 4, 1, 3)])
    lab05.check_deallocate(sol["deallocate_output"])
    lab05.check_recv_buffer(sol["recv_buffer"], [((1, 2, 3, 4), torch.float16)])
    lab05.check_step_bytes(sol["step_p2p_bytes"], [(2, 4, "tiny", 4)])
    lab05.check_accounting(sol["accounting"], [(2, 3, True, True)])


def test_diagnose_from_the_earliest_wait():
    def earliest_peer(text):
        waits = lab05.timeout_lines(text).values()
        w = min(waits, key=lambda w: w["began"])
        return {"rank": w["peer"], "microbatch": w["microbatch"], "direction": w["direction"]}
    # the victim (rank 2) waits first in this text, so the real order passes; the retimed copy does not
    text = hang_text(4, 8, 1, 3, began={0: 0.05, 1: 0.04, 2: 0.01, 3: 0.03})
    with pytest.raises(LabCheckFailed, match="depends on the order of the lines or on the wait times"):
        lab05.check_diagnose(earliest_peer, text, "skip-send:rank=1,mb=3")


def test_diagnose_torchrun_root_and_wrong_microbatch(sol):
    with pytest.raises(LabCheckFailed, match="torchrun's 'Root Cause"):
        lab05.check_diagnose(lambda t: {"rank": 0, "microbatch": 3, "direction": "forward"},
                             hang_text(4, 8, 1, 3, began={0: 0.05, 1: 0.04, 2: 0.01, 3: 0.03}), "skip-send:rank=1,mb=3")
    with pytest.raises(LabCheckFailed, match="is what the root cause itself waits for"):
        lab05.check_diagnose(lambda t: {"rank": 1, "microbatch": 2, "direction": "forward"},
                             hang_text(4, 8, 1, 3), "skip-send:rank=1,mb=3")
    with pytest.raises(LabCheckFailed, match="is not the missing message's: is it an activation or a gradient"):
        lab05.check_diagnose(lambda t: {"rank": 3, "microbatch": 2, "direction": "forward"},
                             hang_text(4, 8, 3, 2), "skip-send:rank=3,mb=2")


def test_predict_timeouts_wrong_answers():
    def only_victim(pp, m, r, k):
        return {r + 1: ("forward", k, r)}
    with pytest.raises(LabCheckFailed, match="misses rank 0: .* the stall spreads upstream"):
        lab05.check_predict_timeouts(only_victim, [(4, 8, 1, 3)])
    def same_mb(pp, m, r, k):
        return {q: (w[0], k, w[2]) for q, w in lab05.model_waits(pp, m, skip=(r, k)).items()}
    with pytest.raises(LabCheckFailed, match="cannot get, and that is not microbatch 3's"):
        lab05.check_predict_timeouts(same_mb, [(4, 8, 1, 3)])


def test_blocking_program_wrong_answers():
    def naive(pp, m, r):
        return runtime_program(build_schedule("1f1b", pp, m), r, send="send")
    with pytest.raises(LabCheckFailed, match="circular wait: .*both ranks block in a send"):
        lab05.check_blocking_program(naive, [(2, 4)])
    def nonblocking(pp, m, r):
        return runtime_program(build_schedule("1f1b", pp, m), r)
    with pytest.raises(LabCheckFailed, match="uses 'isend'"):
        lab05.check_blocking_program(nonblocking, [(2, 4)])
    def gpipe(pp, m, r):
        return runtime_program(build_schedule("gpipe", pp, m), r, send="send")
    with pytest.raises(LabCheckFailed, match="are not 1F1B's order on rank 0"):
        lab05.check_blocking_program(gpipe, [(2, 4)])


def test_deallocate_wrong_answers():
    def zero(y):
        y.data.zero_()

    def resize(y):
        y.untyped_storage().resize_(0)

    def detach(y):
        y.detach_()

    def nothing(y):
        pass
    for fn, text in ((zero, "changed the bytes"), (resize, "resized the storage"), (detach, "no grad_fn"),
                     (nothing, "still holds 256 elements")):
        with pytest.raises(LabCheckFailed, match=text):
            lab05.check_deallocate(fn)


def test_parse_timeout_swapped_counts(sol):
    def swapped(line):
        d = sol["parse_timeout"](line)
        d["received"], d["sent"] = d["sent"], d["received"]
        return d
    with pytest.raises(LabCheckFailed, match="received and sent are swapped"):
        lab05.check_parse_timeout_kit(swapped, lab05.hidden_timeout_cases(random.Random(0)))

    def chunkless(line):
        d = sol["parse_timeout"](line)
        d["chunk"] = 0
        return d
    with pytest.raises(LabCheckFailed, match="stage = chunk \\* pp \\+ rank"):
        lab05.check_parse_timeout_kit(chunkless, lab05.hidden_timeout_cases(random.Random(0)))


def test_m046_wrong_answers():
    with pytest.raises(LabCheckFailed, match="the last stage reads the labels"):
        lab05.check_crossing({"activation", "activation_grad", "labels"})
    with pytest.raises(LabCheckFailed, match="misses 'activation_grad'"):
        lab05.check_crossing({"activation"})
    def one_way(pp, m):
        return {("activation", k, s, s + 1) for k in range(m) for s in range(pp - 1)}
    with pytest.raises(LabCheckFailed, match="has no 'activation_grad' messages"):
        lab05.check_boundary_messages(one_way, [(2, 2)])
    def fp32(s, b, h, dtype):
        return s * b * h * 4
    with pytest.raises(LabCheckFailed, match="uses float32's 4 bytes per element"):
        lab05.check_boundary_bytes(fp32, [(512, 1, 768, torch.bfloat16)])
    with pytest.raises(LabCheckFailed, match="not 16-bit values"):
        lab05.check_real_send(4096, ("--hidden", "32"))
    def dec_only(se, sd, b, h, dt):
        return {"forward": [(sd, b, h)], "backward": [(sd, b, h)], "bytes_per_microbatch": 0}
    with pytest.raises(LabCheckFailed, match="cross-attention needs the encoder output"):
        lab05.check_enc_dec(dec_only, [(512, 128, 1, 768, torch.bfloat16)])
    def padded(lens, b, h, dt, pp):
        return 2 * (pp - 1) * len(lens) * max(lens) * b * h * 2
    with pytest.raises(LabCheckFailed, match="pads every microbatch to the longest"):
        lab05.check_varlen(padded, [([512, 384, 100, 512], 1, 768, torch.bfloat16, 4)])
    with pytest.raises(LabCheckFailed, match="trailing zeros are padding"):
        lab05.check_recv_buffer(lambda meta, dt: torch.empty(tuple(meta[1:].tolist()), dtype=dt),
                                [((2, 32, 64), torch.bfloat16)])
    with pytest.raises(LabCheckFailed, match="must allocate the sender's dtype"):
        lab05.check_recv_buffer(lambda meta, dt: torch.empty(tuple(meta[1:1 + int(meta[0])].tolist())),
                                [((2, 32, 64), torch.bfloat16)])


def test_answers_built_on_the_students_helper_are_judged_against_it():
    def elements(s, b, h, dtype):
        return s * b * h

    def enc_dec(se, sd, b, h, dt):
        return {"forward": [(sd, b, h), (se, b, h)], "backward": [(sd, b, h), (se, b, h)],
                "bytes_per_microbatch": 2 * (elements(sd, b, h, dt) + elements(se, b, h, dt))}
    lab05.check_enc_dec(enc_dec, [(512, 128, 1, 768, torch.bfloat16)], own=elements)
    with pytest.raises(LabCheckFailed) as failed:
        lab05.check_enc_dec(enc_dec, [(512, 128, 1, 768, torch.bfloat16)])
    assert failed.value.lost == pytest.approx(1 / 3)  # the shapes are right: one part of three
    lab05.check_varlen(lambda lens, b, h, dt, pp: 2 * (pp - 1) * sum(elements(s, b, h, dt) for s in lens),
                       [([512, 384, 100, 512], 1, 768, torch.bfloat16, 4)], own=elements)
    spec = lab05.PRESETS["bank-pp8"][0]
    lab05.check_bank_send(spec.seq_len * spec.hidden, own=elements)
    lab05.check_bank_link(32 * 1000, send=1000)
    lab05.check_real_send(32 * 2 * 32, lab05.RUN, own=elements)


def test_partial_credit_names_every_failing_part():
    with pytest.raises(LabCheckFailed, match="misses 'activation_grad'.*contains 'labels'") as failed:
        lab05.check_crossing({"activation", "labels"})
    others = len(lab05.TENSORS) - 2  # a right one missed costs 1/2, a wrong one picked 1/(the wrong ones)
    assert failed.value.lost == pytest.approx(1 / 2 + 1 / others)
    with pytest.raises(LabCheckFailed, match="contains 'labels'") as failed:
        lab05.check_crossing({"activation", "activation_grad", "labels"})
    assert failed.value.lost == pytest.approx(1 / others)
    with pytest.raises(LabCheckFailed, match="misses 'tag'.*misses 'dtype'.*contains 'loss'") as failed:
        lab05.check_log_fields(set(lab05.LOG_FIELDS) - {"tag", "dtype"} | {"loss"})
    assert failed.value.lost == pytest.approx(2 / len(lab05.LOG_FIELDS) + 1 / len(lab05.LOG_NOISE))
    with pytest.raises(LabCheckFailed, match="only makes the same hang last longer") as failed:
        lab05.check_fixes({"agree_before_schedule", "send_placeholder", "longer_timeout"})
    assert failed.value.lost == pytest.approx(1 / (len(lab05.FIXES) - 2))


def test_choice_questions_give_nothing_for_an_empty_answer_or_every_option():
    """Nothing picked is not "nothing wrong picked": an empty answer, or all of the menu, earns no share."""
    for check, menu in ((lab05.check_crossing, set(lab05.TENSORS)), (lab05.check_fixes, set(lab05.FIXES)),
                        (lab05.check_log_fields, set(lab05.LOG_FIELDS) | set(lab05.LOG_NOISE))):
        for answer in (set(), menu):
            with pytest.raises(LabCheckFailed) as failed:
                check(answer)
            assert failed.value.lost == 1.0, (check.__name__, answer)


def test_m046_follow_wrong_answers():
    spec = lab05.PRESETS["bank-pp8"][0]
    with pytest.raises(LabCheckFailed, match="that is fp32"):
        lab05.check_bank_send(spec.seq_len * spec.hidden * 4)
    with pytest.raises(LabCheckFailed, match="only the activations"):
        lab05.check_bank_link(16 * spec.seq_len * spec.hidden * 2)
    def per_link(pp, m, spec, chunks=1):
        return 2 * m * spec.seq_len * spec.micro_batch_size * spec.hidden * 2
    with pytest.raises(LabCheckFailed, match="what one boundary link carries"):
        lab05.check_step_bytes(per_link, [(8, 16, "bank-pp8", 1)])
    def no_chunks(pp, m, spec, chunks=1):
        return 2 * m * (pp - 1) * spec.seq_len * spec.micro_batch_size * spec.hidden * 2
    with pytest.raises(LabCheckFailed, match="every virtual-stage boundary crosses ranks, the wrap-arounds"):
        lab05.check_step_bytes(no_chunks, [(4, 8, "bank-pp8", 2)])
    def tp_always(spec, tp, sp, cp):
        return spec.seq_len // cp // tp * spec.micro_batch_size * spec.hidden * 2
    with pytest.raises(LabCheckFailed, match="without sequence parallelism"):
        lab05.check_per_gpu(tp_always, [(8, False, 1)])

    def one_copy(pp, m, spec, send_shapes, via_host):
        logical = 2 * m * (pp - 1) * spec.seq_len * spec.micro_batch_size * spec.hidden * 2
        return {"logical_bytes": logical, "messages": 2 * m * (pp - 1) * (2 if send_shapes else 1),
                "host_copy_bytes": logical if via_host else 0}
    with pytest.raises(LabCheckFailed, match="two copies per transfer"):
        lab05.check_accounting(one_copy, [(8, 16, True, True)])


def test_m053_menus_and_stranded():
    with pytest.raises(LabCheckFailed, match="only makes the same hang last longer"):
        lab05.check_fixes({"agree_before_schedule", "longer_timeout"})
    with pytest.raises(LabCheckFailed, match="misses keeping the protocol"):
        lab05.check_fixes({"agree_before_schedule"})
    with pytest.raises(LabCheckFailed, match="misses 'tag'"):
        lab05.check_log_fields(set(lab05.LOG_FIELDS) - {"tag"})
    with pytest.raises(LabCheckFailed, match="'loss'"):
        lab05.check_log_fields(set(lab05.LOG_FIELDS) | {"loss"})
    def with_crashed(pp, m, r, k):
        return {**lab05.model_waits(pp, m, crash=(r, k)), r: ("forward", k, r - 1)}
    with pytest.raises(LabCheckFailed, match="crashed: it waits for nothing"):
        lab05.check_stranded(with_crashed, [(4, 8, 2, 1)])


def test_model_matches_the_real_counts_of_the_book_example():
    # the counts the real run prints for skip-send:rank=1,mb=3 (see the solution notebook's stored output)
    import nbformat
    from lab_grading import SOLUTIONS
    nb = nbformat.read(str(SOLUTIONS / f"{LAB}.ipynb"), as_version=4)
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    real = {int(r): (int(a), int(b))
            for r, a, b in re.findall(r"\[rank (\d+)\] P2P TIMEOUT:.*?(\d+) received, (\d+) sent", out)}
    assert real == lab05.model_counts(4, 8, (1, 3))
    assert isinstance(run_blocking, type(lab05.run_blocking))


def test_run_help_shows_the_defaults_the_labs_send_students_to():
    """Labs 5 and 6 say the run's defaults are in `python -m pipeline_kit.run --help`: they are."""
    from pipeline_kit.run import build_parser
    text = " ".join(build_parser().format_help().split("options:", 1)[1].split())
    for option, default in (("--seq-len SEQ_LEN", 32), ("--micro-batch-size MICRO_BATCH_SIZE", 2),
                            ("--hidden HIDDEN", 64), ("--vocab VOCAB", 256), ("--layers LAYERS", 8),
                            ("--p2p-timeout S", 60.0)):
        after = text.split(option, 1)[1]
        assert f"(default: {default})" in after.split(" --", 1)[0], (option, after[:160])
