"""Samplers that stay correct under DDP.

Two ways to make a sampler distributed:

- :class:`DistributedSamplerWrapper` wraps *any* sampler. Every epoch each rank regenerates the
  wrapped sequence identically, from (seed, epoch) and without touching the global random
  state, and keeps every W-th element, streaming, as DistributedSampler does for a permutation.
- The native samplers (:class:`DistributedWeightedRandomSampler`,
  :class:`DistributedClassBalancedSampler`, :class:`ProgressiveClassBalancedSampler`) make draw
  i a pure function of (seed, epoch, i): a counter-based generator hashes the triple into a
  uniform number, which is turned into an index by inverting the cumulative weights. Rank r
  computes draws r, r + W, r + 2W, ... only, so its cost is O(N / W), and interleaving the ranks'
  draws gives exactly the draws of one process.

Sampling is with replacement. A native sampler's epoch has ``num_samples`` draws in total
(rounded up to a multiple of the world size, so that every rank takes the same number of
steps), whatever the number of processes.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler
from torch.utils.data.distributed import DistributedSampler

from ...config import TrainingConfig, check_kwargs, resolve
from ...errors import ConfigError, QGError, RunError, in_user_code
from ...parallel import distributed
from ..sources.datasets import dataset_labels, graph_attribute

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser: a bijection of uint64 that scrambles every bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def counter_uniforms(seed: int, epoch: int, index: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1), one per ``index``, each a function of (seed, epoch, index) alone."""
    with np.errstate(over="ignore"):
        key = _mix64(np.array([seed], dtype=np.uint64) * _GOLDEN + np.uint64(1))
        key = _mix64(key ^ (np.array([epoch], dtype=np.uint64) * _GOLDEN + np.uint64(2)))
        x = _mix64(index.astype(np.uint64) * _GOLDEN + key)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, for seeding torch generators per (seed, epoch)."""
    with np.errstate(over="ignore"):
        x = np.array([0], dtype=np.uint64)
        for part in parts:
            x = _mix64(x ^ (np.array([part], dtype=np.uint64) * _GOLDEN + np.uint64(3)))
    return int(x[0] >> np.uint64(1))


def shared_seed(seed: int | None) -> int:
    """``seed``, or when None, one random seed that every rank agrees on (rank 0's)."""
    if seed is not None:
        return int(seed)
    mine = int.from_bytes(os.urandom(8), "little") >> 1
    return int(distributed.broadcast_object(mine))


def _replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    w = distributed.get_world_size() if num_replicas is None else int(num_replicas)
    r = distributed.get_rank() if rank is None else int(rank)
    if w < 1 or not 0 <= r < w:
        raise ValueError(f"rank must be in [0, num_replicas), got rank {r} of {w}")
    return w, r


def class_weights(labels: Sequence[int] | torch.Tensor) -> np.ndarray:
    """Per-sample weights 1 / (size of its class): every class is drawn equally often."""
    y = np.asarray(torch.as_tensor(labels).reshape(-1), dtype=np.int64)
    if y.size == 0:
        raise ValueError("labels must not be empty")
    counts = np.bincount(y - y.min())
    return 1.0 / counts[y - y.min()]


class _CounterSampler(Sampler[int]):
    """Weighted draws with replacement; draw i depends on (seed, epoch, i) only."""

    def __init__(
        self,
        weights: Any,
        num_samples: int | None,
        num_replicas: int | None,
        rank: int | None,
        seed: int | None,
    ):
        w = np.asarray(torch.as_tensor(weights, dtype=torch.float64))
        if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be a non-empty 1-D sequence of finite numbers >= 0")
        if w.sum() <= 0:
            raise ValueError("weights must not all be zero")
        self.num_replicas, self.rank = _replicas(num_replicas, rank)
        self.total = int(num_samples) if num_samples is not None else w.size
        if self.total < 1:
            raise ValueError(f"num_samples must be positive, got {num_samples}")
        self.seed = shared_seed(seed)
        self.epoch = 0
        self._weights = w
        self._cdf = np.cumsum(w)  # built once; every epoch reuses it

    def cumulative_weights(self) -> np.ndarray:  # epoch-dependent in subclasses
        return self._cdf

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return math.ceil(self.total / self.num_replicas)

    def draws(self, positions: np.ndarray) -> np.ndarray:
        """The indices drawn at global positions ``positions`` of this epoch's sequence."""
        cdf = self.cumulative_weights()
        u = counter_uniforms(self.seed, self.epoch, positions) * cdf[-1]
        # Looking up sorted values walks the table once instead of jumping around it, which is
        # several times faster once the table outgrows the cache.
        order = np.argsort(u, kind="stable")
        found = np.empty_like(order)
        found[order] = np.searchsorted(cdf, u[order], side="right")
        return np.minimum(found, cdf.size - 1)

    def __iter__(self) -> Iterator[int]:
        positions = np.arange(self.rank, len(self) * self.num_replicas, self.num_replicas)
        return iter(self.draws(positions).tolist())


class DistributedWeightedRandomSampler(_CounterSampler):
    """Weighted sampling with replacement, split over the ranks of a DDP job.

    ``num_samples`` (default: the number of weights) draws per epoch in total over all ranks;
    ``num_replicas``/``rank`` default to the process group's (1 and 0 without one).
    """

    def __init__(
        self,
        weights: Any,
        num_samples: int | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int | None = None,
    ):
        super().__init__(weights, num_samples, num_replicas, rank, seed)


class DistributedClassBalancedSampler(_CounterSampler):
    """Every class equally likely in each draw, on each rank by itself; ranks draw apart."""

    def __init__(
        self,
        labels: Sequence[int] | torch.Tensor,
        num_replicas: int | None = None,
        rank: int | None = None,
        num_samples: int | None = None,
        seed: int | None = None,
    ):
        super().__init__(class_weights(labels), num_samples, num_replicas, rank, seed)


class ClassBalancedSampler(DistributedClassBalancedSampler):
    """Class-balanced sampling in one process (the same draws as the distributed one with W = 1)."""

    def __init__(
        self,
        labels: Sequence[int] | torch.Tensor,
        num_samples: int | None = None,
        seed: int | None = None,
    ):
        super().__init__(labels, num_replicas=1, rank=0, num_samples=num_samples, seed=seed)


class ProgressiveClassBalancedSampler(_CounterSampler):
    """From the natural class distribution (epoch 0) to a balanced one (``epochs_to_balance``).

    At epoch e class c is drawn with probability (1 - a) * n_c / N + a / K, a = min(1, e /
    epochs_to_balance). Distributed natively when ``num_replicas``/``rank`` are given or a process
    group exists.
    """

    def __init__(
        self,
        labels: Sequence[int] | torch.Tensor,
        num_samples: int | None = None,
        seed: int | None = None,
        epochs_to_balance: int = 10,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
    ):
        if epochs_to_balance < 1:
            raise ValueError(f"epochs_to_balance must be at least 1, got {epochs_to_balance}")
        y = np.asarray(torch.as_tensor(labels).reshape(-1), dtype=np.int64)
        super().__init__(np.ones(y.size), num_samples, num_replicas, rank, seed)
        self.epochs_to_balance = epochs_to_balance
        self._classes = y - y.min()
        self._counts = np.bincount(self._classes)
        self._cdf_epoch = -1

    def class_probabilities(self, epoch: int) -> np.ndarray:
        a = min(1.0, epoch / self.epochs_to_balance)
        present = self._counts > 0
        natural = self._counts / self._counts.sum()
        balanced = present / present.sum()
        return (1 - a) * natural + a * balanced

    def cumulative_weights(self) -> np.ndarray:
        if self._cdf_epoch != self.epoch:
            p = self.class_probabilities(self.epoch)
            with np.errstate(divide="ignore", invalid="ignore"):
                per_sample = np.where(self._counts > 0, p / self._counts, 0.0)[self._classes]
            self._cdf = np.cumsum(per_sample)
            self._cdf_epoch = self.epoch
        return self._cdf


class DistributedSamplerWrapper(Sampler[int]):
    """Makes any sampler DDP-correct: each rank takes its interleaved share of the same sequence.

    Each epoch the wrapped sampler is re-run identically on every rank: its ``generator`` (if it
    has one, as torch's samplers do) is reseeded from (seed, epoch), its ``set_epoch`` (if any)
    is called, and otherwise it runs on a private copy of torch's random state, so the global
    random state is never touched. Rank r keeps elements r, r + W, r + 2W, ..., padded by
    wrapping around to the start (or with ``drop_last``, the tail is dropped) as
    DistributedSampler does. Memory beyond the wrapped sampler's own is O(W): it streams.
    """

    def __init__(
        self,
        sampler: Sampler,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int | None = None,
        drop_last: bool = False,
    ):
        self.sampler = sampler
        self.num_replicas, self.rank = _replicas(num_replicas, rank)
        self.seed = shared_seed(seed)
        self.drop_last = drop_last
        self.epoch = 0
        n = len(sampler)
        w = self.num_replicas
        self.num_samples = n // w if drop_last else math.ceil(n / w)
        self.total_size = self.num_samples * w

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def _sequence(self) -> Iterator[int]:
        if hasattr(self.sampler, "generator"):
            self.sampler.generator = torch.Generator().manual_seed(
                derive_seed(self.seed, self.epoch)
            )
            return iter(self.sampler)
        return _private_rng_iter(self.sampler, derive_seed(self.seed, self.epoch))

    def __iter__(self) -> Iterator[int]:
        n, w, r = len(self.sampler), self.num_replicas, self.rank
        it = self._sequence()
        head = list(itertools.islice(it, w))  # positions 0 .. w-1, kept for the padding
        mine = len(range(r, min(n, self.total_size), w))  # real elements of this rank
        if mine:
            yield head[r]
            yield from itertools.islice(it, r, r + (mine - 1) * w, w)
        for position in range(r + mine * w, self.total_size, w):  # padding by wrapping around
            yield head[(position - n) % len(head)]


def _private_rng_iter(sampler: Sampler, seed: int, chunk: int = 4096) -> Iterator[int]:
    """Iterate ``sampler`` on its own torch random state, restoring the global one in between."""
    state = torch.Generator().manual_seed(seed).get_state()
    it = None
    while True:
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(state)
            if it is None:
                it = iter(sampler)
            items = list(itertools.islice(it, chunk))
            state = torch.get_rng_state()
        if not items:
            return
        yield from items


def build_sampler(
    training: TrainingConfig, dataset: Any, *, num_replicas: int, rank: int, label: str = "y"
) -> Sampler:
    """The training sampler of ``training.sampler``, split between ``num_replicas`` processes.

    null: a shuffle drawn from (``training.seed``, epoch). ``class_balanced``, ``progressive``
    and ``weighted`` (per-graph ``weight`` attributes) are native; the first two balance the
    classes of the graph attribute ``label`` (the config's first graph-level classification
    or binary task's target); a dotted path names a callable
    ``f(dataset, **sampler_kwargs)`` returning any sampler over ``range(len(dataset))``, which is
    wrapped in :class:`DistributedSamplerWrapper`, in one process too: the wrapper reseeds it
    from (seed, epoch). So for any number of processes global batch k holds the same graphs
    (see :func:`~QuantumGravPy.runs.reproducibility.invariance_breaks`), and a resumed run draws
    what an uninterrupted one would have.
    """
    spec, seed, kwargs = training.sampler, training.seed, training.sampler_kwargs
    if spec is None:
        return DistributedSampler(
            dataset,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=True,
            seed=seed,  # one seed on every rank: together the shards partition each epoch
            drop_last=training.drop_last,
        )
    key = "training.sampler_kwargs"
    native = {
        "class_balanced": (DistributedClassBalancedSampler, lambda: dataset_labels(dataset, label)),
        "progressive": (ProgressiveClassBalancedSampler, lambda: dataset_labels(dataset, label)),
        "weighted": (DistributedWeightedRandomSampler, lambda: graph_attribute(dataset, "weight")),
    }
    if spec in native:
        cls, values = native[spec]
        ours = ("num_replicas", "rank", "seed")
        check_kwargs(cls, kwargs, key, given=1, passed=ours, name=spec)
        inputs = values()
        try:
            return cls(inputs, num_replicas=num_replicas, rank=rank, seed=seed, **kwargs)
        except ValueError as e:  # a value the sampler refuses
            raise ConfigError(f"{key}: {spec} rejected them: {e}") from e
    make = resolve(spec, key="training.sampler")
    check_kwargs(make, kwargs, key, given=1, name=spec)
    try:
        sampler = make(dataset, **kwargs)
    except (QGError, RunError):
        raise
    except Exception as e:  # the user's sampler: what it raised, where
        doing = f"in training.sampler {spec}(dataset, **{kwargs})"
        raise in_user_code(e, doing) or ConfigError(f"{key}: {spec} rejected them: {e}") from e
    return DistributedSamplerWrapper(
        sampler, num_replicas=num_replicas, rank=rank, seed=seed, drop_last=training.drop_last
    )
