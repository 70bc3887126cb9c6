"""Predictions of a model that draws random numbers in evaluation (a VAE sampling its latent):
the same for the same seed on any number of processes, and said when no seed was given.

With a seed, each batch's forward pass runs with torch's generators seeded from (the seed, the
position of the batch's first graph in the input): batches hold the same graphs for any number
of processes (:mod:`.run`), so each graph sees the same draws wherever it is computed; the
caller's generators are left as they were. Without one, the default generator's state is
compared before and after each forward pass (a copy of a few kilobytes), to say whether the
model drew from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError, option


def check_seed(seed: Any) -> int | None:
    """``seed`` (of ``qg.predict``, or ``--seed``): None, or a whole number >= 0."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"{option('seed')}: expected a whole number >= 0, found {seed!r}")
    return int(seed)


def batch_seed(seed: int, first: int) -> int:
    """The seed of the batch whose first graph is input ``first``: independent streams for
    neighbouring batches and seeds (numpy's SeedSequence mixes both)."""
    return int(np.random.SeedSequence([seed, first]).generate_state(1, np.uint64)[0])


class Seeded(nn.Module):
    """``model`` whose k-th forward pass is the batch starting at input ``firsts[k]``, run with
    torch's generators seeded for it (``seed`` given), or watched for draws (``drew``)."""

    def __init__(self, model: nn.Module, firsts: Sequence[int], seed: int | None, device: Any):
        super().__init__()
        self.model = model
        self.seed = seed
        self._firsts: Iterator[int] = iter(firsts)
        cuda = torch.device(device).type == "cuda" if device is not None else False
        self._devices = [torch.device(device).index or 0] if cuda else []
        self.drew = False

    def forward(self, batch: Any) -> Any:
        first = next(self._firsts)
        if self.seed is None:
            before = _states(self._devices)
            out = self.model(batch)
            self.drew = self.drew or not all(
                torch.equal(a, b) for a, b in zip(before, _states(self._devices), strict=True)
            )
            return out
        with torch.random.fork_rng(devices=self._devices):
            torch.manual_seed(batch_seed(self.seed, first))
            return self.model(batch)


def _states(devices: list[int]) -> list[torch.Tensor]:
    return [torch.random.get_rng_state(), *(torch.cuda.get_rng_state(d) for d in devices)]


def drew_notice() -> str:
    return (
        "the model drew random numbers in evaluation, so its predictions change from call to "
        f"call: give {option('seed')}{' N' if option('seed').startswith('-') else '=N'} for the "
        "same predictions on every call and any number of processes"
    )
