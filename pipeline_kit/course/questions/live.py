"""Checks whose subject is a live object -- a ``forward_step`` closure, ``nn.Module`` stages, autograd.

Why a module of their own: these are the checks the two-process grader cannot run on plain data.  Each
``*_probe`` function below is sent, as source, to the student's kernel (:func:`pipeline_kit.grading.probe`):
it builds the objects there from inputs the check chose (random per grade), calls the student's code, and
returns only data -- outputs, parameters, gradients, flags.  The ``check_*`` function then judges that data
here, against references the grader computes itself.  A probe must be self-contained: it imports what it
needs in its body and calls nothing else from this module; ``@kernel_side`` keeps its source from import time.
"""

from __future__ import annotations

import random

from ...grading.remote import grading_seed, hidden_rng, kernel_side, probe
from .common import book, call, close, describe, expect_number, fail

def probe_call(probe_fn, student, *args, name: str, shown: str):
    """``probe(probe_fn, student, *args)`` for the student's callable ``student``; the student's exception
    becomes feedback naming the call, as ``call`` does."""
    if not callable(student):
        fail(f"{name} must be a function, got {type(student).__name__} {describe(student)}")
    return call(probe, probe_fn, student, *args, name=name, shown=shown)


def _expect_pair(info: dict, what: str, pair: str, tensor_feedback: str) -> None:
    """What a probe reported about a return value that must be a pair (``forward_step``'s, ``loss_func``'s)."""
    if info["tensor"]:
        fail(tensor_feedback)
    if not info["tuple"]:
        fail(f"{what}'s return value must be tuple, got {info['type']}")
    if "len" in info:
        fail(f"{what} must return {pair}, got a tuple of {info['len']}")


def _draws(name: str) -> list[random.Random]:
    """The inputs a live check tries, in order: a fixed draw first, the same under every seed -- so a known wrong
    answer fails there, with the same feedback in every grade -- then the grade's hidden draw."""
    return [random.Random(f"pipeline-kit:fixed:{name}"), hidden_rng(name)]


def _with_draws(cases, name: str):
    """Each case with each of :func:`_draws`' inputs: ``(case, rng)``, the fixed draw first."""
    return [(case, rng) for case in cases for rng in _draws(name)]


def _generator(rng: random.Random):
    import torch
    return torch.Generator().manual_seed(rng.randrange(2**31))


# -- lab 1: the forward_step / loss_func callback (M041) ------------------------------------------------------

@kernel_side
def callback_probe(forward_step, weights, tokens, targets, other):
    import torch
    vocab = weights["1.weight"].shape[0]
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, weights["0.weight"].shape[1]),
                                torch.nn.Linear(weights["0.weight"].shape[1], vocab))
    model.load_state_dict(weights)
    out = forward_step(iter([(tokens, targets)]), model)
    info = {"type": type(out).__name__, "tensor": isinstance(out, torch.Tensor), "tuple": isinstance(out, tuple)}
    if not info["tuple"] or len(out) != 2:
        info["len"] = len(out) if info["tuple"] else None
        return info
    output, loss_func = out
    info["output_type"] = type(output).__name__
    if not isinstance(output, torch.Tensor):
        return info
    info["output_shape"] = list(output.shape)
    for key, logits in (("res", output), ("other", other)):
        try:
            res = loss_func(logits)
        except Exception as exc:  # noqa: BLE001 -- reported to the grader as data, with the student's line
            from pipeline_kit.grading.verdict import students_line
            info[key] = {"raised": f"{type(exc).__name__}: {exc}", "where": students_line(exc)}
            continue
        r = {"type": type(res).__name__, "tensor": isinstance(res, torch.Tensor), "tuple": isinstance(res, tuple)}
        if r["tuple"] and len(res) == 2:
            loss, logs = res
            r["loss_type"] = type(loss).__name__
            if isinstance(loss, torch.Tensor):
                r.update(dim=loss.dim(), shape=list(loss.shape), requires_grad=loss.requires_grad,
                         value=float(loss.detach().reshape(-1)[0]) if loss.numel() else None)
            r["logs_type"] = type(logs).__name__
            if isinstance(logs, dict):
                r["logs_keys"] = [str(k) for k in logs]
                logged = logs.get("lm loss")
                r["logged_requires_grad"] = isinstance(logged, torch.Tensor) and logged.requires_grad
        elif r["tuple"]:
            r["len"] = len(res)
        info[key] = r
    return info


def check_callback(forward_step) -> None:
    for rng in _draws("m041_main_callback"):
        _check_callback(forward_step, rng)


def _check_callback(forward_step, rng: random.Random) -> None:
    import torch
    vocab, b, s = rng.randint(9, 17), rng.randint(1, 3), rng.randint(4, 7)
    gen = _generator(rng)
    torch.manual_seed(rng.randrange(2**31))
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, vocab))
    tokens = torch.randint(0, vocab, (b, s), generator=gen)
    targets = torch.randint(0, vocab, (b, s), generator=gen)
    other = torch.randn(b, s, vocab, generator=gen)
    info = probe_call(callback_probe, forward_step, model.state_dict(), tokens, targets, other,
                      name="forward_step", shown="forward_step(<iterator>, <model>)")
    _expect_pair(info, "forward_step", "a pair (output_tensor, loss_func)",
                 "forward_step returned a tensor; it must return (output_tensor, loss_func) -- the schedule, not "
                 "forward_step, decides whether the loss is computed (only the last stage calls loss_func)")
    if "output_shape" not in info:
        fail(f"the output_tensor forward_step returns must be Tensor, got {info['output_type']}")
    if tuple(info["output_shape"]) != (b, s, vocab):
        fail(f"output_tensor has shape {tuple(info['output_shape'])}; the schedule needs the model's output, "
             f"logits of shape {(b, s, vocab)}, not the loss")
    res = info["res"]
    if "raised" in res:
        where = res.get("where")
        at = f", at {where}" if isinstance(where, str) and where else ""
        fail(f"loss_func(<output_tensor>) raised {res['raised']}{at}")
    _expect_pair(res, "loss_func", "(loss, dict)",
                 "loss_func returned only the loss; Megatron's contract is (loss, {'lm loss': loss.detach()}) -- "
                 "the dict is what gets logged and averaged")
    if "dim" not in res:
        fail(f"the loss must be Tensor, got {res['loss_type']}")
    if "logs_keys" not in res:
        fail(f"loss_func's dict must be dict, got {res['logs_type']}")
    if "lm loss" not in res["logs_keys"]:
        fail(f"loss_func's dict is missing 'lm loss' (it has {', '.join(map(repr, res['logs_keys'])) or 'no keys'})")
    want = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, vocab), targets.reshape(-1))
    if res["dim"] != 0:
        fail(f"the loss must be a scalar, got shape {tuple(res['shape'])}")
    if not close(res["value"], want.item(), rel=1e-5):
        fail(f"the loss is {res['value']:.5f}, not the mean cross-entropy of the output it is given "
             f"{book('entry-point', 'The callback contract')}")
    if not res["requires_grad"]:
        fail("the loss does not require grad: backward must start from it, so do not detach it")
    if res["logged_requires_grad"]:
        fail("logs['lm loss'] still carries the graph: detach it (it is only logged)")
    mine = info["other"]
    want_other = torch.nn.functional.cross_entropy(other.reshape(-1, vocab), targets.reshape(-1)).item()
    if "raised" in mine or mine.get("value") is None or not close(mine["value"], want_other, rel=1e-5):
        fail("loss_func must compute the loss of the tensor it is given -- the schedule calls it with the last "
             "stage's output -- but loss_func(other logits) did not give their cross-entropy "
             f"({want_other:.5f}): use its argument, not a tensor captured from forward_step")


# -- lab 5: deallocate_output (M053) -------------------------------------------------------------------------

@kernel_side
def deallocate_probe(fn, x0, grad):
    import torch

    from pipeline_kit.runtime.compute import _run_backward
    x = x0.detach().clone().requires_grad_(True)
    y = torch.tanh(x * 1.5)
    payload = y.detach()  # what P2P.send hands to isend: a second reference to the same storage
    before = payload.clone()
    nbytes = payload.untyped_storage().nbytes()
    fn(y)
    info = {"resized": payload.untyped_storage().nbytes() != nbytes, "changed": False, "x_grad": None}
    if info["resized"]:  # reading the payload now could fail: the storage it views is gone
        return info
    info.update(changed=not torch.equal(payload, before), grad_fn=y.grad_fn is not None, numel=y.numel())
    if info["grad_fn"] and info["numel"] == 1 and not info["changed"]:
        try:
            _run_backward((y,), (grad,), keep_graph=False)
        except Exception as exc:  # noqa: BLE001 -- reported to the grader as data
            info["backward_error"] = f"{type(exc).__name__}: {exc}"
        info["x_grad"] = x.grad
    return info


def check_deallocate(fn) -> None:
    import torch
    gen = _generator(hidden_rng("m053_main_lifetime"))  # (its feedback names no drawn value)
    x = torch.randn(2, 8, 16, generator=gen, requires_grad=True)
    grad = torch.randn(2, 8, 16, generator=gen)
    want = torch.autograd.grad(torch.tanh(x * 1.5), x, grad)[0]
    info = probe_call(deallocate_probe, fn, x.detach(), grad, name="deallocate_output",
                      shown="deallocate_output(<output tensor>)")
    if info["resized"]:
        fail("deallocate_output resized the storage the in-flight send still reads: the send would transmit "
             "garbage or crash. Drop the output's reference (replace y.data), never free the storage in place")
    if info["changed"]:
        fail("deallocate_output changed the bytes the in-flight send still reads (the send holds the same "
             "storage until delivery): do not write into it (zero_, fill_, copy_); replace y.data instead")
    if not info["grad_fn"]:
        fail("after deallocate_output the output has no grad_fn: backward of this microbatch can no longer run. "
             "Keep the tensor object and its graph; only its data goes")
    if info["numel"] != 1:
        fail(f"after deallocate_output the output still holds {info['numel']} elements: the memory stays allocated "
             "until backward. Replace y.data with a 1-element tensor (Megatron's deallocate_output_tensor)")
    if "backward_error" in info:
        fail(f"backward through the deallocated output failed: {info['backward_error']}")
    got = info["x_grad"]
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.allclose(got, want):
        fail("backward through the deallocated output gave a wrong input gradient: the graph must stay intact")


# -- lab 6: stages built by the student (M047) ---------------------------------------------------------------

@kernel_side
def stage_probe(build, cfg, n, tokens, targets):
    import torch

    from pipeline_kit.runtime.model import GPT, StageModule
    info = {"stages": []}
    stages = []
    for s in range(n):
        torch.manual_seed(100 + s)
        m = build(cfg, s, n)
        entry = {"type": type(m).__name__, "module": isinstance(m, torch.nn.Module),
                 "kit": isinstance(m, (StageModule, GPT))}
        info["stages"].append(entry)
        if not entry["module"] or entry["kit"]:
            return info
        entry["state"] = {str(k): v.detach().clone() for k, v in m.state_dict().items()}
        stages.append(m)
    x = tokens
    for s, m in enumerate(stages):
        try:
            x = m(x)
        except Exception as exc:  # noqa: BLE001 -- reported to the grader as data
            info["forward_error"] = [s, f"{type(exc).__name__}: {exc}"]
            return info
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        info["output"] = {"type": type(x).__name__, "shape": list(x.shape) if isinstance(x, torch.Tensor) else None}
        return info
    info["logits"] = x
    torch.nn.functional.cross_entropy(x.reshape(-1, x.shape[-1]), targets.reshape(-1)).backward()
    info["grads"] = [{str(k): p.grad for k, p in m.named_parameters()} for m in stages]
    return info


def check_build_stage(fn, cases) -> None:
    import torch

    from ...runtime.model import GPT, build_stage, lm_loss, make_batch
    for (cfg, n), rng in _with_draws(cases, "m047_main_construction"):
        tokens, targets = make_batch(cfg, 1, 2, rng.randrange(1, 10_000))
        info = probe_call(stage_probe, fn, cfg, n, tokens[0], targets[0], name="build_my_stage",
                          shown=f"build_my_stage(cfg, <stage>, {n})")
        for s, entry in enumerate(info["stages"]):
            if not entry["module"]:
                fail(f"build_my_stage(cfg, {s}, {n}) must return an nn.Module, got {entry['type']}")
            if entry["kit"]:
                fail(f"build_my_stage returned the kit's {entry['type']}: build the stage yourself from Embedding, "
                     "Block and Head (build_stage is the reference this check compares with)")
        states = [entry["state"] for entry in info["stages"]]
        owner: dict[str, int] = {}
        for s, state in enumerate(states):
            for name in state:
                if name in owner:
                    why = {"embedding": "only the first stage builds the embedding",
                           "head": "only the last stage builds the head"}.get(name.split(".")[0],
                                                                               "each layer lives on one stage")
                    fail(f"{name} is built on stages {owner[name]} and {s}: each rank builds only its own part ({why})")
                owner[name] = s
        ref = GPT(cfg)
        want_names = set(ref.state_dict())
        extra, missing = set(owner) - want_names, want_names - set(owner)
        if extra:
            fail(f"your stages have parameters the kit's GPT does not name this way, e.g. {min(extra)!r}; name "
                 "the parts embedding, blocks.<global layer id> (an nn.ModuleDict) and head, as the kit's GPT does")
        if missing:
            fail(f"no stage holds {min(missing)!r} ({len(missing)} parameter tensor(s) missing for "
                 f"cfg.layers={cfg.layers}, {n} stages)")
        for s, state in enumerate(states):
            with torch.device("meta"):
                kit = set(build_stage(cfg, s, n).state_dict())
            if set(state) != kit:
                fail(f"stage {s} of {n} holds {min(set(state) ^ kit)!r}, which build_stage puts elsewhere (even split, "
                     "earlier stages take the extra layers)")
        try:
            ref.load_state_dict({k: v for state in states for k, v in state.items()})
        except RuntimeError as exc:
            fail(f"your stages' parameters do not fit the model's shapes: {str(exc).splitlines()[-1].strip()}")
        if "forward_error" in info:
            s, err = info["forward_error"]
            fail(f"stage {s}'s forward(<activation>) raised {err}")
        want = ref(tokens[0])
        x = info.get("logits")
        if x is None or x.shape != want.shape:
            shown = tuple(x.shape) if x is not None else (info.get("output") or {}).get("shape")
            fail(f"chaining your {n} stages gives {describe(tuple(shown) if shown else info['output']['type'])}, not "
                 "the model's logits: the last stage must end with the final norm and the output layer")
        if not torch.allclose(x, want, rtol=1e-5, atol=1e-6):
            fail(f"chaining your {n} stages gives other logits than the model with the same parameters (max "
                 f"difference {float((x - want).abs().max()):.2e}): check the order embedding -> blocks in layer "
                 "order -> head")
        lm_loss(want, targets[0]).backward()
        grads = dict(ref.named_parameters())
        for s, stage_grads in enumerate(info["grads"]):
            for name, g in stage_grads.items():
                ref_grad = grads[name].grad if name in grads else None
                if g is None or ref_grad is None or not torch.allclose(g, ref_grad, rtol=1e-4, atol=1e-7):
                    fail(f"stage {s}: the gradient of {name} differs from the single-process model's")


# -- lab 6: where the loss lives (M048) ----------------------------------------------------------------------

@kernel_side
def pipeline_probe(step, cfg, n, tokens, targets):
    import torch

    from pipeline_kit.runtime.model import build_stage
    seen = {"calls": [0] * n, "violation": None}

    class Received:
        """A stage as P2P would feed it: a non-first stage must get its input with no graph behind it."""

        def __init__(self, module, first):
            self.module, self.first = module, first

        def __call__(self, x):
            seen["calls"][self.module.stage] += 1
            if not self.first and getattr(x, "grad_fn", None) is not None and seen["violation"] is None:
                seen["violation"] = self.module.stage
                raise RuntimeError("a stage received a tensor still attached to the previous stage's graph")
            return self.module(x)

        def parameters(self):
            return self.module.parameters()

        def named_parameters(self):
            return self.module.named_parameters()

    stages = [Received(build_stage(cfg, s, n), s == 0) for s in range(n)]
    try:
        value = step(stages, tokens, targets)
    except Exception:
        if seen["violation"] is not None:
            return {"violation": seen["violation"]}
        raise
    if seen["violation"] is not None:
        return {"violation": seen["violation"]}
    if isinstance(value, torch.Tensor):
        value = value.as_subclass(torch.Tensor).detach().requires_grad_(value.requires_grad) \
            if value.is_floating_point() else value
    return {"violation": None, "calls": seen["calls"], "value": value,
            "grads": [{str(k): p.grad for k, p in st.named_parameters()} for st in stages]}


def _pipeline_run(fn, cfg, n, m, rng: random.Random, mbs=2):
    from ...runtime.grads import reference_grads
    from ...runtime.model import make_batch
    tokens, targets = make_batch(cfg, m, mbs, rng.randrange(1, 10_000))
    what = f"pipeline_step(<{n} stages>, {m} microbatches)"
    info = probe_call(pipeline_probe, fn, cfg, n, tokens, targets, name="pipeline_step",
                      shown=f"pipeline_step(<{n} stages>, <{m} microbatches of tokens>, <targets>)")
    if info["violation"] is not None:
        fail(f"stage {info['violation']} received a tensor still attached to the previous stage's graph; in a "
             "pipeline it arrives through P2P with no graph: detach it and call requires_grad_() so that "
             "backward leaves its gradient in .grad, then send that gradient back to the previous stage")
    return info, reference_grads(cfg, tokens, targets), tokens, targets, what


def check_last_stage(fn, cases) -> None:
    import torch
    for (cfg, n, m), rng in _with_draws(cases, "m048_main"):
        info, ref, _, _, what = _pipeline_run(fn, cfg, n, m, rng)
        for s, calls in enumerate(info["calls"]):
            if calls != m:
                fail(f"{what} ran stage {s} {calls} times; every stage runs once per microbatch ({m})")
        ratios = []
        for s, grads in enumerate(info["grads"]):
            for name, g in grads.items():
                if g is None or not torch.any(g != 0):
                    fail(f"{what}: stage {s}'s parameter {name} has no gradient -- backward starts from the loss on "
                         "the last stage; each earlier stage must run backward from the gradient of its output, "
                         "received from the next stage (output.backward(grad))")
                r = (g * ref[name]).sum() / (ref[name] * ref[name]).sum()
                # float32 sums in another order: an element 1000x below the tensor's largest can differ by a few
                # of its own ulps (seen: 3.8757e-6 against 3.8691e-6), so the floor scales with the largest
                if not torch.allclose(g, r * ref[name], rtol=1e-3, atol=1e-5 * float(ref[name].abs().max())):
                    fail(f"{what}: the gradient of {name} (stage {s}) does not follow the reference's direction: the "
                         "loss must be the cross-entropy of the last stage's logits with that microbatch's targets")
                ratios.append(float(r))
        if max(ratios) - min(ratios) > 1e-3 * max(abs(x) for x in ratios):
            fail(f"{what}: the stages' gradients are scaled differently ({min(ratios):.3g}x to {max(ratios):.3g}x the "
                 "reference): apply the loss and any scaling once, on the last stage, and send gradients back "
                 "unchanged")


def check_scaling(fn, cases) -> None:
    import torch

    from ...runtime.model import GPT, lm_loss
    for (cfg, n, m), rng in _with_draws(cases, "m048_main"):
        info, ref, tokens, targets, what = _pipeline_run(fn, cfg, n, m, rng)
        name, g = next(iter(info["grads"][-1].items()))
        if g is None:
            fail(f"{what} left no gradient on the last stage")
        r = float((g * ref[name]).sum() / (ref[name] * ref[name]).sum())
        if not close(r, 1.0, rel=1e-4):
            if close(r, m, rel=1e-3):
                fail(f"{what}: the gradients are {r:.2f}x the full-batch mean's: divide each microbatch's loss by M = "
                     f"{m} before backward, so the accumulated gradient is the mean over microbatches")
            if close(r, 1 / m, rel=1e-3):
                fail(f"{what}: the gradients are 1/{m} of the full-batch mean's: the loss is divided by M twice")
            fail(f"{what}: the gradients are {r:.3g}x the full-batch mean's, not equal to it "
                 f"{book('stages', '1/M scaling, checked')}")
        with torch.no_grad():
            gpt = GPT(cfg)
            want = float(sum(lm_loss(gpt(x), y) for x, y in zip(tokens, targets)) / m)
        value = info["value"]
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                fail(f"{what} returns the loss with its graph; return a plain number for the log (loss.item())")
            if value.numel() != 1:
                fail(f"{what} returns a tensor of shape {tuple(value.shape)}; return the logged loss, one number")
            value = float(value)
        got = expect_number(value, f"the value {what} returns")
        if close(got, want, rel=1e-4):
            continue
        if close(got, want * m, rel=1e-4):
            fail(f"{what} returns {got:.4f}, the sum of the microbatch losses; log their mean")
        if close(got, want / m, rel=1e-4):
            fail(f"{what} returns {got:.4f}: the mean of the 1/M-scaled losses; the scaled losses add up to the mean")
        fail(f"{what} returns {got:.4f}, not the mean microbatch loss {book('stages', '1/M scaling, checked')}")


# -- lab 6: logging the loss (M048 follow-up) ----------------------------------------------------------------

@kernel_side
def log_tensor_probe(fn, w0, x, y):
    import torch
    w = w0.detach().clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(x @ w, y)
    t = fn(loss)
    info = {"tensor": isinstance(t, torch.Tensor), "type": type(t).__name__}
    if not info["tensor"]:
        return info
    info.update(requires_grad=t.requires_grad, numel=t.numel(),
                shares=t.untyped_storage().data_ptr() == loss.untyped_storage().data_ptr(),
                values=[float(v) for v in t.detach().reshape(-1)[:4].tolist()])
    if info["requires_grad"] or info["shares"] or info["numel"] != 1:
        return info
    with torch.no_grad():
        t.add_(100.0)  # what an in-place all_reduce does to it
    try:
        loss.backward()
        info.update(loss_after=loss.detach().item(), w_grad=w.grad)
    except Exception as exc:  # noqa: BLE001 -- reported to the grader as data
        info["backward_error"] = f"{type(exc).__name__}: {exc}"
    return info


def check_log_tensor(fn) -> None:
    for rng in _draws("m048_follow_autograd"):
        _check_log_tensor(fn, rng)


def _check_log_tensor(fn, rng: random.Random) -> None:
    import torch
    gen = _generator(rng)
    w = torch.randn(4, 5, generator=gen, requires_grad=True)
    x, y = torch.randn(6, 4, generator=gen), torch.randint(0, 5, (6,), generator=gen)
    loss = torch.nn.functional.cross_entropy(x @ w, y)
    want_grad = torch.autograd.grad(loss, w)[0]
    value = loss.item()
    info = probe_call(log_tensor_probe, fn, w.detach(), x, y, name="loss_for_logging",
                      shown="loss_for_logging(<loss>)")
    if not info["tensor"]:
        fail(f"loss_for_logging must return a tensor (all_reduce works in place on a tensor), got {info['type']}")
    if info["requires_grad"]:
        fail("loss_for_logging returned a tensor that is part of the autograd graph: the logging collective must run "
             "on a detached value, never on a graph node")
    if info["numel"] != 1 or not close(info["values"][0], value, rel=1e-6):
        fail(f"loss_for_logging returned {describe(info['values'])}; it must hold the loss value {value:.6f}")
    if info["shares"]:
        fail("loss_for_logging returned a tensor sharing the loss's storage (detach() alone does): the in-place "
             "all_reduce would overwrite the loss the last stage still uses. Make a new tensor (detach().clone())")
    g = info.get("w_grad")
    if "backward_error" in info or not close(info.get("loss_after", float("nan")), value, rel=1e-6) \
            or not isinstance(g, torch.Tensor) or g.shape != want_grad.shape or not torch.allclose(g, want_grad):
        fail("after the logging reduction the loss or its gradient changed: keep logging outside autograd")


# -- lab 6: vocabulary-parallel cross-entropy (M048) ---------------------------------------------------------

@kernel_side
def vocab_probe(fn, logits, targets, tp, full):
    import torch
    joins = (torch.cat, torch.stack, torch.concat, torch.hstack, torch.vstack, torch.column_stack,
             torch.concatenate, torch.dstack)
    gathered = []

    class Shard(torch.Tensor):
        """A logits shard of one TP rank: joining shards into the full [N, V] logits is recorded and refused."""

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            out = super().__torch_function__(func, types, args, kwargs or {})
            if func in joins and isinstance(out, torch.Tensor) and out.numel() >= full:
                gathered.append(True)
                raise RuntimeError("the shards were gathered into the full logits")
            return out

    shards = [s.clone().as_subclass(Shard) for s in logits.chunk(tp, dim=1)]
    try:
        got = fn(shards, targets.clone())
    except Exception:
        if gathered:
            return {"gathered": True}
        raise
    if gathered:
        return {"gathered": True}
    if isinstance(got, torch.Tensor):
        got = got.as_subclass(torch.Tensor).detach()
    return {"gathered": False, "result": got}


def check_vocab_parallel(fn, cases) -> None:
    import math

    import torch
    import torch.nn.functional as F
    salts = (0, 1 + grading_seed())  # each case with fixed logits first, then the grade's own
    for (n, vocab, tp, scale, seed), salt in [(case, k) for case in cases for k in salts]:
        gen = torch.Generator().manual_seed(seed + 7919 * salt)
        logits = torch.randn(n, vocab, generator=gen, dtype=torch.float32) * scale
        targets = torch.randint(0, vocab, (n,), generator=gen)
        want = F.cross_entropy(logits, targets)
        full = n * vocab if tp > 1 else n * vocab + 1  # one shard is the whole vocabulary already
        what = f"vocab_parallel_ce(<{tp} shards of [{n}, {vocab // tp}]>, targets)"
        info = probe_call(vocab_probe, fn, logits, targets, tp, full, name="vocab_parallel_ce", shown=what)
        if info["gathered"]:
            fail("vocab_parallel_ce gathered the shards into the full [N, V] logits: on a real TP group that is the "
                 "all-gather vocabulary parallelism exists to avoid. Reduce per-token numbers (max, sum of exps, the "
                 "target's logit) across shards instead")
        got = info["result"]
        if isinstance(got, torch.Tensor):
            if got.numel() != 1:
                fail(f"{what} returned shape {tuple(got.shape)}; return the mean loss over the {n} tokens (a scalar)")
            got = float(got)
        if isinstance(got, float) and not math.isfinite(got):
            fail(f"{what} is {got} for logits of size ~{scale:g}: exp overflows. Subtract the max over the whole "
                 "vocabulary first -- an all-reduce(MAX) of the shards' maxima -- as Megatron's "
                 "vocab_parallel_cross_entropy does")
        got = expect_number(got, what)
        if close(got, float(want), rel=1e-4, abs_=1e-5):
            continue
        part = vocab // tp
        local = sum(float(F.cross_entropy(s, (targets - k * part).clamp(0, part - 1)))
                    for k, s in enumerate(logits.chunk(tp, dim=1))) / tp
        if close(got, local, rel=1e-3):
            fail(f"{what} is {got:.4f}, the average of per-shard cross-entropies; a shard's softmax normalises over "
                 f"its {part} words only: all-reduce(SUM) the sums of exps over the TP group")
        fail(f"{what} is {got:.4f}, not the cross-entropy over the full vocabulary: the target's logit comes from the "
             "shard that owns the target id (shard k owns ids k*V/t .. (k+1)*V/t - 1)")


__all__ = ["check_build_stage", "check_callback", "check_deallocate", "check_last_stage", "check_log_tensor",
           "check_scaling", "check_vocab_parallel"]
