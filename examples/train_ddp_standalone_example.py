"""Distributed training with TrainerDDP, start to finish, in one script.

    python examples/train_ddp_standalone_example.py [--config configs/train_ddp.yaml]
        [--world-size N] [--overwrite | --resume] [key=value ...]

Spawns N processes (default: the number of GPUs, or 2 on a CPU-only machine). With GPUs, rank r
trains on cuda:LOCAL_RANK over NCCL; without, on the CPU over gloo. Under torchrun the same
script joins the job torchrun started instead of spawning:

    torchrun --nproc_per_node=2 examples/train_ddp_standalone_example.py

With --resume it continues the run in training.path from its last checkpoint (on any number of
processes that keeps the global batch), as a preempted cluster job would.
"""

from __future__ import annotations

import argparse
import sys

import torch

import QuantumGravPy as qg
from QuantumGravPy.parallel.distributed import process_env


def worker(rank: int, world_size: int, config: qg.Config, overwrite: bool, resume: bool) -> dict:
    """What every process runs; the process group already exists when it is called."""
    # With resume, rank 0 reads checkpoints/last.pt and every rank restores the same state.
    trainer = qg.TrainerDDP(rank, config, overwrite=overwrite, resume=resume)
    try:
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        history = trainer.run_training(train_loader, val_loader)  # the same on every rank
        test = trainer.run_test(test_loader)  # exact, whatever the world size
    finally:
        trainer.close()
    return {"history": history, "test": test}


def main() -> int:
    parser = argparse.ArgumentParser(description="Distributed training with qg.TrainerDDP")
    parser.add_argument("--config", default="configs/train_ddp.yaml")
    parser.add_argument(
        "--world-size",
        type=int,
        default=torch.cuda.device_count() or 2,
        help="processes to spawn (default: the GPU count, or 2 without GPUs)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run")
    parser.add_argument("--resume", action="store_true", help="continue an earlier run")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()

    config = qg.load_config(args.config, args.overrides)
    env = process_env()  # set when torchrun or srun started this process
    if env is None:
        # Once, before any rank starts: refuse an occupied run directory (or a checkpoint the
        # config does not fit) and build the data cache.
        qg.prepare_run(
            config, overwrite=args.overwrite, resume=args.resume, world_size=args.world_size
        )
    # Spawns the ranks with torch.multiprocessing (start method "spawn"), or joins torchrun's
    # job. If any rank fails, every rank ends and the error names the failing one.
    result = qg.run_distributed(
        worker, config, config, args.overwrite, args.resume, world_size=args.world_size
    )
    if env is not None and env.rank != 0:
        return 0
    world_size = env.world_size if env else args.world_size

    print(f"\n{world_size} processes, global batch {config.training.batch_size * world_size}")
    print(f"{'epoch':>5} {'train_loss':>10} {'val_loss':>9} {'val_acc':>8}")
    for row in result["history"]:
        print(
            f"{row['epoch']:>5} {row['train_loss']:>10.4f} {row['val_loss']:>9.4f} "
            f"{row['val_accuracy']:>8.4f}"
        )
    test = result["test"]
    print(f"test accuracy {test['test_accuracy']:.4f}, test loss {test['test_loss']:.4f}")
    print(f"run directory: {config.run_dir}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except qg.QGError as e:  # bad config, occupied run directory, a failed rank: one line
        if getattr(e, "traceback", None):
            print(e.traceback, file=sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)  # as qg does
