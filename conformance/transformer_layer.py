"""What one GPT layer saves for backward in torch 2.15, tensor by tensor (chapter 12).

Runs a GPT layer (LayerNorm, fused QKV, causal attention with softmax and dropout, projection,
dropout, residual, LayerNorm, 4h MLP with GELU, dropout, residual) in bf16 on the CPU with the
pinned torch, walks the autograd graph and lists every distinct storage a node saved, leaving out
the parameters, the causal-mask buffer (made once, shared by every layer) and 0-dim CPU scalars.
Writes conformance/goldens/transformer_layer.json (sorted keys, trailing newline), in the
conformance suite's golden format: one fact per shape and term.

    /root/.cache/gpumem-workbook/torch-2.15.0/bin/python conformance/transformer_layer.py
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

# (s, b, h, a): sequence length, micro-batch, hidden size, heads.
SHAPES = [(128, 2, 128, 4), (256, 2, 128, 4), (512, 1, 128, 8)]
DTYPE = torch.bfloat16
P_DROP = 0.1


class Layer(torch.nn.Module):
    def __init__(self, h, a, s):
        super().__init__()
        self.h, self.a = h, a
        self.ln1 = torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.proj = torch.nn.Linear(h, h)
        self.ln2 = torch.nn.LayerNorm(h)
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h)
        self.register_buffer("causal", torch.ones(s, s, dtype=torch.bool).triu(1))

    def forward(self, x):
        b, s, h = x.shape
        a, d = self.a, h // self.a
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, a, d).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(self.causal, float("-inf"))
        probs = F.dropout(F.softmax(scores, dim=-1), P_DROP, self.training)
        context = (probs @ v).transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(context), P_DROP, self.training)
        m = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + F.dropout(m, P_DROP, self.training)


def saved_storages(out, excluded):
    """{storage address: (bytes, [(node, attribute, dtype, shape)])} of what the graph saved."""
    found = {}
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in sorted(dir(node)):
            if not attr.startswith("_saved_"):
                continue
            value = getattr(node, attr)
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                continue  # 0-dim wrapped numbers live on the CPU on every device
            storage = value.untyped_storage()
            if storage.data_ptr() in excluded:
                continue
            entry = found.setdefault(storage.data_ptr(), [storage.nbytes(), []])
            entry[1].append((node.name(), attr[len("_saved_"):], str(value.dtype), list(value.shape)))
        stack.extend(n for n, _ in node.next_functions)
    return found


def term(item):
    """The paper's name for one saved storage, from the node that saved it."""
    node, attr, dtype, shape = item
    names = {
        ("NativeLayerNormBackward0", "input"): "layernorm input",
        ("NativeLayerNormBackward0", "result1"): "layernorm mean",
        ("NativeLayerNormBackward0", "result2"): "layernorm rstd",
        ("AddmmBackward0", "mat1"): "linear input",
        ("BmmBackward0", "self"): "bmm left operand",
        ("BmmBackward0", "mat2"): "bmm right operand",
        ("SoftmaxBackward0", "result"): "softmax output",
        ("MulBackward0", "other"): "dropout mask",
        ("GeluBackward0", "self"): "gelu input",
    }
    return names[(node, attr)]


def measure(s, b, h, a):
    torch.manual_seed(0)
    layer = Layer(h, a, s).to(DTYPE).train()
    excluded = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    excluded |= {t.untyped_storage().data_ptr() for t in layer.buffers()}
    x = torch.randn(b, s, h, dtype=DTYPE, requires_grad=True)
    out = layer(x)
    storages = saved_storages(out, excluded)
    rows = []
    for nbytes, items in storages.values():
        names = sorted({term(i) for i in items})
        dtypes = sorted({i[2] for i in items})
        rows.append({"bytes": nbytes, "terms": names, "dtype": dtypes[0],
                     "shape": max((i[3] for i in items), key=len)})
    rows.sort(key=lambda r: (r["terms"], r["bytes"]))
    return rows


def main():
    facts = []
    for s, b, h, a in SHAPES:
        rows = measure(s, b, h, a)
        scenario = f"s={s} b={b} h={h} a={a}"
        facts.append({"scenario": scenario, "fact": "saved_storages", "value": rows})
        facts.append({"scenario": scenario, "fact": "saved_bytes",
                      "value": sum(r["bytes"] for r in rows)})
    golden = {
        "area": "transformer_layer",
        "torch_version": torch.__version__.split("+")[0],
        "generated_by": "conformance/transformer_layer.py",
        "device": "cpu",
        "dtype": "bfloat16",
        "dropout_p": P_DROP,
        "facts": facts,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens",
                        "transformer_layer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(golden, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
