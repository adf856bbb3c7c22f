"""The ``python -m pipeline_kit`` command line.

Sub-commands register themselves in :data:`COMMANDS` so later layers (drawing, grading, layouts)
add theirs without touching the others.  Every bad argument ends in one line on stderr naming
the argument and what is allowed, with exit status 2 -- never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from .argtypes import (
    EXIT_INVALID,
    EXIT_USAGE,
    OneLineParser,
    UsageError,
    float_list,
    int_at_most,
    non_negative_float,
    one_line,
    positive_float,
)
from .inputs import InputError, check_output_path, read_text, same_file, strict_json
from .interrupts import (
    OutputStreamError,
    atomic_output,
    interrupts_end_in_one_line,
    standard_output_guarded,
    write_file_atomically,
)
from .grading import commands as grade_commands
from .layout import commands as layout_commands
from .plan import commands as plan_commands
from .limits import MAX_DRAW_OPS, MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE, LimitError, check_at_most
from .schedules import (
    CHUNKED,
    FAMILIES,
    SCHEDULES,
    Schedule,
    ScheduleConfigError,
    ScheduleError,
    ScheduleTextError,
    build_schedule,
    describe,
    validate,
)
from .sim import CostError, Costs, simulate
from .sim.costs import scale_costs


# -- schedule options shared by `schedule` and `simulate` ---------------------------------------
RANKS = int_at_most("MAX_RANKS", "ranks")
MICROBATCHES = int_at_most("MAX_MICROBATCHES", "microbatches")


def add_schedule_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--schedule", choices=list(SCHEDULES), default="1f1b", help="schedule family (default 1f1b)")
    p.add_argument("--pp", type=RANKS, required=required, help="pipeline-parallel size (ranks)")
    p.add_argument("--microbatches", "-m", type=MICROBATCHES, required=required, help="microbatches per step")
    p.add_argument("--chunks", "-v", type=int_at_most("MAX_CHUNKS", "chunks per rank"), default=None,
                   help=f"model chunks per rank (virtual pipeline size) for {', '.join(CHUNKED)}; default 2 "
                        f"(zbv and dualpipev: exactly 2, in a V)")
    p.add_argument("--group", type=MICROBATCHES, default=None,
                   help="interleaved only: microbatches per virtual-stage group (Megatron's "
                        "microbatch_group_size_per_vp_stage), default pp")
    p.add_argument("--forward-only", action="store_true", help="inference: forwards only")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def schedule_from_args(args: argparse.Namespace) -> Schedule:
    try:
        return build_schedule(args.schedule, args.pp, args.microbatches, args.chunks, args.forward_only, args.group)
    except ScheduleConfigError as exc:
        raise UsageError(str(exc)) from None


def cmd_schedule(args: argparse.Namespace) -> int:
    sched = schedule_from_args(args)
    if args.json:
        print(sched.to_json())
    else:
        print(f"# {sched.name}: {describe(sched)} ({sched.num_ops} ops; column k is each rank's k-th op, "
              f"not a time slot)")
        print(sched.to_grid(), end="")
    return 0


def costs_from_args(args: argparse.Namespace, sched: Schedule) -> Costs:
    try:
        fwd, bwd, wgrad = scale_costs(args.fwd, args.bwd, args.wgrad, args.stage_costs, args.stage_bwd_costs,
                                      sched.pp, sched.chunks)
    except CostError as exc:
        raise UsageError(str(exc)) from None
    return Costs(fwd=fwd, bwd=bwd, wgrad=wgrad, p2p_latency=args.p2p_latency, p2p_bytes=args.p2p_bytes,
                 bandwidth=args.bandwidth, activation_bytes=args.activation_bytes)


def cmd_simulate(args: argparse.Namespace) -> int:
    sched = schedule_from_args(args)
    try:
        result = simulate(sched, costs_from_args(args, sched))
    except CostError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(strict_json(result.to_dict(timeline=not args.no_timeline)))
        return 0
    print(f"{sched.name}: {describe(sched)}  "
          f"(fwd={args.fwd:g} bwd={args.bwd:g}"
          + (f" wgrad={args.wgrad:g}" if args.wgrad is not None else "")
          + (f" stage-costs={','.join(f'{x:g}' for x in args.stage_costs)}" if args.stage_costs else "")
          + (f" stage-bwd-costs={','.join(f'{x:g}' for x in args.stage_bwd_costs)}" if args.stage_bwd_costs else "")
          + f" p2p-latency={args.p2p_latency:g})")
    v = sched.chunks
    print(f"{'rank':>4}  {'busy':>10}  {'idle':>10}  {'idle %':>7}  {'peak act (rank shares)':>22}")
    for r in range(sched.pp):
        idle = result.idle[r]
        pct = 100 * idle / result.makespan if result.makespan else 0.0
        peak = result.peak_activations[r]
        shown = f"{peak / v:g}" + (f" ({peak} chunk acts)" if v > 1 else "")
        print(f"{r:>4}  {result.busy[r]:>10.4g}  {idle:>10.4g}  {pct:>6.1f}%  {shown:>22}")
    print(f"makespan          {result.makespan:.6g}")
    print(f"ideal time        {result.ideal_time:.6g}   (busiest rank, no bubble)")
    print(f"bubble fraction   {result.bubble_fraction:.4f}   (idle / (pp x makespan))")
    print(f"bubble / ideal    {result.bubble_over_ideal:.4f}   (Megatron paper's ratio)")
    print(PEAK_UNIT)
    return 0


# The one wording of the peak-activation unit (simulate, demo): a chunk's activations are 1/v of a rank's share, so
# schedules with different chunk counts compare in the same unit.
PEAK_UNIT = ("(peak act: the most microbatch activations a rank holds at once, in microbatches' worth of one rank's "
             "share of the model; with v chunks per rank, one chunk's activations count 1/v)")


def add_simulate_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    add_schedule_args(p, required)
    p.add_argument("--fwd", type=non_negative_float, default=1.0,
                   help="forward time of one microbatch through one rank's whole share (default 1.0)")
    p.add_argument("--bwd", type=non_negative_float, default=2.0,
                   help="full backward time, same convention (default 2.0)")
    p.add_argument("--wgrad", type=non_negative_float, default=None,
                   help="weight-grad part of bwd for split-backward schedules (zb-h1, interleaved-zb, zbv, "
                        "dualpipev); default bwd/2")
    p.add_argument("--stage-costs", type=float_list, default=None, metavar="a,b,...",
                   help="relative cost factor per rank (pp values) or per virtual stage (pp*chunks values)")
    p.add_argument("--stage-bwd-costs", type=float_list, default=None, metavar="a,b,...",
                   help="the backward's (and W's) own factors, same rule, for measured stages whose backward is "
                        "not one multiple of their forward (default: --stage-costs)")
    p.add_argument("--p2p-latency", type=non_negative_float, default=0.0, help="time of each P2P transfer (default 0)")
    p.add_argument("--p2p-bytes", type=non_negative_float, default=0.0,
                   help="bytes per boundary transfer (needs --bandwidth)")
    p.add_argument("--bandwidth", type=positive_float, default=None, help="P2P bandwidth in bytes per time unit")
    p.add_argument("--activation-bytes", type=non_negative_float, default=0.0,
                   help="activation bytes one microbatch keeps live on a rank's share until its backward")
    p.add_argument("--no-timeline", action="store_true", help="with --json: omit the per-op timeline")


def read_file_arg(path: str) -> str:
    """The UTF-8 text of the FILE argument, or a one-line usage error saying why it cannot be read."""
    try:
        return read_text(path, "argument FILE")
    except (InputError, LimitError) as exc:
        raise UsageError(str(exc)) from None


def cmd_validate(args: argparse.Namespace) -> int:
    text = read_file_arg(args.file)
    is_json = text.lstrip().startswith(("{", "["))
    try:
        sched = Schedule.from_json(text, where=args.file) if is_json else Schedule.from_text(text)
    except (ScheduleTextError, ValueError) as exc:  # JSON errors name the file already
        raise UsageError(str(exc) if is_json else f"{args.file}: {exc}") from None
    try:
        validate(sched)
    except ScheduleError as exc:
        print(f"invalid: {exc}")
        return EXIT_INVALID
    print(f"valid: {sched.name} {describe(sched)}, {sched.num_ops} ops")
    return 0


def add_draw_args(p: argparse.ArgumentParser) -> None:
    add_simulate_args(p, required=False)
    p.add_argument("--trace", metavar="FILE", help="draw a pipeline_kit.run --trace file instead of a simulation")
    p.add_argument("-o", "--output", metavar="FILE", help="image to write: .png or .svg (or .pdf)")
    p.add_argument("--perfetto", metavar="FILE", help="also write Chrome trace / Perfetto JSON")
    p.add_argument("--arrows", action="store_true", help="draw P2P transfers as arrows (simulations)")
    p.add_argument("--phases", action="store_true", help="mark warmup / steady / cooldown per rank")
    p.add_argument("--first-backward", action="store_true", help="mark where the first backward starts (M043)")
    p.add_argument("--memory", action="store_true", help="draw live activations per rank instead of the timeline")
    p.add_argument("--compare", action="store_true",
                   help="with --trace: the simulation from the run's measured service times above the run itself")
    p.add_argument("--dpi", type=int_at_most("MAX_DPI", "dots per inch"), default=120)


def cmd_draw(args: argparse.Namespace) -> int:
    if not args.output and not args.perfetto:
        raise UsageError("nothing to write: give -o FILE (.png/.svg/.pdf) and/or --perfetto FILE")
    if args.output and not args.output.lower().endswith((".png", ".svg", ".pdf")):
        raise UsageError(f"argument -o: {args.output!r} must end in .png, .svg or .pdf")
    if not args.trace and (args.pp is None or args.microbatches is None):
        raise UsageError("give --pp and --microbatches (a schedule to simulate) or --trace FILE")
    if args.compare and not (args.trace and args.output):
        raise UsageError("--compare needs --trace FILE (a run to compare the simulation with) and -o FILE")
    for flag, path in (("-o", args.output), ("--perfetto", args.perfetto)):
        if path:
            check_output_path(path, f"argument {flag}", inputs=[args.trace] if args.trace else [])
    if args.output and args.perfetto and same_file(args.output, args.perfetto):
        raise UsageError("arguments -o and --perfetto name the same file; give each its own")
    if args.trace:  # read and check the trace before the seconds matplotlib takes to import
        from .layout.measure import TraceError, load_trace
        try:
            trace = load_trace(args.trace)
        except TraceError as exc:
            raise UsageError(str(exc)) from None
        check_at_most(f"--trace {args.trace}: {len(trace['timeline']):,} ops", len(trace["timeline"]),
                      "MAX_DRAW_OPS", "ops in a drawing")
        if args.compare:  # the simulation it draws too is the schedule the trace claims, maybe far larger
            from .layout.measure import check_rebuild_size
            check_rebuild_size(trace, "MAX_DRAW_OPS")
    try:
        from .viz import Timeline, draw_memory, draw_timeline, to_chrome_trace
    except ImportError as exc:
        raise UsageError(f"drawing needs matplotlib ({exc}); install the kit with pip install -r requirements.txt") \
            from None
    if args.trace:
        tl = Timeline.from_trace(trace)
    else:
        sched = schedule_from_args(args)
        if sched.num_ops > MAX_DRAW_OPS:
            raise UsageError(f"the schedule has {sched.num_ops:,} ops, more than the limit of {MAX_DRAW_OPS:,} ops in "
                             f"a drawing (MAX_DRAW_OPS); simulate it instead, or draw fewer microbatches")
        try:
            tl = Timeline.from_sim(simulate(sched, costs_from_args(args, sched)))
        except CostError as exc:
            raise UsageError(str(exc)) from None
    if args.output:
        if args.compare:
            from .layout.measure import simulate_from_trace
            from .viz import draw_comparison
            try:
                simulated = simulate_from_trace(trace, scale=1e3)  # (its size was checked above)
            except TraceError as exc:
                raise UsageError(f"--trace {args.trace}: {exc}") from None
            sim = Timeline.from_sim(simulated, unit="ms", title="simulated from the run's measured service times")
            fig = draw_comparison(sim, tl)
        elif args.memory:
            fig = draw_memory({tl.title: tl})
        else:
            fig = draw_timeline(tl, arrows=args.arrows, phases=args.phases, first_backward=args.first_backward).figure
        check_image_size(fig, args.dpi)
        try:
            with atomic_output(args.output) as tmp:
                fig.savefig(tmp, dpi=args.dpi)
        except OSError as exc:
            raise UsageError(f"argument -o: cannot write {args.output!r}: {exc.strerror}") from None
        print(f"wrote {args.output} ({len(tl.ops)} ops, {tl.pp} ranks, makespan {tl.makespan:.4g} {tl.unit})")
    if args.perfetto:
        try:
            write_file_atomically(args.perfetto, strict_json(to_chrome_trace(tl)))
        except OSError as exc:
            raise UsageError(f"argument --perfetto: cannot write {args.perfetto!r}: {exc.strerror}") from None
        print(f"wrote {args.perfetto} (open it in ui.perfetto.dev or chrome://tracing)")
    return 0


def check_image_size(fig, dpi: int) -> None:
    """Refuse, before rendering, an image with a side over ``MAX_IMAGE_SIDE`` or over ``MAX_IMAGE_PIXELS`` pixels."""
    width, height = (round(x * dpi) for x in fig.get_size_inches())
    if max(width, height) > MAX_IMAGE_SIDE or width * height > MAX_IMAGE_PIXELS:
        raise UsageError(f"argument --dpi: the image would be {width:,} x {height:,} pixels; the limits are "
                         f"{MAX_IMAGE_SIDE:,} pixels a side (MAX_IMAGE_SIDE) and {MAX_IMAGE_PIXELS:,} in all "
                         f"(MAX_IMAGE_PIXELS): use a lower --dpi")


def add_check_timeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a drawn timeline: one 'rK: F0 F1 . B0 ...' row per rank")
    p.add_argument("--pp", type=RANKS, required=True)
    p.add_argument("--microbatches", "-m", type=MICROBATCHES, required=True)
    p.add_argument("--schedule", choices=["gpipe", "1f1b", "zb-h1"], default="1f1b",
                   help="the schedule whose order and shortest step the drawing is graded against (default 1f1b)")
    p.add_argument("--fwd-slots", type=SLOTS, default=1, help="slots a forward takes (default 1)")
    p.add_argument("--bwd-slots", type=SLOTS, default=1,
                   help="slots a backward takes (default 1; for zb-h1, each of I and W takes this many); write a "
                        "longer op once, then '-' per extra slot")
    p.add_argument("--json", action="store_true", help='print {"notebook", "score", "max_score", "checks": [...]}')


SLOTS = int_at_most("MAX_SLOTS", "slots")


def cmd_check_timeline(args: argparse.Namespace) -> int:
    from .grading import check_timeline
    text = read_file_arg(args.file)
    try:
        report = check_timeline(text, args.pp, args.microbatches, args.schedule, args.fwd_slots, args.bwd_slots,
                                name=args.file)
    except ScheduleConfigError as exc:
        raise UsageError(str(exc)) from None
    print(strict_json(report.to_dict()) if args.json else report.text())
    return 0


def add_make_labs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if labs/ is not what solutions/ makes")
    p.add_argument("--solutions", metavar="DIR", default=None, help="the solution notebooks (default: solutions/)")
    p.add_argument("--labs", metavar="DIR", default=None, help="where the student notebooks go (default: labs/)")
    p.add_argument("--lang", choices=["zh"], default=None,
                   help="the labs with their instructions, the checks' feedback and the verdicts in Chinese, into "
                        "labs-zh/ (from the catalogs in solutions/locale and pipeline_kit/locale; the cells, checks "
                        "and points are the English labs'); with --release, a release of those labs")
    p.add_argument("--update", action="store_true",
                   help="with --lang: refresh the catalogs (solutions/locale from the solutions, pipeline_kit/locale "
                        "from the checks' source) and print the counts")
    p.add_argument("--release", metavar="DIR", default=None,
                   help="instead, write a new (or empty) folder DIR to hand a student: labs/, the book's chapter "
                        "sources and the built book if there is one -- nothing of solutions/")


def cmd_make_labs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .grading.release import ROOT, ReleaseError, make_labs, make_release
    if args.update:
        if args.check or args.labs or args.release is not None:
            raise UsageError("argument --update: not with --check, --labs or --release (it writes the catalogs only)")
        return _update_lab_catalogs(args)
    if args.release is not None:
        if args.check or args.labs:
            raise UsageError("argument --release: not with --check or --labs (the release makes its own labs/)")
        try:
            print(make_release(Path(args.release), Path(args.solutions or ROOT / "solutions"), lang=args.lang))
        except ReleaseError as exc:
            raise UsageError(str(exc)) from None
        return 0
    try:
        default = ROOT / ("labs" if args.lang is None else f"labs-{args.lang}")
        problems = make_labs(Path(args.solutions or ROOT / "solutions"), Path(args.labs or default),
                             check=args.check, lang=args.lang)
    except (FileNotFoundError, ReleaseError, InputError) as exc:
        raise UsageError(str(exc)) from None
    feedback = _feedback_problems(args.lang) if args.lang else []
    problems = [*problems, *feedback] if args.check else problems
    for line in problems:
        print(line)
    if feedback and not args.check:
        print(f"warning: {len(feedback)} of the checks' feedback messages are not translated, so they show in "
              f"English (make-labs --lang {args.lang} --check lists them)", file=sys.stderr)
    if args.check and problems:
        lang = f" --lang {args.lang}" if args.lang else ""
        print(f"the labs are out of date: run `python -m pipeline_kit make-labs{lang}`", file=sys.stderr)
        return EXIT_INVALID
    if not problems:
        print(f"{'labs/' if args.lang is None else f'labs-{args.lang}/'} is up to date")
    return 0


def _update_lab_catalogs(args: argparse.Namespace) -> int:
    """``make-labs --lang L --update``: the catalogs of every solution, refreshed, with their counts."""
    from pathlib import Path

    from .grading.lab_catalogs import update
    from .grading.release import ROOT
    if args.lang is None:
        raise UsageError("argument --update: it refreshes a language's catalogs; add --lang zh")
    solutions = sorted(Path(args.solutions or ROOT / "solutions").glob("*.ipynb"))
    if not solutions:
        raise UsageError(f"argument --solutions: no notebooks in {args.solutions or ROOT / 'solutions'}")
    print(f"{'lab':<30} {'paragraphs':>10} {'untranslated':>12} {'fuzzy':>6}")
    for solution in solutions:
        n, missing, fuzzy = update(solution, args.lang)
        print(f"{solution.stem:<30} {n:>10} {missing:>12} {fuzzy:>6}")
    from .grading import feedback_catalogs
    from .grading.lab_catalogs import LANGS
    tally = feedback_catalogs.update(LANGS[args.lang])
    print(f"{'feedback (pipeline_kit/locale)':<30} {tally.messages:>10} {len(tally.untranslated):>12} "
          f"{len(tally.fuzzy):>6}")
    return 0


def _feedback_problems(lang: str) -> list[str]:
    """The checks' feedback catalogs' problems in ``lang`` (untranslated, fuzzy, stale, a field lost), a line each."""
    from .grading import feedback_catalogs
    from .grading.lab_catalogs import LANGS
    return [f"feedback {line}" for line in feedback_catalogs.tally(LANGS[lang]).problems()]


def cmd_demo(args: argparse.Namespace) -> int:
    """A tour: PP4/M8 orders of 1F1B and ZB-V, then every family compared on the interview question bank's PP8/M16
    case."""
    for name in ("1f1b", "zbv"):
        sched = build_schedule(name, 4, 8)
        print(f"== {name}, {describe(sched)}: per-rank op order")
        print(sched.to_grid())
    print("== PP8 / M16, fwd=1, bwd=2 (split backward: I = W = 1), zero P2P latency")
    print(f"{'schedule':<18} {'placement':<9} {'makespan':>9} {'bubble':>8}  {'peak act (rank shares)':>22}  "
          f"PyTorch class")
    for name, chunks in DEMO_CASES:
        sched = build_schedule(name, 8, 16, chunks)
        res = simulate(sched, fwd=1, bwd=2)
        v = sched.chunks
        label = name + (f" v={v}" if FAMILIES[name].chunks == "any" else "")
        print(f"{label:<18} {sched.placement:<9} {res.makespan:>9.4g} {res.bubble_fraction:>8.4f} "
              f"{max(res.peak_activations) / v:>22.4g}  {FAMILIES[name].torch_class or '-'}")
    print("(bubble: idle / (pp x makespan); peak act: the worst rank's, 1F1B's is pp = 8)")
    print(PEAK_UNIT)
    return 0


DEMO_CASES = [("gpipe", None), ("1f1b", None), ("interleaved", 2), ("interleaved", 4), ("zb-h1", None),
              ("looped-bfs", 2), ("interleaved-zb", 2), ("zbv", None), ("dualpipev", None)]


Command = tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]

COMMANDS: list[Command] = [
    ("schedule", "print the per-rank op orders of a schedule", add_schedule_args, cmd_schedule),
    ("simulate", "simulate a schedule: makespan, bubble, per-rank idle and peak activations", add_simulate_args,
     cmd_simulate),
    ("validate", "check a schedule written in the text form (or JSON)",
     lambda p: p.add_argument("file", metavar="FILE", help="schedule file: 'r0: F0 F1 B0 ...' lines, or JSON"),
     cmd_validate),
    ("draw", "draw a simulated schedule or a real trace: PNG/SVG, Perfetto JSON", add_draw_args, cmd_draw),
    ("check-timeline", "grade a hand-drawn timeline grid: ops, dependencies, order, shortest step",
     add_check_timeline_args, cmd_check_timeline),
    ("grade", "grade lab notebooks (one, a class folder, an nbgrader course): run each offline against its "
     "canonical tests in a sandbox and print the rubric, or write a gradebook",
     grade_commands.add_grade_args, grade_commands.cmd_grade),
    ("gradebook", "a class's gradebook: merge the slices, record it into nbgrader, a report page, an LMS export",
     grade_commands.add_gradebook_args, grade_commands.cmd_gradebook),
    ("make-labs", "write labs/ (student notebooks) from solutions/ with nbgrader's preprocessors",
     add_make_labs_args, cmd_make_labs),
    ("demo", "a short tour: 1F1B and ZB-V orders at PP4/M8, then every family compared at PP8/M16",
     lambda p: None, cmd_demo),
    ("layout", "per-stage table of a Megatron-style layout: params, FLOPs, activation and P2P bytes",
     layout_commands.add_layout_args, layout_commands.cmd_layout),
    ("balance", "the layout minimising the slowest stage, next to the even split", layout_commands.add_balance_args,
     layout_commands.cmd_balance),
    ("speedup", "decompose a pipeline's speedup: bubble, imbalance, P2P, remainder", layout_commands.add_speedup_args,
     layout_commands.cmd_speedup),
    ("plan", "pick schedule, pp, v, M and layout for a model on N GPUs under a memory budget, and say why",
     plan_commands.add_plan_args, lambda args: plan_commands.cmd_plan(args, _save_plan_plot)),
]


def _save_plan_plot(search, path: str) -> None:
    from .viz.plan import save_plan_plot  # matplotlib only when a plot is asked for
    save_plan_plot(search, path)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m pipeline_kit",
                           description="pipeline-kit: pipeline-parallel schedules you can validate, simulate and run.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, help_text, add_args, func in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        p.set_defaults(func=func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every refusal is one line on stderr with exit status 2, Ctrl-C or SIGTERM one line
    "interrupted" (exit 130 / 143) after ``finally`` blocks have removed temporary files."""
    with interrupts_end_in_one_line("python -m pipeline_kit") as outcome:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        try:
            with standard_output_guarded():
                code = args.func(args)
                sys.stdout.flush()  # here, not at exit: a full disk is one line too
            return code
        except (UsageError, InputError, LimitError, OutputStreamError) as exc:
            print(f"python -m pipeline_kit {args.command}: error: {one_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
        except BrokenPipeError:  # e.g. `... | head`
            return 0
    return outcome.exit_code
