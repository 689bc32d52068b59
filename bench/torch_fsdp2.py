"""What each rank of torch 2.15's own FSDP2 (`fully_shard`) holds, on the CPU (chapter 15).

Two ranks, the gloo backend, one process each. The model: two Linear layers without bias,
64 -> 128 -> 64 (16,384 float32 parameters, 64 KiB). `fully_shard` on each layer and on the
model, Adam (torch's defaults), one step on each rank's own batch. Printed per rank: the bytes of
its parameter shards (each parameter a DTensor sharded on dim 0; `to_local()` is the rank's
shard), of their gradients, and of Adam's state (`exp_avg`, `exp_avg_sq` and `step`), after the
step. Chapter 15's `fsdp_step` and gpumem's test `fsdp2_per_rank_bytes_match_torch` compare with
these numbers.

Run with torch 2.15.0 (any machine, no GPU):  python bench/torch_fsdp2.py > bench/torch_fsdp2.txt
Its output is bench/torch_fsdp2.txt, which chapter 15's page includes.
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard

WORLD = 2


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def run(rank, init_file, queue):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128, bias=False),
        torch.nn.Linear(128, 64, bias=False),
    )
    full = nbytes(model.parameters())
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters())
    torch.manual_seed(1 + rank)  # each rank its own batch
    x = torch.randn(8, 64)
    model(x).square().mean().backward()
    optimizer.step()

    params = [p.to_local() for p in model.parameters()]
    grads = [p.grad.to_local() for p in model.parameters()]
    moments, steps = [], []
    for state in optimizer.state.values():
        moments += [state["exp_avg"].to_local(), state["exp_avg_sq"].to_local()]
        steps.append(state["step"])
    shapes = ", ".join(str(tuple(p.shape)) for p in params)
    queue.put(
        (
            rank,
            f"rank {rank}: model {full} B whole; parameter shards {shapes}: {nbytes(params)} B; "
            f"gradients {nbytes(grads)} B; Adam exp_avg + exp_avg_sq {nbytes(moments)} B; "
            f"step {nbytes(steps)} B ({len(steps)} {steps[0].dtype} scalars on {steps[0].device})",
        )
    )
    dist.destroy_process_group()


def main():
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, backend gloo, {WORLD} ranks on the CPU")
    print("fully_shard(Linear(64, 128, bias=False)), fully_shard(Linear(128, 64, bias=False)), "
          "fully_shard(model); torch.optim.Adam; one step")
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        init_file = os.path.join(tmp, "init")
        procs = [ctx.Process(target=run, args=(r, init_file, queue)) for r in range(WORLD)]
        for p in procs:
            p.start()
        lines = sorted(queue.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(timeout=300)
            if p.exitcode != 0:
                sys.exit(f"a rank failed (exit code {p.exitcode})")
    for _, line in lines:
        print(line)


if __name__ == "__main__":
    main()
