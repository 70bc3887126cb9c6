"""torch's FSDP2 internals: the class of its default reduce-scatter, which a custom collective
(``fully_shard``'s public hook, ``set_custom_reduce_scatter``) extends to time each call
(written for torch 2.8-2.13)."""

from __future__ import annotations

from . import moved

DISTRIBUTION = "torch"
WHERE = "torch.distributed.fsdp._fully_shard._fsdp_collectives"


def default_reduce_scatter() -> type:
    """FSDP's own reduce-scatter, as a class to extend."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    return DefaultReduceScatter


def check() -> None:
    try:
        cls = default_reduce_scatter()
    except ImportError as e:
        raise moved(DISTRIBUTION, f"{WHERE}.DefaultReduceScatter is gone ({e})") from None
    if "__call__" not in vars(cls):
        raise moved(DISTRIBUTION, "FSDP's DefaultReduceScatter is no longer called to reduce")
    from torch.distributed.fsdp import FSDPModule

    if not hasattr(FSDPModule, "set_custom_reduce_scatter"):
        raise moved(DISTRIBUTION, "FSDPModule.set_custom_reduce_scatter is gone")
