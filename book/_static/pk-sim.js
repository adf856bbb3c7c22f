/* pipeline-kit in the browser: the schedule generators, their refusals and the event simulator.
 *
 * A line-by-line port of pipeline_kit/schedules/generators.py and multi_stage.py (gpipe, one_f_one_b,
 * interleaved, zb_h1, looped_bfs, interleaved_zero_bubble, zbv, dualpipev), of families.py's
 * build_schedule and the ScheduleConfigError messages, of the cost resolution the CLI does
 * (pipeline_kit/cli.py costs_from_args + pipeline_kit/sim/costs.py) and of the simulator
 * (pipeline_kit/sim/simulator.py driven by the validator's dataflow walk).  It exists so the built
 * book can redraw a timeline without a Python kernel.  It is NOT a second source of truth:
 * tests/test_static_explorer.py runs this file in headless Chromium on hundreds of random
 * configurations and requires the same op orders, makespan, both bubbles, per-rank busy time and
 * peak activations, every op's start and end, and the same refusal texts as pipeline_kit.
 * Arithmetic is done in the same order as the Python code, so the numbers agree to the last bit.
 *
 * No DOM here (pk-explorer.js draws); no modules, no fetch: it must work from file://.
 *
 * HOW TO ADD A SCHEDULE FAMILY (the cross-check test fails until every family in
 * pipeline_kit.schedules.SCHEDULES is in FAMILIES below, in the same order):
 *   1. Write one function `function myFamily(pp, microbatches, chunks, group)` that returns
 *      `schedule(name, pp, microbatches, chunks, ranks)` with ranks[r] = rank r's ops in order,
 *      each made by `op(kind, microbatch, chunk)` -- a transcription of the Python generator,
 *      loop for loop, with the same refusals thrown as `refuse(message)` (copy the f-strings).
 *   2. Register it in FAMILIES under its CLI name with `takesChunks` (does build_schedule pass
 *      --chunks to it?), `defaultChunks` (what it uses when none is given) and the label the
 *      page's menu shows.  Mirror any change to build_schedule's own checks in buildSchedule.
 *   3. A family placed as a V (ZB-V, DualPipe-V: rank r holds stages r and 2pp-1-r) passes "v"
 *      as schedule()'s last argument, as the kit's Schedule(..., placement="v") does; the
 *      simulator and the per-rank costs then follow virtualStage/stageOwner (ports of
 *      ops.virtual_stage/stage_owner).  A new placement in the kit goes into those two.
 *   4. Run `pytest tests/test_static_explorer.py`: it compares your port with the kit.
 */
(function (root) {
  "use strict";

  function ScheduleConfigError(message) {
    this.name = "ScheduleConfigError";
    this.message = message;
  }
  ScheduleConfigError.prototype = Object.create(Error.prototype);
  ScheduleConfigError.prototype.constructor = ScheduleConfigError;

  function CostError(message) {
    this.name = "CostError";
    this.message = message;
  }
  CostError.prototype = Object.create(Error.prototype);
  CostError.prototype.constructor = CostError;

  function refuse(message) { throw new ScheduleConfigError(message); }

  /* Python's repr of a number: ints as "3", floats as "3.0" / "0.25" / "1e-07". */
  function pyRepr(x, isFloat) {
    if (typeof x !== "number") return "'" + String(x) + "'";
    if (x !== x) return "nan";
    if (x === Infinity) return "inf";
    if (x === -Infinity) return "-inf";
    if (!isFloat && Number.isInteger(x)) return String(x);
    if (Number.isInteger(x) && Math.abs(x) < 1e16) return x.toFixed(1);
    return String(x).replace(/e([+-])(\d)$/, "e$10$2");
  }

  function op(kind, microbatch, chunk) { return { kind: kind, mb: microbatch, chunk: chunk || 0 }; }

  function opText(o, chunks) { return o.kind + o.mb + (chunks > 1 ? "c" + o.chunk : ""); }

  function schedule(name, pp, microbatches, chunks, ranks, placement) {
    return { name: name, pp: pp, microbatches: microbatches, chunks: chunks, ranks: ranks, placement: placement || "looped" };
  }

  /* ops.virtual_stage / ops.stage_owner: "looped" (Megatron: chunk c of rank r is stage c pp + r) or
   * "v" (ZB-V, DualPipe-V: chunk 0 of rank r is stage r, chunk 1 is stage 2 pp - 1 - r). */
  function virtualStage(rank, chunk, pp, placement) {
    if (placement === "v") return chunk === 0 ? rank : 2 * pp - 1 - rank;
    return chunk * pp + rank;
  }

  function stageOwner(stage, pp, placement) {
    if (placement === "v") return stage < pp ? [stage, 0] : [2 * pp - 1 - stage, 1];
    return [stage % pp, Math.floor(stage / pp)];
  }

  /* A schedule from the kit's JSON form (Schedule.to_dict), e.g. for tests of hand-made schedules. */
  function fromDict(d) {
    var ranks = d.ranks.map(function (ops) {
      return ops.map(function (t) {
        var m = /^([FBIW])(\d+)(?:c(\d+))?$/.exec(t);
        return op(m[1], Number(m[2]), m[3] === undefined ? 0 : Number(m[3]));
      });
    });
    return schedule(d.schedule, d.pp, d.microbatches, d.chunks || 1, ranks, d.placement);
  }

  function range(n, f) { var out = []; for (var i = 0; i < n; i++) out.push(f(i)); return out; }

  function isInt(v) { return typeof v === "number" && Number.isInteger(v); }

  function checkSizes(pp, microbatches, chunks) {
    var named = [["pp", pp], ["microbatches", microbatches], ["chunks", chunks === undefined ? 1 : chunks]];
    for (var i = 0; i < named.length; i++) {
      var v = named[i][1];
      if (!isInt(v) || v < 1) refuse(named[i][0] + " must be a positive integer, got " + pyRepr(v, !isInt(v)));
    }
  }

  // -- the families: one function each, a transcription of generators.py --------------------

  function gpipe(pp, microbatches) {
    checkSizes(pp, microbatches);
    var ranks = range(pp, function () {
      return range(microbatches, function (m) { return op("F", m); })
        .concat(range(microbatches, function (m) { return op("B", m); }));
    });
    return schedule("gpipe", pp, microbatches, 1, ranks);
  }

  function oneFOneB(pp, microbatches) {
    checkSizes(pp, microbatches);
    var ranks = [];
    for (var r = 0; r < pp; r++) {
      var warmup = Math.min(pp - r - 1, microbatches);
      var ops = range(warmup, function (m) { return op("F", m); });
      for (var i = 0; i < microbatches - warmup; i++) {  // steady state: 1F then 1B
        ops.push(op("F", warmup + i));
        ops.push(op("B", i));
      }
      for (var m = microbatches - warmup; m < microbatches; m++) ops.push(op("B", m));  // cooldown
      ranks.push(ops);
    }
    return schedule("1f1b", pp, microbatches, 1, ranks);
  }

  function interleavedTable(microbatches, chunks, group) {
    var table = [];
    for (var start = 0; start < microbatches; start += group) {
      var end = Math.min(microbatches, start + group);
      for (var c = 0; c < chunks; c++) for (var m = start; m < end; m++) table.push([m, c]);
    }
    return table;
  }

  function interleavedWarmup(pp, rank, microbatches, chunks, group) {
    return Math.min((pp - rank - 1) * 2 + (chunks - 1) * group, microbatches * chunks);
  }

  function interleaved(pp, microbatches, chunks, group) {
    if (chunks === undefined || chunks === null) chunks = 2;
    checkSizes(pp, microbatches, chunks);
    if (group === undefined || group === null) group = pp;
    if (pp < 2) {
      refuse("interleaved needs pp >= 2, got pp=" + pp + ": with one rank there is nothing to interleave " +
             "(Megatron requires pipeline-model-parallel size > 1 for a virtual pipeline)");
    }
    if (chunks < 2) refuse("interleaved needs chunks (virtual stages per rank) >= 2, got " + chunks + "; use 1f1b for one chunk");
    if (!isInt(group) || !(pp <= group && group <= microbatches)) {
      refuse("interleaved needs the microbatch group size in [pp=" + pp + ", microbatches=" + microbatches + "], " +
             "got " + group + (microbatches < pp ? " (microbatches must be at least pp)" : ""));
    }
    var remainder = microbatches % group;
    if (0 < remainder && remainder < pp) {
      refuse("interleaved refuses microbatches=" + microbatches + " with group size " + group + ": the last group " +
             "would hold " + remainder + " < pp=" + pp + " microbatches, which stalls the pipeline (Megatron raises " +
             "the same error); use a multiple of " + group +
             (microbatches - remainder >= group ? " such as " + (microbatches - remainder) : "") +
             " or " + (microbatches - remainder + group));
    }
    var table = interleavedTable(microbatches, chunks, group);
    var fwd = table.map(function (t) { return op("F", t[0], t[1]); });
    var bwd = table.map(function (t) { return op("B", t[0], chunks - 1 - t[1]); });
    var ranks = [];
    for (var r = 0; r < pp; r++) ranks.push(oneFOneBPhases(fwd, bwd, interleavedWarmup(pp, r, microbatches, chunks, group)));
    return schedule("interleaved", pp, microbatches, chunks, ranks);
  }

  /* generators.one_f_one_b_phases: warmup forwards, steady (forward k + warmup, backward k), cooldown;
   * with wgradDelay d the backwards are I's and the W of backward k - d follows I k, the last d at the end. */
  function oneFOneBPhases(fwd, bwd, warmup, wgradDelay) {
    var total = bwd.length, ops = fwd.slice(0, warmup), split = wgradDelay !== undefined && wgradDelay !== null;
    for (var k = 0; k < total; k++) {
      if (k + warmup < total) ops.push(fwd[k + warmup]);
      ops.push(bwd[k]);
      if (split && k >= wgradDelay) ops.push(op("W", bwd[k - wgradDelay].mb, bwd[k - wgradDelay].chunk));
    }
    if (split) for (var j = Math.max(0, total - wgradDelay); j < total; j++) ops.push(op("W", bwd[j].mb, bwd[j].chunk));
    return ops;
  }

  function zbH1(pp, microbatches) {
    checkSizes(pp, microbatches);
    var ranks = [];
    for (var r = 0; r < pp; r++) {
      var ops = [];
      for (var x = 0; x < microbatches + pp - 1; x++) {  // the steady triple (F x, I x-(pp-1-r), W x-(pp-1))
        var iMb = x - (pp - 1 - r), wMb = x - (pp - 1);
        if (x < microbatches) ops.push(op("F", x));
        if (0 <= iMb && iMb < microbatches) ops.push(op("I", iMb));
        if (0 <= wMb && wMb < microbatches) ops.push(op("W", wMb));
      }
      ranks.push(ops);
    }
    return schedule("zb-h1", pp, microbatches, 1, ranks);
  }

  // -- multi_stage.py: the schedules PyTorch ships beyond interleaved 1F1B ---------------------------

  function loopedBfs(pp, microbatches, chunks) {
    if (chunks === undefined || chunks === null) chunks = 2;
    checkSizes(pp, microbatches, chunks);
    var ops = [], c, m;
    for (c = 0; c < chunks; c++) for (m = 0; m < microbatches; m++) ops.push(op("F", m, c));
    for (c = chunks - 1; c >= 0; c--) for (m = microbatches - 1; m >= 0; m--) ops.push(op("B", m, c));
    return schedule("looped-bfs", pp, microbatches, chunks, range(pp, function () { return ops.slice(); }));
  }

  function torchRoundSize(pp, microbatches, family, torchWords) {
    var rounds = Math.max(1, Math.floor(microbatches / pp));
    if (microbatches % rounds) {
      refuse(family + " refuses microbatches=" + microbatches + " with pp=" + pp + ': "' + torchWords + " requires " +
             "the number of microbatches to be a multiple of the number of rounds (" + rounds + "), but got " +
             microbatches + '." (PyTorch splits M into max(1, M // pp) = ' + rounds + " equal rounds)");
    }
    return microbatches / rounds;
  }

  function interleavedZeroBubble(pp, microbatches, chunks) {
    if (chunks === undefined || chunks === null) chunks = 2;
    checkSizes(pp, microbatches, chunks);
    var perRound = torchRoundSize(pp, microbatches, "interleaved-zb", "Zero bubble");
    var table = interleavedTable(microbatches, chunks, perRound);
    var fwd = table.map(function (t) { return op("F", t[0], t[1]); });
    var bwd = table.map(function (t) { return op("I", t[0], chunks - 1 - t[1]); });
    var ranks = [];
    for (var r = 0; r < pp; r++) {
      var warmup = Math.min((chunks - 1) * perRound + pp - 1 - r, microbatches * chunks);
      ranks.push(oneFOneBPhases(fwd, bwd, warmup, r));
    }
    return schedule("interleaved-zb", pp, microbatches, chunks, ranks);
  }

  function refuseChunks(family, chunks) {
    if (chunks !== 2) {
      refuse(family + " needs --chunks 2, got " + chunks + ': "ZBV requires exactly 2 stages per rank, but got ' +
             chunks + '." (PyTorch\'s V schedules put stages r and 2pp-1-r on rank r)');
    }
  }

  function zbvRank(pp, r, planned) {
    var ops = [], f = [0, 0], b = [0, 0], i;
    function forward(c) { ops.push(op("F", f[c], c)); f[c] += 1; }
    function backward(c, withWgrad) {
      ops.push(op("I", b[c], c));
      if (withWgrad) ops.push(op("W", b[c], c));
      b[c] += 1;
    }
    for (i = 0; i < 2 * (pp - r) - 1; i++) forward(0);  // warmup: chunk-0 forwards ...
    for (i = 0; i < r; i++) { forward(1); forward(0); }  // ... chunk 1 starts while chunk 0 goes on ...
    for (i = 0; i < pp - r; i++) { forward(1); backward(1, true); }  // ... and chunk 1's first backwards
    while (f[1] < f[0] || f[0] < planned) {  // steady: (F) I W on chunk 0, then F I W on chunk 1
      if (f[0] < planned) forward(0);
      backward(0, true);
      forward(1);
      backward(1, true);
    }
    var w = b.slice(), m;
    for (i = 0; i < r; i++) { backward(0, false); backward(1, false); }  // cooldown: input-grads first
    for (i = 0; i < pp - r; i++) { backward(0, false); ops.push(op("W", w[0], 0)); w[0] += 1; }
    for (m = w[1]; m < b[1]; m++) ops.push(op("W", m, 1));
    for (m = w[0]; m < b[0]; m++) ops.push(op("W", m, 0));
    return ops;
  }

  function zbv(pp, microbatches, chunks) {
    if (chunks === undefined || chunks === null) chunks = 2;
    checkSizes(pp, microbatches, chunks);
    refuseChunks("zbv", chunks);
    var planned = Math.max(2 * pp - 1, microbatches);
    var ranks = range(pp, function (r) {
      return zbvRank(pp, r, planned).filter(function (o) { return o.mb < microbatches; });
    });
    return schedule("zbv", pp, microbatches, 2, ranks, "v");
  }

  function dualpipevRank(pp, r, microbatches) {
    var ops = [], f = [0, 0], b = [0, 0], wgrads = [], i;
    function forward(c) { ops.push(op("F", f[c], c)); f[c] += 1; }
    function backward(c, split) {
      ops.push(op(split ? "I" : "B", b[c], c));
      if (split) wgrads.push(op("W", b[c], c));
      b[c] += 1;
    }
    function pendingWgrad() { if (wgrads.length) ops.push(wgrads.shift()); }
    for (i = 0; i < 2 * (pp - r - 1); i++) forward(0);  // 1: chunk-0 forwards
    for (i = 0; i < r + 1; i++) { forward(0); forward(1); }  // 2: F0 F1
    for (i = 0; i < pp - r - 1; i++) { backward(1, true); pendingWgrad(); forward(1); }  // 3: I1 W F1
    for (i = 0; i < microbatches - 2 * pp + r + 1; i++) {  // 4: the overlapped pairs F0+B1, F1+B0
      forward(0); backward(1); forward(1); backward(0);
    }
    for (i = 0; i < pp - r - 1; i++) { backward(1); forward(1); backward(0); }  // 5: B1, F1+B0
    var split = false;
    for (i = 0; i < r + 1; i++) {  // 6: B1 B0, from the middle on split into I (W later)
      if (i === Math.floor((r + 1) / 2) && r % 2 === 1) split = true;
      backward(1, split);
      if (i === Math.floor((r + 1) / 2) && r % 2 === 0) split = true;
      backward(0, split);
    }
    for (i = 0; i < pp - r - 1; i++) { pendingWgrad(); backward(0, split); }  // 7: W, B0
    for (i = 0; i < r + 1; i++) pendingWgrad();  // 8: the remaining weight-grads
    return ops;
  }

  function dualpipev(pp, microbatches, chunks) {
    if (chunks === undefined || chunks === null) chunks = 2;
    checkSizes(pp, microbatches, chunks);
    refuseChunks("dualpipev", chunks);
    if (microbatches < 2 * pp) {
      refuse("dualpipev needs microbatches >= 2*pp = " + 2 * pp + ", got " + microbatches + ': "DualPipeV requires at ' +
             "least as many microbatches as stages, but got " + microbatches + " microbatches and " + 2 * pp +
             ' stages."');
    }
    return schedule("dualpipev", pp, microbatches, 2, range(pp, function (r) { return dualpipevRank(pp, r, microbatches); }),
                    "v");
  }

  /* The registry, in the order of pipeline_kit.schedules.SCHEDULES (its error messages list them). */
  var FAMILIES = {
    "gpipe": { build: gpipe, takesChunks: false, defaultChunks: 1, label: "GPipe (all F, all B)" },
    "1f1b": { build: oneFOneB, takesChunks: false, defaultChunks: 1, label: "1F1B (Megatron)" },
    "interleaved": { build: interleaved, takesChunks: true, defaultChunks: 2, label: "interleaved 1F1B (virtual stages)" },
    "zb-h1": { build: zbH1, takesChunks: false, defaultChunks: 1, label: "ZB-H1 (zero bubble, split backward)" },
    "looped-bfs": { build: loopedBfs, takesChunks: true, defaultChunks: 2, label: "looped BFS (PyTorch, breadth first)" },
    "interleaved-zb": { build: interleavedZeroBubble, takesChunks: true, defaultChunks: 2,
                        label: "interleaved zero bubble (PyTorch ZB1P)" },
    "zbv": { build: zbv, takesChunks: true, defaultChunks: 2, label: "ZB-V (V placement, split backward; v = 2)" },
    "dualpipev": { build: dualpipev, takesChunks: true, defaultChunks: 2, label: "DualPipe-V (V placement; v = 2)" },
  };
  var CHUNKED = Object.keys(FAMILIES).filter(function (name) { return FAMILIES[name].takesChunks; });

  /* build_schedule: the command-line name, its arguments, and its refusals. */
  function buildSchedule(name, pp, microbatches, chunks, group) {
    if (!Object.prototype.hasOwnProperty.call(FAMILIES, name)) {
      refuse("unknown schedule '" + name + "'; choose one of " + Object.keys(FAMILIES).join(", "));
    }
    var fam = FAMILIES[name];
    if (group !== undefined && group !== null && name !== "interleaved") {
      refuse("a microbatch group size only applies to the interleaved schedule, not " + name);
    }
    if (!fam.takesChunks) {
      if (chunks !== undefined && chunks !== null && chunks !== 1) {
        refuse("--chunks " + chunks + " only applies to " + CHUNKED.join(", ") + "; " + name + " has one chunk per rank");
      }
      return fam.build(pp, microbatches);
    }
    return fam.build(pp, microbatches, chunks, group);
  }

  // -- costs: the CLI's --fwd 1 --bwd RATIO --stage-costs a,b,... --p2p-latency L ------------------

  function perVirtualStage(values, pp, chunks, name, placement) {
    var stages = pp * chunks;
    if (values.length !== pp && values.length !== stages) {
      throw new CostError(name + " has " + values.length + " values; expected 1 or " + pp + " (one per rank)" +
                          (chunks > 1 ? " or " + stages + " (one per virtual stage)" : ""));
    }
    for (var i = 0; i < values.length; i++) {
      if (typeof values[i] !== "number" || values[i] < 0) {  // as Python: NaN is not < 0
        throw new CostError(name + " values must be non-negative numbers, got " + pyRepr(values[i], true));
      }
    }
    if (values.length === stages) return values.slice();
    // per-rank values with v chunks: each of a rank's v stages takes 1/v of the rank's value
    return range(stages, function (s) { return values[stageOwner(s, pp, placement)[0]] / chunks; });
  }

  /* costs_from_args + Costs.resolve for fwd, bwd (= ratio x fwd), default wgrad and latency.
   * `factors` is --stage-costs (pp values, or null for all equal). */
  function resolveCosts(sched, opts) {
    var pp = sched.pp, v = sched.chunks;
    var fwd = opts.fwd === undefined ? 1.0 : opts.fwd, bwd = opts.bwd === undefined ? 2.0 : opts.bwd;
    var lat = opts.p2pLatency || 0;
    var fwdV, bwdV;
    if (opts.stageCosts) {
      var scale = 1.0;
      fwdV = opts.stageCosts.map(function (f) { return fwd * scale * f; });
      bwdV = opts.stageCosts.map(function (f) { return bwd * scale * f; });
    } else {
      fwdV = range(pp, function () { return fwd; });
      bwdV = range(pp, function () { return bwd; });
    }
    var f = perVirtualStage(fwdV, pp, v, "fwd", sched.placement);
    var b = perVirtualStage(bwdV, pp, v, "bwd", sched.placement);
    var w = b.map(function (x) { return x / 2; });
    if (typeof lat !== "number" || lat < 0) {
      throw new CostError("p2p_latency must be a non-negative number, got " + pyRepr(lat, true));
    }
    var comm = range(Math.max(pp * v - 1, 0), function () { return lat + 0; });
    return { fwd: f, bwd: b, wgrad: w, comm: comm };
  }

  // -- the simulator: simulator.simulate over validate.dataflow ----------------------------------

  /* Every rank runs its ops in order; an op starts when its rank is free and its inputs have
   * arrived (a cross-rank input arrives comm[boundary] after its producer ends).  Returns the
   * kit's SimResult fields.  Throws if ranks block forever (generated schedules never do). */
  function simulate(sched, sc) {
    var pp = sched.pp, mbs = sched.microbatches, chunks = sched.chunks, stages = pp * chunks;
    var sm = stages * mbs, last = stages - 1;
    var G = sm, I = 2 * sm;
    var rankOf = range(stages, function (st) { return stageOwner(st, pp, sched.placement)[0]; });
    var stagesOf = range(pp, function (rr) { return range(chunks, function (cc) { return virtualStage(rr, cc, pp, sched.placement); }); });
    var dur = { F: sc.fwd, B: sc.bwd, I: sc.bwd.map(function (b, s) { return b - sc.wgrad[s]; }), W: sc.wgrad };
    var keep = sched.ranks.some(function (ops) { return ops.some(function (o) { return o.kind !== "F"; }); });
    var end = new Float64Array(3 * sm), done = new Uint8Array(3 * sm);
    var free = range(pp, function () { return 0; }), busy = free.slice(), live = free.slice(), peak = free.slice();
    var pos = free.slice(), events = range(pp, function () { return []; });
    var waiting = {}, blocked = 0, ready = range(pp, function (r) { return r; }), head = 0;
    while (head < ready.length) {
      var r = ready[head++], ops = sched.ranks[r], i = pos[r];
      for (; i < ops.length; i++) {
        var o = ops[i], s = stagesOf[r][o.chunk], here = s * mbs + o.mb, deps, made;
        if (o.kind === "F") {
          deps = s ? [(s - 1) * mbs + o.mb] : [];
          made = [here];
        } else if (o.kind === "W") {
          deps = [I + here];
          made = [];
        } else {  // B or I: own forward, and the gradient from the next stage (the last stage has the loss)
          deps = s < last ? [here, G + (s + 1) * mbs + o.mb] : [here];
          made = o.kind === "I" ? [G + here, I + here] : [G + here];
        }
        var missing = -1;
        for (var d = 0; d < deps.length; d++) if (!done[deps[d]]) { missing = deps[d]; break; }
        if (missing >= 0) {
          (waiting[missing] = waiting[missing] || []).push(r);
          blocked++;
          break;
        }
        var start = free[r];
        for (d = 0; d < deps.length; d++) {
          var key = deps[d], t = end[key];
          var ks = Math.floor(key / mbs) % stages;
          if (rankOf[ks] !== r) {  // produced on another rank: it crosses a boundary
            var forward = key < sm;
            t = t + sc.comm[forward ? ks : ks - 1];
          }
          start = Math.max(start, t);
        }
        var took = dur[o.kind][s], finish = start + took;
        free[r] = finish;
        busy[r] += took;
        events[r].push({ op: o, stage: s, start: start, end: finish });
        if (o.kind === "F") {
          end[here] = finish;
          if (keep) { live[r] += 1; peak[r] = Math.max(peak[r], live[r]); }
        } else {
          if (o.kind !== "W") end[G + here] = finish;
          if (o.kind === "I") end[I + here] = finish;
          else live[r] -= 1;  // B or W ends the backward of (m, s): its activations are freed
        }
        for (var k = 0; k < made.length; k++) {
          done[made[k]] = 1;
          var woken = waiting[made[k]];
          if (woken) {
            delete waiting[made[k]];
            for (var j = 0; j < woken.length; j++) { ready.push(woken[j]); blocked--; }
          }
        }
      }
      pos[r] = i;
    }
    if (blocked) throw new Error("the schedule deadlocks: ranks wait on each other (run the kit's validator for details)");
    var makespan = 0;
    events.forEach(function (evs) { evs.forEach(function (e) { makespan = Math.max(makespan, e.end); }); });
    var idle = busy.map(function (b) { return makespan - b; });
    var idleSum = idle.reduce(function (a, x) { return a + x; }, 0);
    var ideal = busy.reduce(function (a, x) { return Math.max(a, x); }, 0);
    return {
      schedule: sched, events: events, busy: busy, idle: idle, peakActivations: peak, makespan: makespan,
      bubbleFraction: makespan ? idleSum / (pp * makespan) : 0.0,
      idealTime: ideal,
      bubbleOverIdeal: ideal ? (makespan - ideal) / ideal : 0.0,
    };
  }

  /* One call for a page or a test: build, resolve costs, simulate.  `cfg` has schedule, pp,
   * microbatches, chunks (null: the family's own), group, bwdRatio, slowRank (-1: none),
   * slowFactor, latency.  Returns {result} or {error: the kit's refusal text}. */
  function run(cfg) {
    try {
      var sched = buildSchedule(cfg.schedule, cfg.pp, cfg.microbatches, cfg.chunks, cfg.group);
      var factors = null;
      if (cfg.slowRank !== undefined && cfg.slowRank !== null && cfg.slowRank >= 0) {
        factors = range(sched.pp, function () { return 1.0; });
        factors[cfg.slowRank] = cfg.slowFactor;
      }
      var sc = resolveCosts(sched, { fwd: 1.0, bwd: cfg.bwdRatio, stageCosts: factors, p2pLatency: cfg.latency });
      return { result: simulate(sched, sc) };
    } catch (e) {
      if (e instanceof ScheduleConfigError || e instanceof CostError) return { error: e.message, kind: e.name };
      throw e;
    }
  }

  var PK = {
    FAMILIES: FAMILIES, ScheduleConfigError: ScheduleConfigError, CostError: CostError,
    op: op, opText: opText, schedule: schedule, refuse: refuse, checkSizes: checkSizes, fromDict: fromDict,
    virtualStage: virtualStage, stageOwner: stageOwner,
    gpipe: gpipe, oneFOneB: oneFOneB, interleaved: interleaved, zbH1: zbH1, loopedBfs: loopedBfs,
    interleavedZeroBubble: interleavedZeroBubble, zbv: zbv, dualpipev: dualpipev, oneFOneBPhases: oneFOneBPhases,
    interleavedTable: interleavedTable, interleavedWarmup: interleavedWarmup,
    buildSchedule: buildSchedule, resolveCosts: resolveCosts, simulate: simulate, run: run, pyRepr: pyRepr,
  };
  root.PK = PK;
  if (typeof module !== "undefined" && module.exports) module.exports = PK;
})(typeof window !== "undefined" ? window : this);
