#!/usr/bin/env python3
"""Writes the conformance goldens: facts about PyTorch 2.15.0, measured by running it.

Each area is one function returning its facts and one file, conformance/goldens/<area>.json:

    {"area": ..., "torch_version": "2.15.0", "generated_by": "conformance/generate.py",
     "facts": [{"scenario": ..., "fact": ..., "value": <any JSON value>}, ...]}

pretty-printed with sorted keys and a trailing newline, facts in the order the area emits them,
so that running it twice gives byte-identical files. Run it through scripts/regen-goldens.sh,
which installs the pinned torch into a cache outside the repository:

    python3 conformance/generate.py                  # every area
    python3 conformance/generate.py --area autograd  # one area

It refuses any torch but 2.15.0. Everything runs on the CPU (no GPU is needed or used); facts
whose text depends on the device (tensor type names) are recorded as the CPU text, and the Rust
tests state the rule that maps them to CUDA (see conformance/README.md).
"""

import argparse
import json
import os
import sys

TORCH_VERSION = "2.15.0"
GOLDENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens")


class Facts:
    """The facts of one area, in the order they are recorded."""

    def __init__(self):
        self.items = []
        self.keys = set()

    def add(self, scenario, fact, value):
        key = (scenario, fact)
        if key in self.keys:
            raise SystemExit(f"duplicate fact {scenario!r} / {fact!r}")
        self.keys.add(key)
        self.items.append({"scenario": scenario, "fact": fact, "value": value})


AREAS = {}


def area(fn):
    """Registers an area: a function that fills a Facts."""
    AREAS[fn.__name__] = fn
    return fn


def write(name, facts):
    doc = {
        "area": name,
        "torch_version": TORCH_VERSION,
        "generated_by": "conformance/generate.py",
        "facts": facts.items,
    }
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    os.makedirs(GOLDENS, exist_ok=True)
    path = os.path.join(GOLDENS, f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{path}: {len(facts.items)} facts")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", action="append", choices=sorted(AREAS),
                        help="an area to regenerate (repeatable; default: every area)")
    args = parser.parse_args()


    if torch.__version__.split("+")[0] != TORCH_VERSION:
        raise SystemExit(f"torch {torch.__version__} found; the goldens are made with "
                         f"torch {TORCH_VERSION} only (run scripts/regen-goldens.sh)")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in args.area or sorted(AREAS):
        facts = Facts()
        AREAS[name](facts)
        write(name, facts)


# ---------------------------------------------------------------------------------------------
# Areas. Each one builds every tensor from explicit values or a fixed seed, on the CPU.

import gc
import warnings

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode


def dtype_name(t):
    return str(t.dtype)


def values(shape, start=0):
    """Exactly representable, varied values: (k mod 17 - 8) / 8 for k = start, start + 1, ..."""
    n = 1
    for d in shape:
        n *= d
    return torch.tensor([((start + k) % 17 - 8) / 8 for k in range(n)],
                        dtype=torch.float32).reshape(shape).clone()


def node_names(t):
    """The names of every node reachable from t.grad_fn, AccumulateGrad included, sorted."""
    names, seen, stack = [], set(), [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.append(type(fn).__name__)
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return sorted(names)


class SavedLog:
    """What autograd saves (saved_tensors_hooks), deduplicated by storage."""

    def __init__(self):
        self.storages = {}

    def pack(self, t):
        key = t.untyped_storage().data_ptr()
        self.storages.setdefault(key, (t.untyped_storage().nbytes(), dtype_name(t), t))
        return t

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)

    def described(self, operands, parameters=()):
        """[{operand, bytes, dtype}] in the order first saved; operands names known storages;
        anything else is "new"; parameters are left out."""
        params = {p.untyped_storage().data_ptr() for p in parameters}
        names = {t.untyped_storage().data_ptr(): name for name, t in operands.items()}
        out = []
        for key, (nbytes, dtype, _) in self.storages.items():
            if key in params:
                continue
            out.append({"operand": names.get(key, "new"), "bytes": nbytes, "dtype": dtype})
        return out


class Alive(TorchDispatchMode):
    """Remembers every storage an op makes, to ask later which are still alive."""

    def __init__(self):
        super().__init__()
        self.refs = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                self.refs.append((s.data_ptr(), s.nbytes(), StorageWeakRef(s)))
        return out

    def alive_bytes(self, exclude=()):
        gc.collect()
        skip = {t.untyped_storage().data_ptr() for t in exclude}
        alive = {}
        for ptr, nbytes, ref in self.refs:
            if not ref.expired() and ptr not in skip:
                alive[ptr] = nbytes
        return sum(alive.values()), len(alive)


def error_text(fn):
    try:
        fn()
    except (RuntimeError, AssertionError) as e:
        return str(e)
    return None


# --- autograd ------------------------------------------------------------------------------

def op_scenarios():
    """(scenario, build) for every op and loss gpumem's autograd has; build(x, y) returns the
    result and the operands to name. x and y are [4, 8] leaves that require grad."""
    target = values([4, 8], 5)
    classes = torch.tensor([1, 0, 7, 3])
    return [
        ("add", lambda x, y: (x + y, {})),
        ("mul", lambda x, y: (x * y, {})),
        ("mul_scalar", lambda x, y: (x * 2.0, {})),
        ("matmul", lambda x, y: (torch.mm(x, y.t().contiguous().detach().requires_grad_()), {})),
        ("relu", lambda x, y: (x.relu(), {})),
        ("gelu_tanh", lambda x, y: (F.gelu(x, approximate="tanh"), {})),
        ("sum", lambda x, y: (x.sum(), {})),
        ("mean", lambda x, y: (x.mean(), {})),
        ("clone", lambda x, y: (x.clone(), {})),
        ("mse_loss", lambda x, y: (F.mse_loss(x, target), {"target": target})),
        ("log_softmax", lambda x, y: (F.log_softmax(x, dim=1), {})),
        ("nll_loss", lambda x, y: (F.nll_loss(x, classes), {"targets": classes})),
        ("cross_entropy", lambda x, y: (F.cross_entropy(x, classes), {"targets": classes})),
        ("add_ (on a clone)", lambda x, y: (x.clone().add_(y), {})),
        ("mul_ (on a clone)", lambda x, y: (x.clone().mul_(y), {})),
        ("mul_ scalar (on a clone)", lambda x, y: (x.clone().mul_(2.0), {})),
        ("relu_ (on a clone)", lambda x, y: (x.clone().relu_(), {})),
    ]


def linear_scenarios():
    """F.linear with x [4, 8], weight [3, 8], bias [3]: which of them require grad."""
    return [
        ("linear (x, weight, bias require grad)", True, True, True),
        ("linear (weight and bias require grad)", False, True, True),
        ("linear (x requires grad, no bias)", True, False, None),
    ]


def mlp(activation, x, seed=0):
    """Chapter 8's model, 512 -> 1024 -> 1024 -> 1024 -> 10, weights of shape [out, in]."""
    g = torch.Generator().manual_seed(seed)
    sizes = [512, 1024, 1024, 1024, 10]
    params = []
    for i, o in zip(sizes, sizes[1:]):
        bound = 1 / i ** 0.5
        w = (torch.rand(o, i, generator=g) * 2 - 1) * bound
        b = (torch.rand(o, generator=g) * 2 - 1) * bound
        params += [w.requires_grad_(), b.requires_grad_()]
    return params


def layer_fns(params, activation):
    act = {"relu": torch.relu, "gelu": lambda z: F.gelu(z, approximate="tanh")}[activation]
    count = len(params) // 2
    fns = []
    for i in range(count):
        w, b = params[2 * i], params[2 * i + 1]
        last = i == count - 1
        fns.append((lambda w, b, last: lambda h: F.linear(h, w, b) if last
                    else act(F.linear(h, w, b)))(w, b, last))
    return fns


@area
def autograd(facts):
    for name, build in op_scenarios():
        scenario = f"op {name}"
        x = values([4, 8]).requires_grad_()
        y = values([4, 8], 3).requires_grad_()
        with SavedLog() as log:
            out, named = build(x, y)
        operands = {"x": x, "y": y, "result": out, **named}
        facts.add(scenario, "grad_fn", type(out.grad_fn).__name__)
        facts.add(scenario, "graph_nodes", node_names(out))
        facts.add(scenario, "saved", log.described(operands))
    for name, need_x, need_w, need_b in linear_scenarios():
        x = values([4, 8]).requires_grad_(need_x)
        w = values([3, 8], 2).requires_grad_(need_w)
        b = None if need_b is None else values([3], 9).requires_grad_(need_b)
        with SavedLog() as log:
            out = F.linear(x, w, b)
        facts.add(name, "grad_fn", type(out.grad_fn).__name__)
        facts.add(name, "graph_nodes", node_names(out))
        facts.add(name, "saved", log.described({"x": x, "weight": w, "result": out}))

    # Only some inputs require grad: what is saved follows what is needed.
    for name, rx, ry in [("mul (only x requires grad)", True, False),
                         ("mul (only y requires grad)", False, True),
                         ("matmul (only x requires grad)", True, False)]:
        x = values([4, 8]).requires_grad_(rx)
        y = values([4, 8] if name.startswith("mul") else [8, 4], 3).requires_grad_(ry)
        with SavedLog() as log:
            out = x * y if name.startswith("mul") else torch.mm(x, y)
        facts.add(name, "graph_nodes", node_names(out))
        facts.add(name, "saved", log.described({"x": x, "y": y, "result": out}))

    # Grad modes.
    x = values([4, 8]).requires_grad_()
    for mode, ctx in [("grad", torch.enable_grad), ("no_grad", torch.no_grad),
                      ("inference_mode", torch.inference_mode)]:
        with ctx(), SavedLog() as log:
            out = (x * 2.0).relu()
        scenario = f"relu(x * 2) under {mode}"
        facts.add(scenario, "requires_grad", out.requires_grad)
        facts.add(scenario, "grad_fn", None if out.grad_fn is None else type(out.grad_fn).__name__)
        facts.add(scenario, "is_inference", out.is_inference())
        facts.add(scenario, "saved_bytes", sum(n for n, _, _ in log.storages.values()))

    # retain_graph: a second backward works and adds the same gradient again.
    x = values([4, 8]).requires_grad_()
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    loss.backward()
    facts.add("backward twice, retain_graph=True first", "second backward adds",
              bool(torch.equal(x.grad, first * 2)))
    facts.add("backward twice, retain_graph=True first", "third backward",
              error_text(lambda: loss.backward()))

    # Chapter 8's model: batch 64, cross-entropy against class targets.
    for activation in ["relu", "gelu"]:
        scenario = f"MLP 512-1024-1024-1024-10 {activation} batch 64 cross_entropy"
        params = mlp(activation, None)
        batch = torch.rand(64, 512, generator=torch.Generator().manual_seed(1))
        classes = torch.arange(64) % 10
        with SavedLog() as log:
            h = batch
            for fn in layer_fns(params, activation):
                h = fn(h)
            loss = F.cross_entropy(h, classes)
        saved = log.described({"batch": batch, "targets": classes}, params)
        facts.add(scenario, "graph_nodes", node_names(loss))
        facts.add(scenario, "saved tensors excluding parameters", len(saved))
        facts.add(scenario, "saved bytes excluding parameters", sum(s["bytes"] for s in saved))
        facts.add(scenario, "saved parameters",
                  len({id(p) for p in params}
                      & {id(p) for p in params
                         if p.untyped_storage().data_ptr() in log.storages}))
        with torch.no_grad(), SavedLog() as log:
            h = batch
            for fn in layer_fns(params, activation):
                h = fn(h)
        facts.add(scenario + " under no_grad", "saved bytes",
                  sum(n for n, _, _ in log.storages.values()))
        facts.add(scenario + " under no_grad", "requires_grad", h.requires_grad)


# --- errors --------------------------------------------------------------------------------

@area
def errors(facts):
    x = values([4, 8]).requires_grad_()
    loss = x.relu().sum()
    loss.backward()
    facts.add("second backward", "error", error_text(lambda: loss.backward()))

    x = values([64, 1024]).requires_grad_()
    h = x.relu()
    loss = (h * 2.0).relu().sum()
    h.add_(1.0)
    facts.add("in-place on the saved output of relu, then backward (x [64, 1024])", "error",
              error_text(lambda: loss.backward()))

    x = values([4, 8]).requires_grad_()
    w = values([3, 8]).requires_grad_()
    z = F.linear(x, w)
    loss = F.gelu(z, approximate="tanh").sum()
    z.mul_(2.0)
    facts.add("in-place on linear's output that gelu saved, then backward", "error",
              error_text(lambda: loss.backward()))

    x = values([4, 8]).requires_grad_()
    c = values([4, 8], 1)
    loss = (x * c).sum()
    c.add_(1.0)
    facts.add("in-place on a saved leaf that does not require grad, then backward", "error",
              error_text(lambda: loss.backward()))

    x = values([4, 8]).requires_grad_()
    facts.add("add_ on a leaf that requires grad", "error", error_text(lambda: x.add_(1.0)))
    facts.add("relu_ on a leaf that requires grad", "error", error_text(lambda: x.relu_()))
    with torch.no_grad():
        facts.add("add_ on a leaf that requires grad under no_grad", "error",
                  error_text(lambda: x.add_(0.0)))

    h = x * 2.0
    facts.add("requires_grad_(False) on a non-leaf", "error",
              error_text(lambda: h.requires_grad_(False)))
    facts.add("requires_grad_(True) on a non-leaf", "error",
              error_text(lambda: h.requires_grad_(True)))

    with torch.inference_mode():
        inf = values([4, 8])
    w = values([4, 8], 2).requires_grad_()
    facts.add("inference tensor times a tensor that requires grad", "error",
              error_text(lambda: inf * w))
    facts.add("inference tensor plus a tensor that requires grad", "error",
              error_text(lambda: inf + w))
    facts.add("inference tensor plus a tensor that requires grad", "grad_fn",
              type((inf + w).grad_fn).__name__)
    facts.add("relu of an inference tensor, outside inference_mode", "error",
              error_text(lambda: inf.relu()))
    facts.add("add_ on an inference tensor outside inference_mode", "error",
              error_text(lambda: inf.add_(1.0)))

    y = values([4, 8]).requires_grad_()
    facts.add("backward of a non-scalar", "error", error_text(lambda: (y * 2.0).backward()))
    facts.add("backward of a tensor that does not require grad", "error",
              error_text(lambda: values([4, 8]).sum().backward()))
    facts.add("item of a [4, 8] tensor", "error", error_text(lambda: values([4, 8]).item()))


# --- checkpointing ---------------------------------------------------------------------------

def checkpoint_run(activation, segments, use_reentrant):
    """The MLP run through checkpoint_sequential: facts about what it keeps and reruns."""
    params = mlp(activation, None)
    batch = torch.rand(64, 512, generator=torch.Generator().manual_seed(1))
    # The reentrant variant gives gradients only through inputs that require grad.
    batch.requires_grad_(use_reentrant is True)
    classes = torch.arange(64) % 10
    calls = [0]
    fns = layer_fns(params, activation)

    def counted(fn):
        def run(h):
            calls[0] += 1
            return fn(h)
        return run

    layers = [counted(fn) for fn in fns]
    kwargs = {} if use_reentrant is None else {"use_reentrant": use_reentrant}
    alive = Alive()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with alive:
            if segments == 0:
                out = torch.nn.Sequential(*[Fn(f) for f in layers])(batch)
            else:
                out = cp.checkpoint_sequential(layers, segments, batch, **kwargs)
            loss = F.cross_entropy(out, classes)
        del out
        kept, count = alive.alive_bytes(exclude=[batch, loss] + params)
        forward_calls = calls[0]
        nodes = node_names(loss)
        loss.backward()
    return {
        "kept bytes excluding parameters, the batch and the loss": kept,
        "kept tensors": count,
        "graph_nodes": nodes,
        "layer runs in forward": forward_calls,
        "layer runs in backward": calls[0] - forward_calls,
        "warnings": sorted({str(w.message) for w in caught}),
    }


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, h):
        return self.fn(h)


@area
def checkpointing(facts):
    for activation in ["relu", "gelu"]:
        for segments in [0, 1, 2, 4]:
            for reentrant in [False, True]:
                if segments == 0 and reentrant:
                    continue
                label = ("no checkpoint" if segments == 0 else
                         f"checkpoint_sequential {segments} segments use_reentrant={reentrant}"
                         + (" (the batch requires grad)" if reentrant else ""))
                scenario = f"MLP {activation} batch 64: {label}"
                for fact, value in checkpoint_run(activation, segments, reentrant).items():
                    facts.add(scenario, fact, value)
    scenario = "checkpoint without use_reentrant"
    x = values([4, 8]).requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = cp.checkpoint(lambda a: a.relu(), x)
    facts.add(scenario, "warnings", sorted({str(w.message) for w in caught}))
    facts.add(scenario, "grad_fn (the variant chosen)", type(out.grad_fn).__name__)
    for reentrant in [False, True]:
        scenario = f"checkpoint use_reentrant={reentrant}, no input requires grad"
        w = values([3, 8]).requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = cp.checkpoint(lambda a: F.linear(a, w).relu(), values([4, 8]),
                                use_reentrant=reentrant)
            out.sum().backward() if out.requires_grad else None
        facts.add(scenario, "warnings", sorted({str(m.message) for m in caught}))
        facts.add(scenario, "output requires_grad", out.requires_grad)
        facts.add(scenario, "weight gets a gradient", w.grad is not None)
        x = values([4, 8]).requires_grad_()
        out = cp.checkpoint(lambda a: F.linear(a, w).relu(), x, use_reentrant=reentrant)
        facts.add(f"checkpoint use_reentrant={reentrant}, linear then relu", "graph_nodes",
                  node_names(out))


# --- optimizers ------------------------------------------------------------------------------

def opt_params():
    """Two parameters, [3, 4] and [4], with gradients of exactly representable values."""
    w = values([3, 4]).requires_grad_()
    b = values([4], 7).requires_grad_()
    grads = [values([3, 4], 11) / 4, values([4], 2) / 4]
    return [w, b], grads


def optimizer_cases():
    sgd, adam, adamw = torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW
    cases = []
    for foreach in [False, True]:
        impl = "for-each" if foreach else "for-loop"
        cases += [
            (f"SGD lr=0.1 {impl}", sgd, dict(lr=0.1, foreach=foreach)),
            (f"SGD lr=0.1 momentum=0.9 {impl}", sgd, dict(lr=0.1, momentum=0.9, foreach=foreach)),
            (f"SGD lr=0.1 momentum=0.9 dampening=0.5 {impl}", sgd,
             dict(lr=0.1, momentum=0.9, dampening=0.5, foreach=foreach)),
            (f"SGD lr=0.1 momentum=0.9 nesterov {impl}", sgd,
             dict(lr=0.1, momentum=0.9, nesterov=True, foreach=foreach)),
            (f"SGD lr=0.1 momentum=0.9 weight_decay=0.01 {impl}", sgd,
             dict(lr=0.1, momentum=0.9, weight_decay=0.01, foreach=foreach)),
            (f"Adam lr=0.1 {impl}", adam, dict(lr=0.1, foreach=foreach)),
            (f"Adam lr=0.1 weight_decay=0.01 {impl}", adam,
             dict(lr=0.1, weight_decay=0.01, foreach=foreach)),
            (f"AdamW lr=0.1 {impl}", adamw, dict(lr=0.1, foreach=foreach)),
        ]
    return cases


class Events(TorchDispatchMode):
    """The order in which a step creates state and writes parameters."""

    def __init__(self, params, optimizer):
        super().__init__()
        self.params = {p.untyped_storage().data_ptr(): i for i, p in enumerate(params)}
        self.optimizer = optimizer
        self.order = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = args[0] if args else None
        mutates = func._schema.is_mutable or func.__name__.endswith("_")
        if isinstance(first, torch.Tensor) and mutates:
            written = self.params.get(first.untyped_storage().data_ptr())
            if written is not None:
                self.note(f"write p{written}")
        if isinstance(first, (list, tuple)) and mutates:
            for t in first:
                written = self.params.get(t.untyped_storage().data_ptr()) if isinstance(
                    t, torch.Tensor) else None
                if written is not None:
                    self.note(f"write p{written}")
        return out

    def note(self, event):
        # What state exists when a parameter is first written.
        state = sorted(f"p{i}.{k}" for i, p in enumerate(self.optimizer.param_groups[0]["params"])
                       for k, v in self.optimizer.state.get(p, {}).items()
                       if isinstance(v, torch.Tensor) and k != "step")
        entry = f"{event} with state [{', '.join(state)}]"
        if not self.order or self.order[-1] != entry:
            self.order.append(entry)


class NewBlocks(TorchDispatchMode):
    """The storages the ops make while the mode is on, each rounded up to a multiple of 512 bytes
    as the CUDA caching allocator rounds blocks under 1 MiB, and when each is freed: a storage
    whose last reference went away between two ops is seen gone before the next op runs, so the
    order of the events is the order in which the allocator would see them."""

    def __init__(self, existing):
        super().__init__()
        self.existing = {t.untyped_storage().data_ptr() for t in existing}
        self.live = {}
        self.events = []

    def collect(self):
        for ptr, (size, ref) in list(self.live.items()):
            if ref.expired():
                del self.live[ptr]
                self.events.append((ptr, -size))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.collect()
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if not isinstance(t, torch.Tensor):
                continue
            s = t.untyped_storage()
            ptr = s.data_ptr()
            if ptr in self.existing or ptr in self.live or s.nbytes() == 0:
                continue
            size = (s.nbytes() + 511) // 512 * 512
            self.live[ptr] = (size, StorageWeakRef(s))
            self.events.append((ptr, size))
        return out

    def __exit__(self, *exc):
        self.collect()
        return super().__exit__(*exc)

    def peak(self, leave_out=()):
        live = peak = 0
        for ptr, size in self.events:
            if ptr not in leave_out:
                live += size
                peak = max(peak, live)
        return peak


def eight_params():
    """Eight parameters, [3, 4] and [4] four times, with gradients of exactly representable values."""
    params, grads = [], []
    for k in range(4):
        for shape, start in [([3, 4], 4 * k), ([4], 4 * k + 7)]:
            params.append(values(shape, start).requires_grad_())
            grads.append(values(shape, start + 11) / 4)
    return params, grads


@area
def optimizers(facts):
    for name, cls, kwargs in optimizer_cases():
        params, grads = opt_params()
        opt = cls(params, **kwargs)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        events = Events(params, opt)
        with events:
            opt.step()
        facts.add(name, "first step: parameter writes and the state existing at each",
                  events.order)
        state, steps = [], []
        for i, p in enumerate(params):
            for k, v in sorted(opt.state.get(p, {}).items()):
                if k == "step":
                    steps.append({"param": i, "device": v.device.type, "value": v.item()})
                elif isinstance(v, torch.Tensor):
                    state.append({"param": i, "key": k, "bytes": v.untyped_storage().nbytes(),
                                  "dtype": dtype_name(v)})
        facts.add(name, "state tensors after the first step", state)
        if steps:
            facts.add(name, "step counter after the first step", steps)
        for _ in range(2):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            opt.step()
        facts.add(name, "parameter values after 3 steps", {
            "abs_tol": 1e-6,
            "values": [v for p in params for v in p.detach().flatten().tolist()],
        })
    params, grads = opt_params()
    facts.add("torch.optim.Adam defaults", "lr, betas, eps, weight_decay",
              [torch.optim.Adam(params).defaults[k] for k in ["lr", "betas", "eps", "weight_decay"]])
    facts.add("torch.optim.AdamW defaults", "lr, betas, eps, weight_decay",
              [torch.optim.AdamW(params).defaults[k] for k in ["lr", "betas", "eps", "weight_decay"]])
    facts.add("torch.optim.SGD defaults", "lr, momentum, dampening, weight_decay, nesterov",
              [torch.optim.SGD(params).defaults[k]
               for k in ["lr", "momentum", "dampening", "weight_decay", "nesterov"]])
    for set_to_none in [True, False]:
        params, grads = opt_params()
        opt = torch.optim.SGD(params, lr=0.1)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.zero_grad(set_to_none=set_to_none)
        facts.add(f"zero_grad(set_to_none={set_to_none})", "grads",
                  [None if p.grad is None else p.grad.flatten().tolist() for p in params])
    from torch.optim.optimizer import _default_to_fused_or_foreach, \
        _get_foreach_kernels_supported_devices
    facts.add("foreach=None (the default)", "devices that get for-each",
              _get_foreach_kernels_supported_devices())
    params, _ = opt_params()
    facts.add("foreach=None (the default)", "cpu tensors get for-each",
              _default_to_fused_or_foreach(params, differentiable=False)[1])
    # An error while the first step creates state (an out-of-memory on the GPU): made here by
    # failing the last zeros_like of Adam's _init_group.
    for name, cls in [("Adam", torch.optim.Adam), ("AdamW", torch.optim.AdamW)]:
        params, grads = opt_params()
        before = [p.detach().clone() for p in params]
        opt = cls(params, lr=0.1, foreach=False)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        real, calls = torch.zeros_like, [0]

        def failing(*args, **kwargs):
            calls[0] += 1
            if calls[0] == 2 * len(params):
                raise RuntimeError("out of memory (injected)")
            return real(*args, **kwargs)

        torch.zeros_like = failing
        try:
            opt.step()
            failed = False
        except RuntimeError:
            failed = True
        finally:
            torch.zeros_like = real
        facts.add(f"{name} for-loop, the last state tensor fails to allocate", "step fails", failed)
        facts.add(f"{name} for-loop, the last state tensor fails to allocate",
                  "parameters unchanged", all(torch.equal(a, p) for a, p in zip(before, params)))
    # The first step's memory, for-loop: what it allocates above the parameters and gradients.
    # The step counters are CPU tensors unless capturable or fused (adam.py's _init_group), so on
    # CUDA they take no device memory; a CPU run of torch allocates them beside the state.
    for name, cls, kwargs in [("Adam lr=0.1", torch.optim.Adam, dict(lr=0.1)),
                              ("Adam lr=0.1 weight_decay=0.01", torch.optim.Adam,
                               dict(lr=0.1, weight_decay=0.01)),
                              ("AdamW lr=0.1", torch.optim.AdamW, dict(lr=0.1))]:
        params, grads = eight_params()
        opt = cls(params, foreach=False, **kwargs)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        blocks = NewBlocks(params + [p.grad for p in params])
        with blocks:
            opt.step()
        counters = {opt.state[p]["step"].untyped_storage().data_ptr() for p in params}
        scenario = f"{name} for-loop, 8 parameters"
        facts.add(scenario, "first step: peak of the new blocks (512-byte units), the step counters "
                  "left out", blocks.peak(leave_out=counters))
        facts.add(scenario, "first step: peak of the new blocks (512-byte units), with the step "
                  "counters a CPU run allocates", blocks.peak())


# --- GradScaler ------------------------------------------------------------------------------

@area
def gradscaler(facts):
    defaults = torch.amp.GradScaler("cpu")
    facts.add("GradScaler() defaults", "init_scale, growth_factor, backoff_factor, growth_interval",
              [defaults.get_scale(), defaults.get_growth_factor(), defaults.get_backoff_factor(),
               defaults.get_growth_interval()])
    # A scripted run: grads clean, inf or nan at each step, growth_interval 3.
    script = ["clean", "clean", "clean", "inf", "clean", "nan", "clean", "clean", "clean", "clean"]
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_factor=2.0,
                                  backoff_factor=0.5, growth_interval=3)
    p = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([p], lr=1.0)
    scales, skipped, trackers = [], [], []
    for i, kind in enumerate(script):
        scaler.scale(torch.ones(()))  # the loss: makes the scale on the first call
        g = torch.full((4,), float(scaler.get_scale()))
        if kind == "inf":
            g[1] = float("inf")
        if kind == "nan":
            g[2] = float("nan")
        before = p.detach().clone()
        p.grad = g
        scaler.step(opt)
        scaler.update()
        skipped.append(bool(torch.equal(before, p.detach())))
        scales.append(scaler.get_scale())
        trackers.append(int(scaler._growth_tracker.item()))
    scenario = "growth_interval=3, init 1024: " + " ".join(script)
    facts.add(scenario, "scale after each update", scales)
    facts.add(scenario, "growth tracker after each update", trackers)
    facts.add(scenario, "optimizer step skipped", skipped)
    # unscale_ divides by the scale once.
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    p = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([p], lr=1.0)
    scaler.scale(torch.ones(()))
    p.grad = torch.tensor([8.0, 4.0, 2.0, 1.0])
    scaler.unscale_(opt)
    facts.add("unscale_ at scale 8", "grads", p.grad.tolist())
    facts.add("unscale_ twice before update", "error", error_text(lambda: scaler.unscale_(opt)))
    facts.add("update without a step", "error",
              error_text(lambda: torch.amp.GradScaler("cpu").update()))
    # growth that would overflow f32 keeps the scale.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1)
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    scaler.scale(torch.ones(()))
    p.grad = torch.zeros(1)
    scaler.step(opt)
    scaler.update()
    facts.add("growth past the largest f32", "scale after update", scaler.get_scale())


# --- history ---------------------------------------------------------------------------------

@area
def history(facts):
    """_record_memory_history's options and _snapshot's keys, as far as they run without a GPU:
    the option checks run before CUDA is touched, and _snapshot() answers on the CPU."""
    import inspect
    import sys as _sys
    mem = torch.cuda.memory
    params = inspect.signature(mem._record_memory_history).parameters
    for name in ["enabled", "context", "stacks", "max_entries", "clear_history", "skip_actions",
                 "record_pinned_host_memory", "record_cuda"]:
        default = params[name].default
        facts.add("_record_memory_history", f"default {name}",
                  "sys.maxsize" if default == _sys.maxsize else default)
    cases = [
        ("enabled='everything'", dict(enabled="everything")),
        ("context='free'", dict(context="free")),
        ("stacks='cpp'", dict(stacks="cpp")),
        ("enabled='everything', context='free'", dict(enabled="everything", context="free")),
        ("enabled=None, record_pinned_host_memory=True",
         dict(enabled=None, record_pinned_host_memory=True)),
        ("enabled=None, record_pinned_host_memory=True, context='free'",
         dict(enabled=None, record_pinned_host_memory=True, context="free")),
    ]
    for scenario, kwargs in cases:
        facts.add(scenario, "error", error_text(lambda: mem._record_memory_history(**kwargs)))
    snapshot = mem._snapshot()
    facts.add("_snapshot() without recording", "keys", list(snapshot))
    facts.add("_snapshot() without recording", "host_segments", snapshot["host_segments"])
    facts.add("_snapshot() without recording", "host_traces", snapshot["host_traces"])


if __name__ == "__main__":
    sys.exit(main())
