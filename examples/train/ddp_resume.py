"""A minimal PyTorch DDP training program that survives restarts (gpufabric's resume contract).

Run it under torchrun, as ``gpufabric job --kind pytorchjob`` (or ``--kind trainjob``) does:

    gpufabric job --stack prod-ib --tenant research --kind pytorchjob --name ddp-demo \\
        --entrypoint examples/train --command "torchrun ddp_resume.py --steps 2000"

On start, rank 0 finds the newest complete checkpoint in ``$GPUFABRIC_CHECKPOINT_DIR``
(checkpoint.py says what complete means) and every rank loads that same step; each node's
first process logs ``resumed from step N`` (or ``starting from step 0``), so
``kubectl logs`` shows whether a restarted job resumed. Only rank 0 writes checkpoints.

torch is imported in :func:`main` only: the resume logic (:func:`run`) is plain Python and is
tested without it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

from checkpoint import CheckpointDir, CheckpointError


class Model(Protocol):
    """What :func:`run` needs of the thing it trains."""

    def train_step(self, step: int) -> float: ...

    def save(self, f: BinaryIO) -> None: ...

    def load(self, path: str) -> None: ...


def run(
    ckpt: CheckpointDir,
    model: Model,
    steps: int,
    save_every: int,
    agree: Callable[[int], int] = lambda step: step,
    log: Callable[[str], None] = print,
) -> int:
    """Train steps ``start+1 .. steps``, where ``start`` is the newest complete checkpoint's
    step (rank 0 decides, ``agree`` hands its choice to every rank); returns ``start``."""
    found = ckpt.latest() if ckpt.rank == 0 else None
    start = agree(found.step if found else 0)
    if start > 0:
        chosen = found if found is not None and found.step == start else ckpt.load(start)
        model.load(str(chosen.path))
        log(f"rank {ckpt.rank}: resumed from step {start} ({ckpt.path})")
    else:
        log(f"rank {ckpt.rank}: no complete checkpoint in {ckpt.path}: starting from step 0")
    for step in range(start + 1, steps + 1):
        loss = model.train_step(step)
        if step % save_every == 0 or step == steps:
            ckpt.save(step, model.save, {"loss": loss})
            if ckpt.rank == 0:
                log(f"rank 0: saved step {step} (loss {loss:.6f})")
    return start


class TorchModel:
    """A linear regression under DistributedDataParallel: small, deterministic per step."""

    def __init__(self, torch: Any, rank: int, local_rank: int) -> None:
        self.torch = torch
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(local_rank)
        self.device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
        torch.manual_seed(0)
        net = torch.nn.Linear(1024, 1).to(self.device)
        ids = [local_rank] if cuda else None
        self.net = torch.nn.parallel.DistributedDataParallel(net, device_ids=ids)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.rank = rank

    def train_step(self, step: int) -> float:
        gen = self.torch.Generator().manual_seed(step * 65_537 + self.rank)
        x = self.torch.randn(256, 1024, generator=gen).to(self.device)
        y = x.sum(dim=1, keepdim=True) / 32
        loss = self.torch.nn.functional.mse_loss(self.net(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return float(loss.item())

    def save(self, f: BinaryIO) -> None:
        state = {"model": self.net.module.state_dict(), "optim": self.opt.state_dict()}
        self.torch.save(state, f)

    def load(self, path: str) -> None:
        state = self.torch.load(path, map_location=self.device, weights_only=True)
        self.net.module.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000, help="train until this step (1000)")
    p.add_argument("--save-every", type=int, default=100, help="checkpoint period (100)")
    p.add_argument("--keep", type=int, default=3, help="complete checkpoints kept (3)")
    args = p.parse_args(argv)
    for opt in ("steps", "save_every", "keep"):
        if getattr(args, opt) < 1:
            p.error(f"--{opt.replace('_', '-')}: {getattr(args, opt)} is not a number >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    try:
        ckpt = CheckpointDir.from_env(rank=rank, keep=args.keep)
    except CheckpointError as e:
        print(f"ddp_resume: {e}", file=sys.stderr)
        return 2
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("ddp_resume: needs PyTorch (run it in a PyTorch image)", file=sys.stderr)
        return 2
    if "MASTER_ADDR" not in os.environ:
        print("ddp_resume: MASTER_ADDR is not set: run it under torchrun", file=sys.stderr)
        return 2
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")

    def agree(step: int) -> int:
        box = [step]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])

    def log(line: str) -> None:
        if local_rank == 0:
            print(line, flush=True)

    try:
        run(ckpt, TorchModel(torch, rank, local_rank), args.steps, args.save_every, agree, log)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
