"""Past one device's memory: what each rank holds under each parallel.strategy, and the
activations that checkpointing saves.

The built-in model made wide and deep (hidden 768, 18 blocks: 23 million parameters), trained
with AdamW (two numbers of state per weight) by 2 and 4 gloo processes on this CPU. After a few
optimizer steps each rank counts the bytes of the tensors it holds: its parameters, their
gradients and the optimizer state (under fsdp, its shards; under zero, the state of its share
of the parameters); the table gives the largest rank's, against ddp's, and the time of a step
against ddp's (medians over the steps, each on one batch of the training loader collected
beforehand, the same for every strategy, so that only the step is timed; the processes share
2 cores, so the times say what the strategies cost in exchanges, not how they scale). Then one
forward and backward pass of the same model on 2 causal sets of 1,024 elements, in a fresh
process each, without and with `model.activation_checkpointing`: the peak of the process's
resident memory above what it held before the pass (glibc told to return every freed block of
64 kB or more, so that the peak is that of live memory; the gradients are allocated
beforehand), and the bytes autograd saved for the backward pass.

    python bench/memory.py [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.parallel import distributed  # noqa: E402

WIDE = ["model.hidden_channels=768", "model.num_layers=18", "model.head_channels=[768]"]
SMOKE = ["model.hidden_channels=64", "model.num_layers=2", "model.head_channels=[64]"]
STRATEGIES = ("ddp", "zero", "fsdp")
WORLD_SIZES = (2, 4)
TARGETS = {"zero": 0.05, "fsdp": 0.10}  # above 1/W of ddp's, at most
ACTIVATION_TARGET = 0.5


def config(tmp: str, *extra: str, wide: list[str] = WIDE) -> qg.Config:
    return qg.load_config(
        ROOT / "configs" / "train_ddp.yaml",
        [
            f"data.root={tmp}/data", "data.num_graphs=400", "data.num_points=[32, 64]",
            f"training.path={tmp}/run", "training.device=cpu", "training.batch_size=4",
            "parallel.backend=gloo", "log_level=WARNING", *wide, *extra,
        ],
    )  # fmt: skip


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _nbytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


def held(rank: int, world_size: int, config: qg.Config, steps: int) -> dict[str, float]:
    """This rank's bytes of parameters, gradients and optimizer state after ``steps`` steps,
    and its seconds per step."""
    trainer = qg.TrainerDDP(rank, config)
    loader, _, _ = trainer.prepare_dataloaders()
    loader.sampler.set_epoch(0)
    batches = [batch for batch, _ in zip(loader, range(steps + 1), strict=False)]
    trainer.train_epoch(batches[:1])  # the optimizer's state is made at its first step
    times = []
    for batch in batches[1:]:
        distributed.barrier()
        start = time.perf_counter()
        trainer.train_epoch([batch])
        times.append(time.perf_counter() - start)
    optimizer = trainer.optimizer
    local = getattr(optimizer, "optim", optimizer)  # zero: the optimizer of this rank's share
    state = [v for s in local.state.values() for v in s.values() if torch.is_tensor(v)]
    params = list(trainer.model.parameters())
    result = {
        "parameters": _nbytes(params),
        "gradients": _nbytes(p.grad for p in params if p.grad is not None),
        "optimizer": _nbytes(state),
        "step_s": statistics.median(times),
        "count": sum(p.numel() for p in params),  # a sharded parameter's numel is its whole
    }
    trainer.close()
    return result


def activation_peak(checkpointing: bool, wide: list[str] = WIDE) -> dict[str, float]:
    """In this (fresh) process: one training pass on 2 causal sets of 1,024 elements."""
    from torch_geometric.data import Batch

    from QuantumGravPy.data.sources.datasets import dataset_from_config
    from QuantumGravPy.models import build_model

    with tempfile.TemporaryDirectory() as tmp:
        checkpointed = f"model.activation_checkpointing={str(checkpointing).lower()}"
        cfg = config(tmp, "data.num_graphs=4", "data.num_points=[1024, 1024]", checkpointed,
                     wide=wide)  # fmt: skip
        dataset = dataset_from_config(cfg.data, progress=False)
        batch = Batch.from_data_list([dataset[0], dataset[1]])
    torch.manual_seed(0)
    model = build_model(cfg.model, batch.num_node_features, {"y": (3, "graph")}).train()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # allocated before, as after a first step
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}  # what autograd keeps: each memory block once, no weights

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) from here on
    before = _status("VmRSS")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(batch)
        torch.nn.functional.cross_entropy(out, batch.y).backward()
    return {"peak": _status("VmHWM") - before, "saved": sum(storages.values())}


def _status(field: str) -> int:
    """Bytes of a memory field of /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--activation", choices=["plain", "checkpointed"])
    args = smoke.parse(parser, steps=1)
    wide = SMOKE if args.smoke else WIDE
    if args.activation:  # the child process of the activation measurement
        print(json.dumps(activation_peak(args.activation == "checkpointed", wide)))
        return
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        qg.prepare_run(config(tmp, wide=wide), overwrite=True)  # the dataset, once
        for world_size in WORLD_SIZES:
            for strategy in STRATEGIES:
                cfg = config(tmp, f"parallel.strategy={strategy}", wide=wide)
                ranks = qg.spawn(held, world_size, cfg, args.steps, backend="gloo")
                rows[world_size, strategy] = ranks
    activations = {}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    for variant in ("plain", "checkpointed"):
        out = subprocess.run(
            [sys.executable, __file__, "--activation", variant, *(["--smoke"] * args.smoke)],
            env=env, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        activations[variant] = json.loads(out.strip().splitlines()[-1])

    count = rows[2, "ddp"][0]["count"]
    print(
        f"The built-in model, hidden 768 x 18 blocks: {count / 1e6:.1f} million parameters, "
        f"AdamW; per rank after {args.steps + 1} steps, the largest rank's bytes (MB)\n"
    )
    print(
        "| processes | strategy | parameters | gradients | optimizer state | all three | "
        "x ddp's | s/step x ddp's |"
    )
    print("|---|---|---|---|---|---|---|---|")
    verdicts = []
    for (world_size, strategy), ranks in rows.items():
        worst = {k: max(r[k] for r in ranks) for k in ("parameters", "gradients", "optimizer")}
        total = max(r["parameters"] + r["gradients"] + r["optimizer"] for r in ranks)
        ddp = rows[world_size, "ddp"]
        ddp_total = max(r["parameters"] + r["gradients"] + r["optimizer"] for r in ddp)
        step = statistics.median(r["step_s"] for r in ranks)
        ddp_step = statistics.median(r["step_s"] for r in ddp)
        print(
            f"| {world_size} | {strategy} | {worst['parameters'] / 1e6:.0f} | "
            f"{worst['gradients'] / 1e6:.0f} | {worst['optimizer'] / 1e6:.0f} | "
            f"{total / 1e6:.0f} | {total / ddp_total:.3f} | {step / ddp_step:.2f} |"
        )
        if strategy == "zero":
            ddp_state = max(r["optimizer"] for r in ddp)
            ratio = worst["optimizer"] / ddp_state
            verdicts.append((f"zero, {world_size} processes: optimizer state {ratio:.3f} of "
                             f"ddp's", ratio <= 1 / world_size + TARGETS["zero"],
                             f"<= 1/{world_size} + {TARGETS['zero']}"))  # fmt: skip
        if strategy == "fsdp":
            ratio = total / ddp_total
            what = f"fsdp, {world_size} processes: all three {ratio:.3f} of ddp's"
            limit = 1 / world_size + TARGETS["fsdp"]
            verdicts.append((what, ratio <= limit, f"<= 1/{world_size} + {TARGETS['fsdp']}"))
    plain, checkpointed = activations["plain"], activations["checkpointed"]
    print("\nOne training pass on 2 causal sets of 1,024 elements, the same model (MB)\n")
    print(
        "| model.activation_checkpointing | peak resident memory of the pass | saved by autograd |"
    )
    print("|---|---|---|")
    for name, a in activations.items():
        print(f"| {name == 'checkpointed'} | {a['peak'] / 1e6:.0f} | {a['saved'] / 1e6:.0f} |")
    ratio = checkpointed["peak"] / plain["peak"]
    verdicts.append((f"activation checkpointing: peak {ratio:.2f} of the plain pass's",
                     ratio <= ACTIVATION_TARGET, f"<= {ACTIVATION_TARGET}"))  # fmt: skip
    print()
    for what, ok, target in verdicts:
        print(f"- {what}: target {target}: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
