"""DDP scaling on this machine: training epoch time with 1 and 2 processes at the same global batch.

Compared, each at global batches 32 and 128 on the default model and causal-set data:
  - qg.Trainer, one process (torch's default threads: all cores);
  - qg.TrainerDDP, two processes (cores / 2 threads each), gradients averaged through shared
    memory (the default on one CPU machine) and through gloo;
  - the same two processes with no gradient exchange at all: the ceiling on this machine;
  - a hand-written DDP loop (DistributedSampler + DistributedDataParallel), two processes, with
    one thread each as a careful user would set, and with torch's default threads;
  - PyTorch Lightning's Trainer with strategy "ddp", two processes (if installed).
And validation of 2,800 graphs by rank 0 alone against sharded over the two ranks.

Epoch time is the training pass, data loading included, as in history.csv. Configurations run
alternately, several rounds, and the medians are compared, since the machine is shared.

    python bench/ddp_scaling.py [--rounds 2] [--epochs 3] [--graphs 4000] [--smoke]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lightning_helpers  # noqa: E402
import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data import make_loader  # noqa: E402
from QuantumGravPy.parallel import distributed  # noqa: E402

TARGET = 1.6


def _median_epoch(run_epoch, epochs: int) -> float:
    run_epoch()  # warm-up
    times = []
    for _ in range(epochs):
        distributed.barrier()
        start = time.perf_counter()
        run_epoch()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def single(rank, world_size, config, epochs):
    torch.set_num_threads(distributed.available_cores())  # a plain single process's default
    trainer = qg.Trainer(config)
    loader, _, _ = trainer.prepare_dataloaders()
    return _median_epoch(lambda: trainer.train_epoch(loader), epochs)


def ours(rank, world_size, config, epochs, exchange=True):
    trainer = qg.TrainerDDP(rank, config)
    if not exchange:
        # Each rank trains alone on its shard: what two processes could gain with a gradient
        # exchange that cost nothing. The ceiling for any DDP implementation on this machine.
        trainer.ddp_model = trainer.model
    loader, _, _ = trainer.prepare_dataloaders()

    def epoch():
        trainer.on_epoch_start(loader)
        trainer.train_epoch(loader)
        trainer.state.epoch += 1

    seconds = _median_epoch(epoch, epochs)
    trainer.close()
    return seconds


def hand_written(rank, world_size, config, epochs, threads):
    if threads:
        torch.set_num_threads(threads)
    trainer = qg.Trainer(config)  # only to get the same data split and initial model
    train_loader, _, _ = trainer.prepare_dataloaders()
    sampler = DistributedSampler(train_loader.dataset, shuffle=True, seed=0)
    loader = make_loader(
        train_loader.dataset, batch_size=config.training.batch_size, sampler=sampler
    )
    model = DistributedDataParallel(copy.deepcopy(trainer.model))
    optimizer = torch.optim.AdamW(model.parameters(), **config.training.optimizer.kwargs)
    state = {"epoch": 0}

    def epoch():
        sampler.set_epoch(state["epoch"])
        for batch in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
            loss.backward()
            optimizer.step()
        state["epoch"] += 1

    return _median_epoch(epoch, epochs)


def lightning_ddp(rank, world_size, config, epochs):
    """Lightning's Trainer with strategy "ddp" on the process group this job already has."""
    # Lightning joins processes started by someone else when these are set.
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), NODE_RANK="0"
    )
    trainer = qg.Trainer(config)  # only to get the same data split and initial model
    train_loader, _, _ = trainer.prepare_dataloaders()
    # Lightning puts its own DistributedSampler in place of the shuffling.
    loader = make_loader(train_loader.dataset, batch_size=config.training.batch_size, shuffle=True)
    module = lightning_helpers.module(
        copy.deepcopy(trainer.model), torch.optim.AdamW, config.training.optimizer.kwargs
    )
    seconds: list[float] = []
    fit = lightning_helpers.trainer(epochs + 1, seconds, devices=world_size, strategy="ddp")
    fit.fit(module, train_dataloaders=loader)
    return statistics.median(seconds[1:])  # the first epoch is the warm-up


def validation(rank, world_size, config, repeats):
    times = {}
    for mode in ("rank0", "sharded"):
        cfg = qg.config.config_from_dict(
            {**qg.config.config_to_dict(config), "validation": {"mode": mode, "batch_size": 256}}
        )
        trainer = qg.TrainerDDP(rank, cfg)
        train_subset = trainer.prepare_dataloaders()[0].dataset  # 2,800 graphs to evaluate
        loader = trainer.make_eval_loader(train_subset, 256)
        times[mode] = _median_epoch(lambda t=trainer, lo=loader: t.validate(lo), repeats)
        trainer.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--graphs", type=int, default=4000)
    args = smoke.parse(parser, rounds=1, epochs=1, batches=[32], graphs=300)

    cores = distributed.available_cores()
    with tempfile.TemporaryDirectory() as tmp:

        def config(batch: int, **extra: str):
            overrides = [
                f"data.root={tmp}/data",
                f"data.num_graphs={args.graphs}",
                f"training.batch_size={batch}",
                f"training.path={tmp}/run",
                "training.device=cpu",
                "log_level=WARNING",
                "parallel.backend=gloo",
            ] + [f"{k.replace('__', '.')}={v}" for k, v in extra.items()]
            return qg.load_config(ROOT / "configs" / "train_ddp.yaml", overrides)

        qg.prepare_run(config(32), overwrite=True)  # the data cache, built once
        rows = []
        for batch in args.batches:
            runs = {
                "qg.Trainer, 1 process": lambda b=batch: qg.spawn(
                    single, 1, config(b), args.epochs, backend="gloo"
                )[0],
                "qg.TrainerDDP, 2 processes, shared memory": lambda b=batch: qg.spawn(
                    ours, 2, config(b // 2), args.epochs, backend="gloo"
                )[0],
                "qg.TrainerDDP, 2 processes, gloo": lambda b=batch: qg.spawn(
                    ours,
                    2,
                    config(b // 2, parallel__shared_memory="false"),
                    args.epochs,
                    backend="gloo",
                )[0],
                # the ranks' weights drift apart without an exchange: no replica check
                "ceiling: 2 processes, no gradient exchange": lambda b=batch: qg.spawn(
                    ours,
                    2,
                    config(b // 2, monitor__check_replicas_every="0"),
                    args.epochs,
                    False,
                    backend="gloo",
                )[0],
                "hand-written DDP, 2 processes, 1 thread each": lambda b=batch: qg.spawn(
                    hand_written, 2, config(b // 2), args.epochs, 1, backend="gloo"
                )[0],
                "hand-written DDP, 2 processes, default threads": lambda b=batch: qg.spawn(
                    hand_written, 2, config(b // 2), args.epochs, cores, backend="gloo"
                )[0],
                **(
                    {
                        "Lightning Trainer, strategy ddp, 2 processes": lambda b=batch: qg.spawn(
                            lightning_ddp, 2, config(b // 2), args.epochs, backend="gloo"
                        )[0]
                    }
                    if lightning_helpers.available()
                    else {}
                ),
            }
            samples: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, run in runs.items():
                    samples[name].append(run())
            base = statistics.median(samples["qg.Trainer, 1 process"])
            for name, values in samples.items():
                median = statistics.median(values)
                rows.append((batch, name, median, base / median))
        val = qg.spawn(validation, 2, config(16), args.epochs, backend="gloo")[0]

    print(
        f"{cores} cores, torch {torch.__version__}; medians of {args.rounds} alternating rounds "
        f"of {args.epochs} epochs; speed-up against one process at the same global batch\n"
    )
    print("| global batch | configuration | s/epoch | speed-up |")
    print("|---|---|---|---|")
    for batch, name, seconds, speedup in rows:
        print(f"| {batch} | {name} | {seconds:.3f} | {speedup:.2f}x |")
    print()
    for batch, name, _, speedup in rows:
        if name.endswith("shared memory"):
            verdict = "met" if speedup >= TARGET else "MISSED"
            print(f"- global batch {batch}: speed-up {speedup:.2f} (target >= {TARGET}: {verdict})")
    ratio = val["rank0"] / val["sharded"]
    print(
        f"\n| validation of 2,800 graphs, 2 processes | seconds |\n|---|---|\n"
        f"| `validation.mode: rank0` | {val['rank0']:.3f} |\n"
        f"| `validation.mode: sharded` | {val['sharded']:.3f} ({ratio:.2f}x faster) |"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
