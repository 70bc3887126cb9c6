"""What ``parallel.invariant`` needs of the rest of the config (docs/reproducibility.md)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def invariant_refusals(config: Any) -> None:  # a Config (schema.py calls this)
    """What ``parallel.invariant`` cannot make independent of the number of processes, refused
    in one line each."""
    t, shards = config.training, config.parallel.shards
    if config.parallel.strategy != "ddp":
        raise ConfigError(
            f"parallel.invariant: only with parallel.strategy ddp (found "
            f"{config.parallel.strategy})"
        )
    if t.batch_nodes is not None:
        raise ConfigError(
            "parallel.invariant: not with training.batch_nodes (its batches hold varying numbers "
            "of graphs; invariance cuts fixed micro-batches): use training.global_batch_size"
        )
    if t.global_batch_size is None:
        raise ConfigError(
            "parallel.invariant: needs training.global_batch_size (the graphs per batch over all "
            f"processes, a multiple of parallel.shards {shards}), not a per-process batch_size"
        )
    if t.global_batch_size % shards:
        raise ConfigError(
            f"parallel.invariant: training.global_batch_size {t.global_batch_size} is not a "
            f"multiple of parallel.shards {shards} (each batch is cut into {shards} equal "
            "micro-batches)"
        )
    if config.model.norm == "batch":
        raise ConfigError(
            "parallel.invariant: not with model.norm batch (BatchNorm's running statistics "
            "follow the micro-batches each process sees); use graph, layer or none"
        )
    if config.augmentation.preset is not None and config.augmentation.seeding == "per_rank":
        raise ConfigError(
            "parallel.invariant: not with augmentation.seeding per_rank (its draws depend on the "
            "rank); use per_sample"
        )
    if config.validation.mode != "rank0":
        raise ConfigError(
            "parallel.invariant: needs validation.mode rank0 (sharded validation adds each "
            "process's sums in an order that depends on their number)"
        )
