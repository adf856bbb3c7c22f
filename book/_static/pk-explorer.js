/* The static explorer: controls, an SVG timeline and the metrics, redrawn in the page (no kernel).
 *
 * It turns the element #pk-explorer (one per page: the ids below are the contract) into an
 * explorer; the numbers come from pk-sim.js (the port of pipeline_kit that
 * tests/test_static_explorer.py cross-checks against the kit).  Jupyter Book loads every script in
 * book/_static on every page, so this file does nothing on a page without that element.  Plain
 * script, no fetch(): it works from file:// too.
 *
 * DOM contract (tests and benchmarks rely on it): inputs #pk-schedule (a select whose values are
 * the CLI names), #pk-pp, #pk-microbatches, #pk-chunks, #pk-bwd-ratio (B/F with F = 1),
 * #pk-slow-rank (-1: none), #pk-slow-factor, #pk-latency (in units of F); outputs #pk-bubble
 * (idle / (pp x makespan), a decimal), #pk-bubble-ideal, #pk-makespan (units of F), #pk-ideal,
 * #pk-peaks, #pk-error (the kit's refusal, when there is one) and #pk-command (the same
 * configuration as a `python -m pipeline_kit simulate` command).  Numeric outputs carry the full
 * value in data-value.  Setting an input's value and dispatching "input" or "change" redraws.
 */
(function () {
  "use strict";

  // Okabe & Ito, as pipeline_kit.viz.timeline.KIND_COLORS
  var KIND_COLORS = { F: "#0072B2", B: "#D55E00", I: "#E69F00", W: "#009E73" };
  var KIND_NAMES = { F: "forward", B: "backward", I: "input-grad", W: "weight-grad" };
  var MAX_DRAWN_OPS = 40000;  // beyond this the timeline is summarised, the numbers still shown

  var CONTROLS = [
    // id suffix, label, attributes, default
    ["pp", "pp (ranks)", { min: 1, max: 32, step: 1 }, 4],
    ["microbatches", "microbatches M", { min: 1, max: 256, step: 1 }, 8],
    ["chunks", "chunks per rank v", { min: 1, max: 8, step: 1 }, 2],
    ["bwd-ratio", "B / F", { min: 0, max: 8, step: 0.25 }, 2],
    ["slow-rank", "slow rank (-1: none)", { min: -1, max: 31, step: 1 }, -1],
    ["slow-factor", "its slowdown", { min: 0, max: 8, step: 0.25 }, 1.5],
    ["latency", "P2P latency (F)", { min: 0, max: 4, step: 0.05 }, 0],
  ];

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function shade(hex, chunk, chunks) {  // as viz.timeline._shade: later chunks mixed towards white
    var t = chunks <= 1 ? 0 : 0.55 * chunk / (chunks - 1);
    var rgb = [1, 3, 5].map(function (i) { return parseInt(hex.substr(i, 2), 16) / 255; });
    var mixed = rgb.map(function (c) { return c + (1 - c) * t; });
    var lum = 0.2126 * mixed[0] + 0.7152 * mixed[1] + 0.0722 * mixed[2];
    var css = "rgb(" + mixed.map(function (c) { return Math.round(c * 255); }).join(",") + ")";
    return { fill: css, text: lum > 0.45 ? "#000" : "#fff" };
  }

  function fmt(x) {  // like Python's :.6g for the makespan: 33, 39.5, 12.3333
    return String(Number(x.toPrecision(6)));
  }

  function niceStep(span, px) {  // a tick every 60-ish pixels, on 1/2/5 x 10^k
    var raw = span / Math.max(px / 70, 1), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= raw) return steps[i] * p;
    return 10 * p;
  }

  /* The timeline as an SVG string; `geom` gets what the tooltip needs to find the op under the mouse. */
  function drawSvg(res, width, geom) {
    var sched = res.schedule, pp = sched.pp, chunks = sched.chunks;
    var left = 34, right = 62, top = 18, axis = 26;
    var rowH = Math.max(8, Math.min(24, Math.floor(420 / pp)));
    var plotW = Math.max(width - left - right, 100), height = top + pp * rowH + axis;
    var scale = res.makespan ? plotW / res.makespan : 0;
    var box = rowH * 0.8, pad = (rowH - box) / 2, font = Math.min(11, box - 2);
    geom.left = left; geom.top = top; geom.rowH = rowH; geom.scale = scale; geom.res = res;
    var out = ['<svg xmlns="http://www.w3.org/2000/svg" class="pk-svg" width="' + width + '" height="' + height +
               '" viewBox="0 0 ' + width + " " + height + '" role="img" aria-label="timeline: one row per rank, time across">',
               '<defs><pattern id="pk-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
               '<rect width="6" height="6" fill="#f2f2f2"/><line x1="0" y1="0" x2="0" y2="6" stroke="#BBBBBB" stroke-width="2"/>' +
               "</pattern></defs>"];
    out.push('<text class="pk-head" x="' + (left + plotW + 8) + '" y="' + (top - 5) + '">peak act.</text>');
    var colours = {};
    for (var r = 0; r < pp; r++) {
      var y = top + r * rowH;
      out.push('<text class="pk-rank" x="' + (left - 6) + '" y="' + (y + rowH / 2) + '">r' + r + "</text>");
      out.push('<rect class="pk-idle" x="' + left + '" y="' + (y + pad) + '" width="' + (res.makespan * scale) +
               '" height="' + box + '" fill="url(#pk-hatch)"/>');
      out.push('<text class="pk-peak" x="' + (left + plotW + 8) + '" y="' + (y + rowH / 2) + '">' +
               res.peakActivations[r] + "</text>");
    }
    // one <path> per colour, one "M x y h w v h h -w z" box per op: a few elements, not thousands,
    // so the browser parses and lays out a pp = 8, M = 32 timeline in milliseconds
    var labels = [], paths = {};
    if (sched.ranks.reduce(function (n, ops) { return n + ops.length; }, 0) <= MAX_DRAWN_OPS) {
      for (r = 0; r < pp; r++) {
        var evs = res.events[r], yb = top + r * rowH + pad;
        for (var i = 0; i < evs.length; i++) {
          var e = evs[i], o = e.op, key = o.kind + o.chunk;
          var c = colours[key] || (colours[key] = shade(KIND_COLORS[o.kind], o.chunk, chunks));
          var x = left + e.start * scale, w = (e.end - e.start) * scale;
          (paths[key] = paths[key] || []).push("M" + x.toFixed(2) + " " + yb + "h" + w.toFixed(2) + "v" + box + "h" +
                                               (-w).toFixed(2) + "z");
          var label = String(o.mb);
          if (font >= 7 && w >= label.length * font * 0.62 + 3) {
            labels.push('<text x="' + (x + w / 2).toFixed(2) + '" y="' + (yb + box / 2) + '" fill="' + c.text + '">' +
                        label + "</text>");
          }
        }
      }
      out.push('<g class="pk-ops">');
      for (var k in paths) out.push('<path data-op="' + k + '" fill="' + colours[k].fill + '" d="' + paths[k].join("") + '"/>');
      out.push("</g>");
    } else {
      out.push('<text class="pk-note" x="' + (left + 8) + '" y="' + (top + 14) + '">too many ops to draw; the numbers are exact</text>');
    }
    out.push('<g class="pk-labels" style="font-size:' + font + 'px">' + labels.join("") + "</g>");
    // time axis
    var yAxis = top + pp * rowH + 4, step = niceStep(res.makespan || 1, plotW);
    out.push('<line class="pk-axis" x1="' + left + '" y1="' + yAxis + '" x2="' + (left + plotW) + '" y2="' + yAxis + '"/>');
    for (var t = 0; t <= res.makespan + 1e-9; t += step) {
      var tx = (left + t * scale).toFixed(2);
      out.push('<line class="pk-axis" x1="' + tx + '" y1="' + yAxis + '" x2="' + tx + '" y2="' + (yAxis + 4) + '"/>' +
               '<text class="pk-tick" x="' + tx + '" y="' + (yAxis + 15) + '">' + fmt(t) + "</text>");
    }
    out.push("</svg>");
    return out.join("");
  }

  function legendHtml(res) {
    var seen = {};
    res.events.forEach(function (evs) { evs.forEach(function (e) { seen[e.op.kind] = true; }); });
    var items = "FBIW".split("").filter(function (k) { return seen[k]; }).map(function (k) {
      return '<span><i style="background:' + KIND_COLORS[k] + '"></i>' + k + " " + KIND_NAMES[k] + "</span>";
    });
    if (res.schedule.chunks > 1) items.push('<span><i style="background:' + shade(KIND_COLORS.F, 1, 2).fill + '"></i>later chunks lighter</span>');
    items.push('<span><i class="pk-hatch-key"></i>idle (the bubble)</span>');
    return items.join("");
  }

  function Explorer(root) {
    this.root = root;
    root.classList.add("pk-explorer");
    root.textContent = "";
    var form = el("form", { "class": "pk-controls", autocomplete: "off" });
    form.addEventListener("submit", function (ev) { ev.preventDefault(); });
    var sel = el("select", { id: "pk-schedule" });
    Object.keys(PK.FAMILIES).forEach(function (name) {
      var opt = el("option", { value: name }, name + " - " + PK.FAMILIES[name].label);
      if (name === (root.getAttribute("data-schedule") || "1f1b")) opt.selected = true;
      sel.appendChild(opt);
    });
    var lab = el("label", {}, "schedule");
    lab.appendChild(sel);
    form.appendChild(lab);
    this.inputs = { schedule: sel };
    var self = this;
    CONTROLS.forEach(function (c) {
      var attrs = { id: "pk-" + c[0], type: "number", value: String(c[3]), inputmode: "decimal" };
      for (var k in c[2]) attrs[k] = c[2][k];
      var input = el("input", attrs);
      var l = el("label", {}, c[1]);
      l.appendChild(input);
      form.appendChild(l);
      self.inputs[c[0]] = input;
    });
    Object.keys(this.inputs).forEach(function (k) {  // on each input: a script's `new Event("input")` does not bubble
      self.inputs[k].addEventListener("input", function () { self.update(); });
      self.inputs[k].addEventListener("change", function () { self.update(); });
    });
    root.appendChild(form);
    this.error = root.appendChild(el("p", { id: "pk-error", "class": "pk-error", role: "alert", hidden: "" }));
    var body = root.appendChild(el("div", { "class": "pk-body" }));
    var figure = body.appendChild(el("div", { "class": "pk-figure" }));
    this.legend = figure.appendChild(el("div", { "class": "pk-legend" }));
    this.plot = figure.appendChild(el("div", { "class": "pk-plot" }));
    this.tip = figure.appendChild(el("div", { "class": "pk-tip", hidden: "" }));
    this.geom = {};
    this.plot.addEventListener("mousemove", function (ev) { self.hover(ev); });
    this.plot.addEventListener("mouseleave", function () { self.tip.hidden = true; });
    var metrics = body.appendChild(el("div", { "class": "pk-metrics" }));
    this.out = {};
    [["bubble", "bubble: idle / (pp \u00d7 makespan)"], ["bubble-ideal", "bubble / ideal (Megatron paper)"],
     ["makespan", "makespan (units of F)"], ["ideal", "ideal time (busiest rank)"],
     ["peaks", "peak live activations, rank 0, 1, \u2026"]].forEach(function (m) {
      var box = metrics.appendChild(el("div", { "class": "pk-metric pk-metric-" + m[0] }));
      box.appendChild(el("label", { "for": "pk-" + m[0] }, m[1]));
      self.out[m[0]] = box.appendChild(el("output", { id: "pk-" + m[0] }, "\u2013"));
    });
    var cmd = root.appendChild(el("p", { "class": "pk-command" }, "the same in a terminal: "));
    this.command = cmd.appendChild(el("code", { id: "pk-command" }));
    var pending = null;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(function () { self.update(); }, 150);
    });
    this.update();
  }

  /* Read the inputs: {cfg} for the simulator, or {error} when one cannot be read at all. */
  Explorer.prototype.read = function () {
    var v = {}, name = this.inputs.schedule.value, fam = PK.FAMILIES[name];
    if (fam && fam !== this.family) {  // a new family: the chunks field shows its own chunk count
      var had = this.family;
      this.family = fam;
      this.inputs.chunks.disabled = !fam.takesChunks;
      if (!fam.takesChunks || (had && !had.takesChunks)) this.inputs.chunks.value = String(fam.defaultChunks);
    }
    for (var i = 0; i < CONTROLS.length; i++) {
      var id = CONTROLS[i][0], text = this.inputs[id].value.trim();
      if (id === "chunks" && !(fam && fam.takesChunks)) continue;
      if (text === "" || isNaN(Number(text))) return { error: CONTROLS[i][1] + ": enter a number" };
      v[id] = Number(text);
    }
    var slow = v["slow-rank"];  // checked once pp itself is one the kit accepts (else the kit refuses pp)
    if (Number.isInteger(v.pp) && v.pp >= 1 && slow !== -1 && !(Number.isInteger(slow) && slow >= 0 && slow < v.pp)) {
      return { error: "slow rank must be -1 (none) or a rank 0 \u2026 pp-1 = " + (v.pp - 1) + ", got " + slow };
    }
    return { cfg: { schedule: name, pp: v.pp, microbatches: v.microbatches, chunks: fam && fam.takesChunks ? v.chunks : null,
                    bwdRatio: v["bwd-ratio"], slowRank: slow, slowFactor: v["slow-factor"], latency: v.latency } };
  };

  function command(cfg) {
    var parts = ["python -m pipeline_kit simulate --schedule", cfg.schedule, "--pp", cfg.pp, "--microbatches", cfg.microbatches];
    if (cfg.chunks !== null) parts.push("--chunks", cfg.chunks);
    parts.push("--fwd 1 --bwd", cfg.bwdRatio);
    if (cfg.slowRank >= 0) {
      var f = [];
      for (var r = 0; r < cfg.pp; r++) f.push(r === cfg.slowRank ? cfg.slowFactor : 1);
      parts.push("--stage-costs", f.join(","));
    }
    parts.push("--p2p-latency", cfg.latency);
    return parts.join(" ");
  }

  Explorer.prototype.show = function (id, text, value) {
    this.out[id].textContent = text;
    this.out[id].setAttribute("data-value", value === undefined ? "" : String(value));
  };

  Explorer.prototype.refuse = function (message) {
    this.error.textContent = message;
    this.error.hidden = false;
    this.root.classList.add("pk-refused");
    for (var k in this.out) this.show(k, "\u2013");
    this.plot.textContent = "";
    this.legend.textContent = "";
  };

  Explorer.prototype.update = function () {
    var read = this.read();
    if (read.error) return this.refuse(read.error);
    this.command.textContent = command(read.cfg);
    var ran = PK.run(read.cfg);
    if (ran.error) return this.refuse(ran.error);
    var res = ran.result;
    this.error.hidden = true;
    this.error.textContent = "";
    this.root.classList.remove("pk-refused");
    this.show("bubble", res.bubbleFraction.toFixed(4), res.bubbleFraction);
    this.show("bubble-ideal", res.bubbleOverIdeal.toFixed(4), res.bubbleOverIdeal);
    this.show("makespan", fmt(res.makespan), res.makespan);
    this.show("ideal", fmt(res.idealTime), res.idealTime);
    this.show("peaks", res.peakActivations.join(", "), res.peakActivations.join(","));
    this.legend.innerHTML = legendHtml(res);
    this.plot.innerHTML = drawSvg(res, Math.max(this.plot.clientWidth || 0, 320), this.geom);
  };

  /* The op under the mouse, as a tooltip: "F3c1 on rank 2: 4.5 to 5". */
  Explorer.prototype.hover = function (ev) {
    var g = this.geom, svg = this.plot.firstChild;
    if (!g.res || !svg || !svg.getBoundingClientRect) return;
    var box = svg.getBoundingClientRect(), x = ev.clientX - box.left, y = ev.clientY - box.top;
    var r = Math.floor((y - g.top) / g.rowH), t = (x - g.left) / g.scale, hit = null;
    if (r >= 0 && r < g.res.schedule.pp) {
      var evs = g.res.events[r];
      for (var i = 0; i < evs.length && !hit; i++) if (evs[i].start <= t && t < evs[i].end) hit = evs[i];
    }
    if (!hit) { this.tip.hidden = true; return; }
    this.tip.textContent = PK.opText(hit.op, g.res.schedule.chunks) + " on rank " + r + ": " + fmt(hit.start) + " to " + fmt(hit.end);
    this.tip.style.left = (ev.clientX - this.plot.parentNode.getBoundingClientRect().left + 12) + "px";
    this.tip.style.top = (ev.clientY - this.plot.parentNode.getBoundingClientRect().top + 12) + "px";
    this.tip.hidden = false;
  };

  function init() {
    if (typeof PK === "undefined") return;
    var root = document.getElementById("pk-explorer");
    if (root && !root.pkExplorer) root.pkExplorer = new Explorer(root);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
